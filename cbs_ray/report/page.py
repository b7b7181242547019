"""The pieces every method's report page is built of: the stylesheet of ``report.html``, a cell's text, tables in
markdown and HTML, and the answer box.
"""

from __future__ import annotations

import html
import math

__all__ = ["STYLE", "format_value", "markdown_table", "html_table", "html_answer_box"]

STYLE = """body{font-family:system-ui,sans-serif;max-width:980px;margin:1.5em auto;padding:0 1em;color:#222;
line-height:1.4}h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin:1.4em 0 .4em}
.meta{color:#555;font-size:.9em;margin-top:0}
.answer{border:2px solid #2a7a3f;border-radius:8px;background:#f2faf4;padding:.8em 1.2em;margin:1em 0}
.answer.unsure{border-color:#c98a00;background:#fff9ec}.answer .cb{font-size:1.9em;font-weight:600}
.answer .how{font-size:1.02em;margin:.1em 0}.answer .small{font-size:.88em;color:#333;margin:.5em 0 .25em}
.answer .note{font-size:.88em;color:#7a4d00;margin:.25em 0}.answer .cols{display:flex;flex-wrap:wrap;gap:1.2em}
.answer .main{flex:3 1 420px}.answer .rec{flex:1 1 220px;font-size:.9em;border-left:1px solid #ddd;padding-left:1em}
.answer pre{background:#fff;border:1px solid #ddd;padding:.4em .7em;font-size:.82em;margin:.4em 0 0;
display:block;overflow-x:auto}ul.readings{font-size:.86em;padding-left:1.2em}ul.readings li{margin:.15em 0}
table{border-collapse:collapse;font-size:.8em;margin:.3em 0}td,th{border:1px solid #ccc;padding:2px 6px;
text-align:right}th{background:#f1f1f1}.wide{overflow-x:auto;max-width:100%}
details{margin:.5em 0}summary{cursor:pointer;color:#1f4e8c;font-size:.9em}
figure{margin:.5em 0}img{max-width:100%;height:auto}figcaption{font-size:.8em;color:#666}
.lead img{max-width:640px;width:100%}.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));
gap:1em}"""


def format_value(v) -> str:
    """A cell as the tables write it: "–" for nothing (None, NaN, an empty list), a float to 4 digits, a list
    joined by commas."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return ", ".join(format_value(x) for x in v) or "–"
    return str(v)


def markdown_table(records: list[dict], columns: list[str]) -> str:
    """The ``columns`` some record has, one row per record; "_none_" where there is nothing to show."""
    columns = [c for c in columns if any(c in r for r in records)]
    if not records or not columns:
        return "_none_\n"
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(format_value(r.get(c)) for c in columns) + " |" for r in records]
    return "\n".join(lines) + "\n"


def html_table(records: list[dict], columns: list[str]) -> str:
    """``markdown_table`` for report.html: the columns some record has, escaped, in a scrolling box."""
    columns = [c for c in columns if any(c in r for r in records)]
    if not records or not columns:
        return "<p><em>none</em></p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(format_value(r.get(c)))}</td>" for c in columns) + "</tr>"
                   for r in records)
    return f'<div class="wide"><table><tr>{head}</tr>{body}</table></div>'


def html_answer_box(lines: list[str], sure: bool) -> str:
    """report.html's answer box: the headline's first line in bold, the rest small; ``sure`` False marks it
    unsure (a refusal, a trend that does not hold)."""
    esc = html.escape
    return (f'<div class="answer{"" if sure else " unsure"}"><div class="how"><b>{esc(lines[0])}</b></div>\n'
            + "".join(f'<div class="small">{esc(line.strip())}</div>' for line in lines[1:]) + "</div>")
