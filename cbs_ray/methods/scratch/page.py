"""The from-scratch report's pages: ``report.md`` and a self-contained ``report.html`` (plots embedded), built of
the pieces every method's page shares (``report.page``).
"""

from __future__ import annotations

import base64
from pathlib import Path

import pandas as pd

from cbs_ray.analysis.bounds import bound_text
from cbs_ray.maths.importance import MIN_TRIALS, MIN_TRIALS_PER_BATCH, PARAMS, TOP_QUANTILE
from cbs_ray.methods.scratch.answer import CROSS_CHECKS, EFFORT_MARK
from cbs_ray.methods.scratch.headline import decision_lines, headline, recommendation_line
from cbs_ray.methods.scratch.summary import Summary
from cbs_ray.methods.scratch.trainer_snippets import recommendation_snippet, training_arguments
from cbs_ray.records.columns import Column
from cbs_ray.report.page import STYLE, format_value, markdown_table

__all__ = ["render_markdown", "render_html"]


# The per-batch table's columns, in the page's order; "{metric}" stands for the search's metric.
PER_BATCH_COLUMNS = [Column.batch_size, Column.trials, Column.completed, Column.stopped, Column.diverged,
                     Column.diverged_peak_lrs, Column.failed, "best_{metric}", "fit_{metric}", "dev_{metric}",
                     Column.runs, "mean_{metric}", "se_{metric}", Column.alpha, Column.warmup_fraction, Column.peak_lr,
                     Column.steps_to_target, Column.samples_to_target, Column.wall_time_s, Column.samples_per_s,
                     Column.b_simple_early, Column.b_simple_mean]
# The per-batch columns the page shows first (the rest fold under "all columns"): what the answer rests on.
KEY_COLUMNS = [Column.batch_size, Column.trials, Column.completed, "best_{metric}", "mean_{metric}", "se_{metric}",
               "fit_{metric}", Column.peak_lr, Column.steps_to_target]
PARETO_COLUMNS = [Column.batch_size, Column.alpha, Column.warmup_fraction, Column.peak_lr, Column.projected_time_s,
                  Column.wall_time_s, "{metric}"]
FIRST_PLOT = "metric_vs_batch"  # shown right under the answer; the others after the tables


def _columns(names: list[str], metric: str) -> list[str]:
    return [c.format(metric=metric) for c in names]


IMPORTANCE_COLUMNS = ["over", "trials", *PARAMS, "note"]  # a parameter's share as a percentage


def _importance(summary: Summary) -> tuple[str, list[dict]]:
    """The "What mattered" section: the line saying how to read it, and its table (over all trials, then per
    batch size; "–" where a parameter did not vary, or was not read at all)."""
    imp = summary.importance
    intro = (f"Each parameter's share of the importance ({imp.evaluator}, Optuna: how differently its values "
             f"spread among the top {TOP_QUANTILE:.0%} of completed trials by {summary.metric} than among all of "
             f"them). Within a batch size only alpha and warmup vary. A reading needs {MIN_TRIALS} completed "
             f"trials overall, {MIN_TRIALS_PER_BATCH} per batch size.")
    rows = [{"over": "all trials" if r.batch_size is None else f"B={r.batch_size}", "trials": r.trials,
             **{p: f"{v:.0%}" for p, v in (r.params or {}).items() if v is not None}, "note": r.note}
            for r in [imp.overall, *imp.per_batch_size]]
    return intro, rows


def _answer_parts(summary: Summary) -> tuple[str, str]:
    """The answer's value ("≥ 128") and the rest of its line (reading, bound, how sure, cross-checks)."""
    answer = summary.answer
    value = bound_text(answer.batch_size, answer.bound)
    rest = answer.text.split(f"Critical batch: {value}", 1)[-1].strip()
    return value, rest[1:-1] if rest.startswith("(") and rest.endswith(")") else rest


def _readings(summary: Summary) -> list[str]:
    """The headline after the answer, its cross-checks and notes, up to the recommendation: every reading
    in full (the answer box says the rest)."""
    lines = headline(summary)[len(decision_lines(summary)) + 2 + len(summary.answer.notes):]
    return lines[:next((i for i, line in enumerate(lines) if line.startswith("Recommendation:")), len(lines))]


def render_markdown(summary: Summary, plots: dict[str, Path]) -> str:
    """report.md: the answer on top (a quote block), the metric-vs-batch plot, every reading, the tables
    (key columns, then all), the other plots."""
    metric, answer = summary.metric, summary.answer
    pcols = _columns(PARETO_COLUMNS, metric)
    value, rest = _answer_parts(summary)
    importance_intro, importance_rows = _importance(summary)
    box = [f"**Critical batch: {value}**" + (f" ({rest})" if rest else ""), answer.cross_checks]
    box += [f"Unequal search effort: {note}" for note in answer.notes]
    box += recommendation_line(summary.recommendation, metric).split("\n")
    parts = [*(f"{line}\n" for line in decision_lines(summary)),
             f"# Critical batch report: {summary.name or ''}\n",
             f"Experiment: `{summary.experiment_path}`; metric **{metric}** ({summary.mode}), "
             f"equal-sample budget {summary.budget_samples} samples per trial.\n",
             "\n>\n".join(f"> {line.strip()}" for line in box) + "\n"]
    if summary.recommendation:
        parts.append("Paste into a training config:\n\n```yaml\n" + recommendation_snippet(summary) + "```\n")
    if training_arguments(summary):
        parts.append("Or into a Hugging Face Trainer:\n\n```python\n" + training_arguments(summary) + "```\n")
    if FIRST_PLOT in plots:
        parts.append(f"![{FIRST_PLOT}]({plots[FIRST_PLOT].name})\n")
    parts += ["## Readings\n", "\n".join(f"- {line}" for line in _readings(summary)) + "\n",
              "## Per batch size\n", markdown_table(summary.per_batch, _columns(KEY_COLUMNS, metric)),
              "\nAll columns:\n", markdown_table(summary.per_batch, _columns(PER_BATCH_COLUMNS, metric)),
              "\n## What mattered\n", importance_intro + "\n", markdown_table(importance_rows, IMPORTANCE_COLUMNS),
              "\n## Pareto front (projected time = budget ÷ measured samples/s)\n",
              markdown_table(summary.pareto_projected, pcols),
              "\n## Pareto front (measured wall time)\n", markdown_table(summary.pareto, pcols)]
    parts += [f"\n![{name}]({path.name})\n" for name, path in plots.items() if name != FIRST_PLOT]
    return "\n".join(parts)


CAPTIONS = {"metric_vs_batch": "Quality at equal samples vs batch size: the turning point",
            "steps_vs_samples": "Steps vs samples to the target: the tradeoff and the 20% rule",
            "pareto": "Training time vs quality: the Pareto front and the recommendation",
            "lr_vs_batch": "Best peak learning rate vs batch size",
            "noise_scale": "Gradient noise scale during training"}


def _answer_box(summary: Summary) -> str:
    """The page's first block: the critical batch, how sure, cross-checks, notes, the recommended config."""
    import html

    answer, esc = summary.answer, html.escape
    value, rest = _answer_parts(summary)
    sure = answer.resolved is True and answer.bound is None and answer.cross_checks_agree is not False
    rec_lines = recommendation_line(summary.recommendation, summary.metric).split("\n")
    notes = [f"Unequal search effort: {n}" for n in answer.notes] + [line.strip() for line in rec_lines[1:]]
    snippet, hf_args = recommendation_snippet(summary), training_arguments(summary)
    # One row per part of the answer line; its short cross-check and note marks give way to the full lines.
    rows = [part for part in rest.split("; ") if part not in set(CROSS_CHECKS.values()) | {EFFORT_MARK}]
    decided = "".join(f'<div class="how"><b>{esc(line)}</b></div>' for line in decision_lines(summary))
    return (f'<div class="answer{"" if sure else " unsure"}">{decided}<div class="cols"><div class="main">'
            f'<div class="cb">Critical batch: {esc(value)}</div>'
            + "".join(f'<div class="how">{esc(row)}</div>' for row in rows)
            + f'<div class="small">{esc(answer.cross_checks)}</div>'
            + "".join(f'<div class="note">{esc(n)}</div>' for n in notes)
            + f'</div><div class="rec"><b>Recommended config</b><br>{esc(rec_lines[0].split(": ", 1)[-1])}'
            + (f"<pre>{esc(snippet)}</pre>" if snippet else "")
            + (f"<pre>{esc(hf_args)}</pre>" if hf_args else "") + "</div></div></div>")


def render_html(summary: Summary, plots: dict[str, Path]) -> str:
    """report.html, self-contained (images embedded): the answer in a box, the metric-vs-batch plot, every
    reading, the tables fitting the page (key columns; the rest folded under <details>), the other plots."""
    import html

    metric = summary.metric
    pcols = _columns(PARETO_COLUMNS, metric)

    def table(records, columns):
        frame = pd.DataFrame(records)
        if frame.empty:
            return "<p><em>none</em></p>"
        # Cells as the markdown writes them (None, NaN, lists); headers may wrap after an underscore.
        frame = frame[[c for c in columns if c in frame]].map(lambda v: html.escape(format_value(v)))
        frame.columns = [html.escape(c).replace("_", "_<wbr>") for c in frame.columns]
        return '<div class="wide">' + frame.to_html(index=False, border=0, escape=False) + "</div>"

    def figure(name, path):
        data = base64.b64encode(path.read_bytes()).decode()
        return (f'<figure><img alt="{name}" src="data:image/png;base64,{data}">'
                f"<figcaption>{html.escape(CAPTIONS.get(name, name))}</figcaption></figure>")

    lead = figure(FIRST_PLOT, plots[FIRST_PLOT]) if FIRST_PLOT in plots else ""
    others = "".join(figure(name, path) for name, path in plots.items() if name != FIRST_PLOT)
    readings = "".join(f"<li>{html.escape(line.strip())}</li>" for line in _readings(summary))
    importance_intro, importance_rows = _importance(summary)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Critical batch report: {html.escape(str(summary.name or ''))}</title><style>{STYLE}</style></head><body>
<h1>Critical batch report: {html.escape(str(summary.name or ''))}</h1>
<p class="meta">Experiment <code>{html.escape(str(summary.experiment_path))}</code>; metric <b>{html.escape(metric)}</b>
({html.escape(str(summary.mode))}), equal-sample budget {summary.budget_samples} samples per trial.</p>
{_answer_box(summary)}
<div class="lead">{lead}</div>
<h2>Readings</h2><ul class="readings">{readings}</ul>
<h2>Per batch size</h2>{table(summary.per_batch, _columns(KEY_COLUMNS, metric))}
<details><summary>All columns</summary>{table(summary.per_batch, _columns(PER_BATCH_COLUMNS, metric))}</details>
<h2>What mattered</h2><p class="meta">{html.escape(importance_intro)}</p>{table(importance_rows, IMPORTANCE_COLUMNS)}
<h2>Pareto front (projected time = budget ÷ measured samples/s)</h2>{table(summary.pareto_projected, pcols)}
<details><summary>Pareto front on measured wall time</summary>{table(summary.pareto, pcols)}</details>
<h2>Other plots</h2><div class="plots">{others}</div>
</body></html>
"""
