"""The project's code rules that import-linter does not check (issue 35): no module imports another module's
private (``_name``) names, no module is over 600 lines, no function over 80. Read from the source, nothing
imported."""

import ast

from helpers.paths import ROOT

PACKAGE = ROOT / "cbs_ray"


def _modules():
    return sorted(PACKAGE.rglob("*.py"))


def test_no_private_name_is_imported_across_modules():
    private = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cbs_ray"):
                private += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
    assert private == []


def test_no_module_over_600_lines_and_no_function_over_80():
    long_modules = [f"{p.relative_to(ROOT)}: {n}" for p in _modules() if (n := p.read_text().count("\n")) > 600]
    long_functions = [f"{p.relative_to(ROOT)}: {f.name} ({f.end_lineno - f.lineno + 1} lines)"
                      for p in _modules() for f in ast.walk(ast.parse(p.read_text()))
                      if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.end_lineno - f.lineno + 1 > 80]
    assert (long_modules, long_functions) == ([], [])
