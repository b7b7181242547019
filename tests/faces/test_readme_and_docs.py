"""README.md and docs/ stay true: every relative link resolves (to a file, and to a heading by GitHub's slug rule),
README's quick-start commands run as written (the search with --dry-run, the install checked against
pyproject.toml without installing, the test command collecting one small folder), and README stays short.
No Ray starts: the search's --dry-run stops before it."""

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from helpers.paths import ROOT

try:
    import tomllib  # Python 3.11+
except ModuleNotFoundError:  # Python 3.10: pytest brings tomli there
    import tomli as tomllib

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 200
PYTEST_FOLDER = "tests/maths"  # the test command collects this one small folder, never the whole suite

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")  # [text](target "title"), images too
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")  # [label]: target
CODE_SPAN = re.compile(r"(`+)(?:(?!\n\s*\n).)*?\1", re.DOTALL)  # may wrap, never past a blank line
SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*:|//)")  # http:, https:, mailto:, protocol-relative


# ---- Markdown, read simply --------------------------------------------------------------------------

def outside_fences(text: str) -> list[str]:
    lines, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence:
            lines.append(line)
    return lines


def link_targets(text: str) -> list[str]:
    """The targets of inline links and images, and of reference definitions, outside code."""
    prose = CODE_SPAN.sub("", "\n".join(outside_fences(text)))  # a link inside code is no link
    return INLINE_LINK.findall(prose) + [m.group(1) for line in prose.splitlines() if (m := REFERENCE_LINK.match(line))]


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text lower-cased, punctuation but '-' and '_' dropped,
    spaces made '-' (``Encoder-decoder (T5)`` -> ``encoder-decoder-t5``)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


HTML_ANCHOR = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']\s*>""")  # <a id="issue-36"></a>: a short anchor


def anchors(text: str) -> set[str]:
    """Every heading's anchor (GitHub numbers a repeated one: x, x-1, x-2) and every ``<a id="...">``'s."""
    found, repeats = set(), {}
    for line in outside_fences(text):
        if m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line):
            slug = github_slug(m.group(1))
            n = repeats[slug] = repeats.get(slug, -1) + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
        found.update(HTML_ANCHOR.findall(line))
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in link_targets(page.read_text()):
        if SCHEME.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target}: no file {resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved}")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text()):
            broken.append(f"{target}: no heading '#{anchor}' in {resolved.relative_to(ROOT)}")
    return broken


# A page named in code, a docstring, a comment or prose (not a link): docs/<page>.md or a root page, with an anchor.
PAGE_MENTION = re.compile(r"(?<![\w/.-])(?:\.\./)?((?:docs/[\w.-]+|README|BENCHMARKS)\.md)(?:#([a-z0-9_-]+)(?![\w-]))?")
MENTIONING = [*ROOT.glob("*.md"), *ROOT.glob("*.toml"), *ROOT.glob("*.yaml"), ROOT / ".ci" / "run",
              *(p for folder in ("cbs_ray", "tests", "bench", "examples", "search_spaces", "deploy", "docs")
                for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".md", ".yaml", ".yml", ".sh", ".txt"}
                and "experiments" not in p.parts)]
BAD_ON_PURPOSE = {"tests/faces/test_benchmarks_record.py": "BENCHMARKS.md's checks, fed anchors that do not exist",
                  "tests/faces/test_readme_and_docs.py": "this scan's own check, fed pages that do not exist"}


@functools.lru_cache(maxsize=None)
def page_anchors(page: str) -> frozenset:
    return frozenset(anchors((ROOT / page).read_text()))


def unresolved_mentions(text: str) -> list[str]:
    """Pages ``text`` names by their path from the repository's root that do not exist, or whose anchor no heading
    of theirs has."""
    broken = []
    for page, anchor in PAGE_MENTION.findall(text):
        path = ROOT / page
        if not path.is_file():
            broken.append(f"{page}: no such file")
        elif anchor and anchor not in page_anchors(page):
            broken.append(f"{page}#{anchor}: no such heading")
    return broken


def quick_start_commands(text: str) -> list[str]:
    """The shell commands of the first code block under README's "Quick start" heading, comments dropped."""
    after = text.split("\n## Quick start", 1)
    assert len(after) == 2, 'README.md has no "## Quick start" heading'
    block = re.search(r"^```[a-z]*\n(.*?)^```", after[1], re.MULTILINE | re.DOTALL)
    assert block, 'README.md\'s "Quick start" has no code block'
    return [line.strip() for line in block.group(1).splitlines() if shlex.split(line, comments=True)]


# ---- what each quick-start command is checked by ----------------------------------------------------

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def venv_which(name: str) -> str | None:
    """The executable the README's command names, looked up in this interpreter's bin first (the venv)."""
    return shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def extras_of_project() -> dict[str, list[Requirement]]:
    return {name: [Requirement(r) for r in reqs] for name, reqs in PYPROJECT.get("optional-dependencies", {}).items()}


def check_install(argv: list[str]) -> None:
    """``pip install REQ ...`` checked against pyproject.toml, installing nothing and reaching no index: a local
    path must hold the project and name only extras it defines (those an extra pulls in of the project itself
    too); a named requirement must be one of the project's dependencies, pinned inside the project's range."""
    assert argv[:2] == ["pip", "install"], argv
    project = canonicalize_name(PYPROJECT["name"])
    dependencies = {canonicalize_name(r.name): r for r in map(Requirement, PYPROJECT["dependencies"])}
    extras = extras_of_project()
    for arg in argv[2:]:
        assert not arg.startswith("-"), f"{arg}: an install option this test does not check"
        if m := re.fullmatch(r"(\.{1,2}(?:/[^\[]*)?)(?:\[(.*)\])?", arg):
            assert (ROOT / m.group(1) / "pyproject.toml").is_file(), f"{arg}: no pyproject.toml at {m.group(1)}"
            wanted = [e.strip() for e in (m.group(2) or "").split(",") if e.strip()]
            while wanted:
                extra = wanted.pop()
                assert extra in extras, f"{arg}: pyproject.toml defines no extra {extra!r} (it has {sorted(extras)})"
                wanted += [e for r in extras[extra] if canonicalize_name(r.name) == project for e in r.extras]
            continue
        requirement = Requirement(arg)
        name = canonicalize_name(requirement.name)
        assert name in dependencies, f"{arg}: {requirement.name} is not a dependency in pyproject.toml"
        for pin in (s.version for s in requirement.specifier if s.operator == "=="):
            assert dependencies[name].specifier.contains(pin, prereleases=True), \
                f"{arg}: {pin} is outside pyproject.toml's {dependencies[name]}"


def search_argv(argv: list[str]) -> list[str]:
    """The search command as written, with --dry-run. ``cbs-ray ...`` runs the console script where this venv
    has it, else the entry point pyproject.toml declares for it, called with the same arguments."""
    if argv[:3] == ["python", "-m", "cbs_ray.search"]:
        return [sys.executable, *argv[1:], "--dry-run"]
    assert argv[0] == "cbs-ray", f"{argv[0]}: not a search command"
    if script := venv_which("cbs-ray"):
        return [script, *argv[1:], "--dry-run"]
    target = PYPROJECT.get("scripts", {}).get("cbs-ray")
    assert target, "README runs cbs-ray, which pyproject.toml's [project.scripts] does not declare"
    module, _, function = target.partition(":")
    assert callable(getattr(import_module(module), function, None)), f"{target}: no such function"
    return [sys.executable, "-c", f"import sys; from {module} import {function}; sys.exit({function}())",
            *argv[1:], "--dry-run"]


def run(argv: list[str], timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=False, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def tail(done: subprocess.CompletedProcess) -> str:
    return (done.stdout[-1500:] + "\n" + done.stderr[-1500:]).strip()


def check_search(argv: list[str]) -> None:
    done = run(search_argv(argv), timeout=120)
    assert done.returncode == 0, f"{shlex.join(argv)} --dry-run exited {done.returncode}:\n{tail(done)}"
    assert re.search(r"B=\d+ = \d+ micro", done.stdout), f"no plan printed:\n{done.stdout[-2000:]}"


def check_tests(argv: list[str]) -> None:
    executable = venv_which(argv[0])
    assert executable, f"{argv[0]}: not installed"
    done = run([executable, *argv[1:], "--collect-only", "-q", PYTEST_FOLDER], timeout=120)
    assert done.returncode == 0, f"{shlex.join(argv)} --collect-only exited {done.returncode}:\n{tail(done)}"
    assert re.search(r"\d+ tests? collected", done.stdout), done.stdout[-2000:]


def kind_of(argv: list[str]) -> str:
    if argv[:2] == ["pip", "install"]:
        return "install"
    if argv[0] == "cbs-ray" or argv[:3] == ["python", "-m", "cbs_ray.search"]:
        return "search"
    if argv[0] == "pytest":
        return "tests"
    return "unchecked"


CHECKS = {"install": check_install, "search": check_search, "tests": check_tests}
QUICK_START = quick_start_commands(README.read_text())


# ---- the tests --------------------------------------------------------------------------------------

@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file_and_heading_that_exist(page):
    assert broken_links(page) == []


def test_readme_is_short():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the detail goes to docs/"


def test_the_quick_start_installs_searches_and_tests():
    kinds = [kind_of(shlex.split(c, comments=True)) for c in QUICK_START]
    assert kinds == ["install", "search", "tests"], f"{QUICK_START} read as {kinds}"


@pytest.mark.parametrize("command", QUICK_START, ids=lambda c: shlex.join(shlex.split(c, comments=True)))
def test_every_quick_start_command_runs(command):
    argv = shlex.split(command, comments=True)
    kind = kind_of(argv)
    assert kind in CHECKS, f"{command}: no check for this command; add one to {Path(__file__).name}"
    CHECKS[kind](argv)


# The checks themselves, on inputs whose answer is known (a check that cannot fail is no check).

def test_slugs_follow_githubs_rule():
    assert github_slug("Encoder-decoder (T5)") == "encoder-decoder-t5"
    assert github_slug("The `branch:` section") == "the-branch-section"
    assert github_slug("Noise: repeats, confidence and a verdict") == "noise-repeats-confidence-and-a-verdict"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}
    short = '<a id="issue-7"></a>\n\n## Issue 7 — cost\n```\n<a id="no"></a>\n```\n'
    assert anchors(short) == {"issue-7", "issue-7--cost"}


def test_every_page_named_outside_a_link_exists_with_its_heading():
    """A page's path in code, a docstring or prose ("see docs/<page>.md#<heading>") goes stale as silently as a
    link."""
    broken = {str(p.relative_to(ROOT)): found for p in MENTIONING if p.is_file()
              and p.relative_to(ROOT).as_posix() not in BAD_ON_PURPOSE
              and (found := unresolved_mentions(p.read_text(errors="replace")))}
    assert broken == {}


def test_a_named_page_that_is_gone_or_lacks_its_heading_is_found():  # the scan above can fail
    text = ("see docs/" + "gone.md, (docs/" + "spec.md#no-such-heading), ../docs/" + "spec.md, README.md#quick-start; "
            "README.md#Not-A-Slug is the page alone, cbs_ray/docs/" + "x.md another folder's")
    assert unresolved_mentions(text) == ["docs/gone.md: no such file", "docs/spec.md#no-such-heading: no such heading"]


def test_links_in_code_are_not_links_and_wrapped_links_are():
    text = "see [the\nspec](docs/spec.md) and ![plot](docs/x.png)\n`[no](nowhere.md)`\n```\n[no](nowhere.md)\n```\n"
    assert link_targets(text) == ["docs/spec.md", "docs/x.png"]


def test_the_install_check_refuses_a_misspelt_extra_or_requirement():
    check_install(["pip", "install", "torch==2.13.0", ".[test]"])
    for bad in (".[tset]", "troch==2.13.0", "torch==2.3.0", "./nowhere[test]"):
        with pytest.raises(AssertionError):
            check_install(["pip", "install", bad])
