"""Each search method is one folder, ``cbs_ray/methods/<name>/``: its Ray half, its reading and its
report, named by its registry entry; outside the folders only the registry names their modules (as dotted paths)
and one face imports one (``cbs_ray/__init__.py``: ``analyze``/``Report``); ``--probe`` runs through the driver."""

import ast
from pathlib import Path

import pytest

import cbs_ray
from cbs_ray.records.method_registry import BUILT_IN_METHODS, method_entry, method_names
from cbs_ray.records.moved_modules import MOVED_MODULES

PACKAGE = Path(cbs_ray.__file__).parent
METHODS = PACKAGE / "methods"
IMPORTING_FACES = {"__init__.py": "analyze and Report: the from-scratch report, loaded on first use"}
SPLIT_OUT = {"cbs_ray.methods.branch.runs": "branch mode's runs, out of train/run_plan.py",
             "cbs_ray.methods.branch.hooks": "the trunk's publishing and a branch's start, out of train/loop.py, setup.py",
             "cbs_ray.methods.ladder.hooks": "a ladder run's average of its iterates, out of train/loop.py, setup.py",
             "cbs_ray.methods.scratch.recommendation": "out of analysis/readings.py, beside the critical batch's readings",
             "cbs_ray.methods.scratch.trainer_snippets": "out of report/text.py, beside the headline",
             "cbs_ray.methods.scratch.batch_table": "out of analysis/tables.py, which keeps the trial and noise-scale "
                                                    "tables",
             "cbs_ray.methods.scratch.decision": "the from-scratch rule, out of analysis/decision.py, which keeps "
                                                 "the Decision every method writes",
             "cbs_ray.methods.branch.decision": "branch mode's rule, out of analysis/decision.py",
             "cbs_ray.methods.ladder.decision": "the ladder's rule, out of analysis/decision.py",
             "cbs_ray.methods.scratch.page": "out of report/page.py, which keeps the pieces every page shares",
             "cbs_ray.methods.scratch.plots": "out of report/plots.py, which keeps the Agg backend and save_figure"}
NAMING_PATHS = {"records/method_registry.py", "records/moved_modules.py"}  # dotted paths as strings, not imports
BORN_IN_A_FOLDER = {"cbs_ray.methods.ladder.summary", "cbs_ray.methods.ladder.recorded",
                    "cbs_ray.methods.branch.recorded", "cbs_ray.methods.branch.summary"}
"""Modules written in a method's folder (the typed summaries and records), never anywhere else: no old path."""


def _imported(source: str) -> set:
    """The modules (and ``from`` names) ``source`` imports, leaving out what only ``if TYPE_CHECKING:`` imports
    (import-linter's ``exclude_type_checking_imports``: it names a type and never runs)."""
    found = set()

    def visit(node):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update({node.module, *(f"{node.module}.{alias.name}" for alias in node.names)})
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def _outside_methods() -> list:
    return sorted(p for p in PACKAGE.rglob("*.py") if METHODS not in p.parents)


def test_the_import_scan_sees_imports_and_skips_type_only_ones():  # the scan below can fail
    source = ("import os\nfrom cbs_ray.methods.branch import reading\nif TYPE_CHECKING:\n"
              "    from cbs_ray.methods.ladder.report import LadderReport\nelse:\n    import cbs_ray.methods.ladder\n"
              "def f():\n    from cbs_ray.methods.scratch.search import run_probe\n")
    methods = {m for m in _imported(source) if m.startswith("cbs_ray.methods")}
    assert methods == {"cbs_ray.methods.branch", "cbs_ray.methods.branch.reading", "cbs_ray.methods.ladder",
                       "cbs_ray.methods.scratch.search", "cbs_ray.methods.scratch.search.run_probe"}


@pytest.mark.parametrize("entry", BUILT_IN_METHODS, ids=lambda e: e.name)
def test_each_registered_method_has_its_folder_with_its_ray_half_reading_and_report(entry):
    folder = METHODS / entry.name
    assert entry.search_module == f"cbs_ray.methods.{entry.name}.search"
    assert entry.report_module == f"cbs_ray.methods.{entry.name}.report"
    for module in ("__init__.py", "search.py", "reading.py", "report.py"):
        assert (folder / module).is_file(), f"{folder / module} is missing"
    assert "METHOD = " in (folder / "search.py").read_text() and "REPORT = " in (folder / "report.py").read_text()


def test_the_methods_folder_holds_the_registered_methods_only():
    """Read from the registry: a built-in method is a folder here, a method registered from outside (tests'
    ``helpers.gauged_method``) lives in its own folder elsewhere."""
    folders = {p.name for p in METHODS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    in_the_package = {name for name in method_names() if method_entry(name).search_module.startswith("cbs_ray.")}
    assert folders == {e.name for e in BUILT_IN_METHODS} == in_the_package
    assert len(folders) >= 3  # scratch, branch, ladder at least: an empty registry or folder fails


def test_no_module_outside_the_methods_imports_a_method_folder_but_the_declared_faces():
    importers = {}
    for path in _outside_methods():
        imported = {m for m in _imported(path.read_text()) if m == "cbs_ray.methods" or
                    m.startswith("cbs_ray.methods.")}
        if imported:
            importers[str(path.relative_to(PACKAGE))] = imported
    assert set(importers) == set(IMPORTING_FACES), importers
    assert importers["__init__.py"] == {"cbs_ray.methods.scratch", "cbs_ray.methods.scratch.report"}
    assert "cli.py" not in importers  # --probe goes through the driver (tune.driver.probe_only), as a search does


def test_outside_the_methods_only_the_registry_and_the_old_paths_name_a_method_module():
    naming = {str(p.relative_to(PACKAGE)) for p in _outside_methods()
              if any(isinstance(node, ast.Constant) and isinstance(node.value, str)
                     and node.value.startswith("cbs_ray.methods.") for node in ast.walk(ast.parse(p.read_text())))}
    assert naming == NAMING_PATHS


def test_every_moved_module_is_in_a_method_folder_and_gone_from_its_old_place():
    for old, new in MOVED_MODULES.items():
        assert (PACKAGE.parent / (new.replace(".", "/") + ".py")).is_file(), new
        assert not (PACKAGE.parent / (old.replace(".", "/") + ".py")).exists(), old
        assert new.startswith("cbs_ray.methods.") and new.split(".")[2] in {e.name for e in BUILT_IN_METHODS}
    moved = {p.relative_to(PACKAGE.parent).with_suffix("").as_posix().replace("/", ".")
             for p in METHODS.glob("*/*.py") if p.name != "__init__.py"}
    # every module of the folders came from somewhere, and is mapped, or was split out of a module that stays, but
    # those written in their folder
    assert moved - BORN_IN_A_FOLDER == set(MOVED_MODULES.values()) | set(SPLIT_OUT) and BORN_IN_A_FOLDER <= moved


METHOD_NAMES = {e.name for e in BUILT_IN_METHODS}
NAMING_A_METHOD_ALLOWED = {"records/method_registry.py",  # the registry: the one table of the methods' names
                           "tune/plan.py"}  # `cbs-ray plan` chooses between two named methods (scratch, ladder) by design


def _method_name_constants(source: str) -> list:
    """The lines of ``source`` that hold a string constant equal to a built-in method's name, docstrings left out
    (a docstring's words are prose; a constant is a name the code compares, defaults or builds with)."""
    tree = ast.parse(source)
    # a string standing alone as a statement: a module's, class's or function's docstring, or a field's after it
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in METHOD_NAMES and id(node) not in docstrings]


def test_the_method_name_scan_sees_constants_and_skips_docstrings():  # the scan below can fail
    source = ('"""scratch"""\nX = "branch"\ndef f(m="ladder"):\n    """ladder"""\n    return m != \'scratch\'\n'
              'class C:\n    a: str = "x"\n    """branch"""\n    b = f"{X} branch"\n')
    assert sorted(_method_name_constants(source)) == [2, 3, 5]


def test_no_module_outside_the_methods_names_a_method_but_the_registry():
    """The folders' target: a rule that depends on the method reads its registry entry (``DEFAULT_METHOD``,
    ``MethodEntry.section``, ``loss_epsilon``, ``best_per_batch``), never compares, defaults to or builds with a
    method's name."""
    naming = {str(p.relative_to(PACKAGE)): lines for p in _outside_methods()
              if (lines := _method_name_constants(p.read_text()))}
    assert set(naming) == NAMING_A_METHOD_ALLOWED, naming


def _named_modules(source: str) -> set:
    """Every module ``source`` imports, those only ``if TYPE_CHECKING:`` imports included (a type named for mypy)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_shared_layers_name_no_method_even_for_the_type_checker():
    """``analysis/`` and ``report/`` hold what every method uses: none of them names a method's module, not even
    under ``if TYPE_CHECKING:`` (which import-linter leaves out: a circle it cannot see)."""
    assert "cbs_ray.methods.scratch.report" in _named_modules(  # the scan sees a type-only import
        "if TYPE_CHECKING:\n    from cbs_ray.methods.scratch.report import Report\n")
    naming = {str(p.relative_to(PACKAGE)): sorted(m for m in _named_modules(p.read_text())
                                                  if m.startswith("cbs_ray.methods"))
              for layer in ("analysis", "report") for p in (PACKAGE / layer).rglob("*.py")}
    assert {path: modules for path, modules in naming.items() if modules} == {}
