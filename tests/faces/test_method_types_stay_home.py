"""A method's types stay in its folder: no module outside ``cbs_ray/methods/<name>/``
imports one of theirs, not even for the type checker (``if TYPE_CHECKING:``, which import-linter leaves out). Their
settings reach the spec through the registry (``spec.sections``), their records through ``ExperimentMeta.method_record``,
their summaries through ``SearchResult.summary``."""

import ast
from pathlib import Path

import cbs_ray

PACKAGE = Path(cbs_ray.__file__).parent
OWN_TYPES = ("scratch", "branch", "ladder")
DECLARED = ("methods/ladder/report.py", "cbs_ray.methods.branch.same_spec")
"""The one declared exception (pyproject.toml's independence contract): a ladder's report reads the schedule of a
branch experiment beside it through branch's own reading (``methods.branch.same_spec``)."""
PUBLIC_FACE = ("__init__.py", "cbs_ray.methods.scratch")
"""The package's public API (``cbs_ray.analyze``, ``cbs_ray.Report``) re-exports the scratch method's report."""


def _imported_modules(source: str) -> set[str]:
    """Every module ``source`` imports, the ``if TYPE_CHECKING:`` ones and those inside functions included."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update({node.module, *(f"{node.module}.{alias.name}" for alias in node.names)})
    return found


def test_the_scan_sees_type_only_and_function_level_imports():  # the test below can fail
    source = ("if TYPE_CHECKING:\n    from cbs_ray.methods.branch.reading_points import CbsPoint\n"
              "def f():\n    import cbs_ray.methods.ladder.settings\n")
    assert {"cbs_ray.methods.branch.reading_points", "cbs_ray.methods.ladder.settings"} <= _imported_modules(source)


def test_no_module_outside_a_methods_folder_imports_its_types():
    importers = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        folder = path.relative_to(PACKAGE).parts
        for name in OWN_TYPES:
            if folder[:2] == ("methods", name):
                continue
            prefix = f"cbs_ray.methods.{name}"
            hits = {m for m in _imported_modules(path.read_text()) if m == prefix or m.startswith(prefix + ".")}
            where = str(path.relative_to(PACKAGE))
            declared = [d for d in (DECLARED, PUBLIC_FACE) if where == d[0] and all(h.startswith(d[1]) for h in hits)]
            if hits and not declared:
                importers[where] = sorted(hits)
    assert importers == {}, importers
