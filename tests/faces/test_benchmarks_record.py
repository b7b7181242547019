"""BENCHMARKS.md (the figures that stand, by topic) and docs/benchmarks-archive.md (the record, in issue order) stay
linked: every link in them and in bench/README.md resolves to a heading or a short ``<a id>`` anchor (GitHub's slug
rule, as ``test_readme_and_docs`` reads it), every citation of an anchor in the code, the specs and the docs
(``BENCHMARKS.md#topic``, ``docs/benchmarks-archive.md#issue-36-s4b``) names one that exists, nothing cites an
"issue N" of BENCHMARKS.md (those sections live in the record now), and every figure in BENCHMARKS.md's tables
keeps its command."""

import re
from pathlib import Path

import pytest
from test_readme_and_docs import anchors, broken_links, outside_fences

from helpers.paths import ROOT

BENCHMARKS = ROOT / "BENCHMARKS.md"
ARCHIVE = ROOT / "docs" / "benchmarks-archive.md"
PAGES = [BENCHMARKS, ARCHIVE, ROOT / "bench" / "README.md"]
CITING = ["README.md", "BENCHMARKS.md", "docs/*.md", "bench/*", "cbs_ray/**/*.py", "tests/**/*.py",
          "search_spaces/*.yaml"]

# BENCHMARKS.md#the-ladder-and-the-prediction, docs/benchmarks-archive.md#issue-36-s3 and #issue-36-s4a
CITATION = re.compile(r"(BENCHMARKS\.md|benchmarks-archive\.md)#([\w-]+)((?:(?:,| and) #[\w-]+)*)")
# "BENCHMARKS.md, issue 38", "BENCHMARKS.md issue 36", 'BENCHMARKS.md, "Issue 48"': the old sections, now the record's
STALE = re.compile(r"BENCHMARKS\.md,?\s+\"?issues?\s+\d", re.IGNORECASE)


def citations(text: str) -> list[tuple[str, str]]:
    """(file, anchor) for every anchored citation of BENCHMARKS.md or the record, a trailing "and #x" included."""
    found = []
    for m in CITATION.finditer(text):
        name = "BENCHMARKS.md" if m.group(1) == "BENCHMARKS.md" else "benchmarks-archive.md"
        found += [(name, m.group(2))] + [(name, a) for a in re.findall(r"#([\w-]+)", m.group(3))]
    return found


def bad_citations(text: str, anchors_of: dict[str, set[str]]) -> list[str]:
    return [f"{name}#{anchor}" for name, anchor in citations(text) if anchor not in anchors_of[name]]


def citing_files() -> list[Path]:
    files = {p for pattern in CITING for p in ROOT.glob(pattern) if p.is_file() and p not in (ARCHIVE, Path(__file__))}
    return sorted(p for p in files if p.suffix in {".md", ".py", ".yaml", ".sh"} and ".venv" not in p.parts)


def table_rows(text: str) -> list[tuple[str, dict[str, str]]]:
    """Every row of every table outside code, as {header: cell}, with the heading it sits under."""
    rows, header, heading = [], None, ""
    for line in outside_fences(text):
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("-: "):
            rows.append((heading, dict(zip(header, cells))))
    return rows


def rows_without_a_command(text: str) -> list[str]:
    """Rows whose command cell holds no command: a code span, "the same" (the row above's), or "none: why"."""
    return [f"{heading}: {row.get('figure', row)}" for heading, row in table_rows(text) if "command" in row and
            "`" not in row["command"] and not row["command"].startswith(("none", "the same"))]


ANCHORS = {"BENCHMARKS.md": anchors(BENCHMARKS.read_text()), "benchmarks-archive.md": anchors(ARCHIVE.read_text())}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_in_the_benchmark_pages_resolves(page):
    assert broken_links(page) == []


def test_every_anchored_citation_names_an_anchor_that_exists():
    bad, stale = [], []
    for path in citing_files():
        text, name = path.read_text(errors="replace"), str(path.relative_to(ROOT))
        bad += [f"{name}: {c}" for c in bad_citations(text, ANCHORS)]
        stale += [f"{name}: {c}" for c in STALE.findall(text)]
    assert bad == []
    assert stale == [], "cite BENCHMARKS.md#<topic> or docs/benchmarks-archive.md#issue-N instead"


def test_every_figure_in_benchmarks_md_keeps_its_command_and_its_source():
    text = BENCHMARKS.read_text()
    assert rows_without_a_command(text) == []
    sourced = [(h, row) for h, row in table_rows(text) if "command" in row]
    unsourced = [row["figure"] for h, row in sourced
                 if "benchmarks-archive.md#" not in row.get("from", row.get("section", "")) and
                 "no section in the record" not in row.get("from", row.get("section", ""))]
    assert unsourced == []


def test_the_current_figures_come_first_and_every_topic_links_the_record():
    text = BENCHMARKS.read_text()
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    assert sections[0].startswith("Current figures"), "BENCHMARKS.md opens with its current figures"
    for section in sections[1:]:
        assert "benchmarks-archive.md#" in section, f"## {section.splitlines()[0]}: no link to the record"


def test_the_record_keeps_every_issue_in_order():
    numbers = [int(m) for m in re.findall(r'^<a id="issue-(\d+)"></a>', ARCHIVE.read_text(), re.MULTILINE)]
    assert len(numbers) >= 20 and {2, 7, 36, 49, 51} <= set(numbers)
    assert numbers.index(2) == 0, "the record starts at issue 2, in issue order as written"


# The checks themselves, on inputs whose answer is known.

def test_the_citation_checks_find_a_missing_anchor_and_a_stale_citation():
    known = {"BENCHMARKS.md": {"noise-scale"}, "benchmarks-archive.md": {"issue-7", "issue-36-s3"}}
    text = ("see BENCHMARKS.md#noise-scale and docs/benchmarks-archive.md#issue-36-s3 and #issue-36-s9; "
            "also BENCHMARKS.md#nowhere")
    assert citations(text) == [("BENCHMARKS.md", "noise-scale"), ("benchmarks-archive.md", "issue-36-s3"),
                               ("benchmarks-archive.md", "issue-36-s9"), ("BENCHMARKS.md", "nowhere")]
    assert bad_citations(text, known) == ["benchmarks-archive.md#issue-36-s9", "BENCHMARKS.md#nowhere"]
    assert STALE.findall("(BENCHMARKS.md, issue 38)") and STALE.findall('(BENCHMARKS.md, "Issue 48")')
    assert not STALE.findall("moved here from BENCHMARKS.md by issue 46")


def test_a_figure_without_its_command_is_found():
    text = ("## T\n\n| figure | value | command | from |\n| --- | --- | --- | --- |\n"
            "| a | 1 | `python bench/a.py` | x |\n| b | 2 | by hand | y |\n| c | 3 | none: on paper | z |\n"
            "| d | 4 | the same | w |\n")
    assert rows_without_a_command(text) == ["T: b"]
    assert [row["value"] for _, row in table_rows(text)] == ["1", "2", "3", "4"]
