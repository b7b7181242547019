"""Which test modules can reach Ray: the ones CI runs again at the lower end of the Ray range (``.ci/run``,
``pytest --ray-reaching-only``), where only code that calls Ray can behave differently.

A test module reaches Ray when an import in it, at any depth (inside functions too: the package imports Ray
lazily, e.g. ``records/storage.py``'s ``ExperimentAnalysis``), names ``ray`` or a module of the checkout that
reaches Ray, followed through the package, ``tests/helpers`` and the tests' own helper modules (``RayReach``); or
when it starts a Python subprocess (``cbs-ray`` and ``python -m cbs_ray.…`` load Ray behind a process boundary
the imports do not show). The reading is conservative: a test that imports a module reaching Ray is kept even
where the functions it calls never do. Run it with ``pytest --ray-reaching-only --collect-only -q`` to see the
selection."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SUBPROCESS = re.compile(r"\bsubprocess\b|\bsys\.executable\b")
"""A module that starts a process: what it runs is not in its imports."""


def _names(node: ast.AST) -> set[str]:
    """The modules one statement imports: ``import a.b`` gives ``a.b``, ``from a import b`` gives ``a`` and ``a.b``
    (``b`` may be a module or a name in ``a``); relative imports are not used in this checkout."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return set()


def _statements(statements: list[ast.stmt], top: bool):
    """Each statement with whether importing the module runs it: the top level, and the blocks of its ``if``
    (not ``if TYPE_CHECKING``), ``try``, ``with``, loops and class bodies; a function's body runs only when called.
    Statements only: expressions hold no imports."""
    for statement in statements:
        yield statement, top
        if isinstance(statement, ast.If):
            yield from _statements(statement.body, top and "TYPE_CHECKING" not in ast.unparse(statement.test))
            yield from _statements(statement.orelse, top)
        elif isinstance(statement, ast.Try):
            for block in (statement.body, *(h.body for h in statement.handlers), statement.orelse,
                          statement.finalbody):
                yield from _statements(block, top)
        elif isinstance(statement, (ast.With, ast.For, ast.While)):
            yield from _statements(statement.body, top)
            yield from _statements(getattr(statement, "orelse", []), top)
        elif isinstance(statement, ast.ClassDef):
            yield from _statements(statement.body, top)
        elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _statements(statement.body, False)


def import_names(source: str) -> tuple[set[str], set[str]]:
    """The modules a module's imports name: at any depth (a function's own imports too), and the ones importing
    the module loads (see ``_statements``)."""
    anywhere: set[str] = set()
    loaded: set[str] = set()
    for statement, top in _statements(ast.parse(source).body, True):
        names = _names(statement)
        anywhere |= names
        if top:
            loaded |= names
    return anywhere, loaded


def _parents(name: str) -> list[str]:
    """``a.b.c`` → ``a.b``, ``a``: the packages whose ``__init__`` runs (top level only) before it."""
    parts = name.split(".")
    return [".".join(parts[:n]) for n in range(len(parts) - 1, 0, -1)]


def local_modules(root: Path) -> dict[str, Path]:
    """The importable modules of the checkout at ``root``: the package (``cbs_ray.…``), ``tests/helpers``
    (``helpers.…``) and the other non-test modules under ``tests/`` (imported by their basename, since pytest
    puts each test folder on sys.path)."""
    modules = {}
    for path in (root / "cbs_ray").rglob("*.py"):
        modules[".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")] = path
    for path in (root / "tests").rglob("*.py"):
        if path.name.startswith("test_") or path.name == "conftest.py":
            continue
        if path.parent.name == "helpers":
            modules["helpers" if path.stem == "__init__" else f"helpers.{path.stem}"] = path
        else:
            modules[path.stem] = path
    return modules


def _fixed_point(edges: dict[str, set[str]], reaches) -> set[str]:
    """The modules whose ``edges`` (imported names) hold one for which ``reaches(name, found)`` is true, grown
    until nothing changes: import cycles need no care."""
    found: set[str] = set()
    while grown := {module for module, names in edges.items()
                    if module not in found and any(reaches(name, found) for name in names)}:
        found |= grown
    return found


class RayReach:
    """Which modules of the checkout at ``root`` reach Ray, two ways:

    - *loaded*: importing the module imports Ray (its top-level imports, and theirs, and their packages', do);
    - *called*: a function of it can import Ray: an import at any depth names ``ray``, a module called so, or a
      module loaded so. A package only imported on the way to a module (``cbs_ray`` for ``cbs_ray.maths.x``)
      counts as loaded, not called: its functions (``cbs_ray.__getattr__``'s lazy API) are not what the test
      runs."""

    def __init__(self, root: Path):
        names = {module: import_names(path.read_text()) for module, path in local_modules(root).items()}
        self.loaded = _fixed_point({module: loaded for module, (_, loaded) in names.items()}, self._is_or_loads)
        self.called = _fixed_point({module: anywhere for module, (anywhere, _) in names.items()}, self._calls)

    def _is_or_loads(self, name: str, found: set[str]) -> bool:
        return any(m == "ray" or m.startswith("ray.") or m in found for m in (name, *_parents(name)))

    def _calls(self, name: str, found: set[str]) -> bool:
        return name == "ray" or name.startswith("ray.") or name in found or self._is_or_loads(name, self.loaded)

    def reaches_ray(self, path: Path) -> bool:
        """A test module reaches Ray if it starts a Python subprocess or imports, at any depth, a name that is
        Ray or a module that calls it or loads it."""
        source = path.read_text()
        return bool(SUBPROCESS.search(source)) or any(self._calls(name, self.called)
                                                          for name in import_names(source)[0])
