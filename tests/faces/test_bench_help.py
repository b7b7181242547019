"""Every bench script stays runnable as the package changes (issue 46: the scripts import dozens of the package's
names, and a refactor broke them silently). Quick tier, without importing the package's heavy half: each script
compiles, every name it imports from ``cbs_ray`` is defined there (read from the sources, so nothing is imported),
and each script whose ``--help`` needs no torch, Ray or transformers answers it, two at a time. The rest's
``--help`` runs in the slow tier (``test_bench_scripts.py``); ``bench/README.md`` lists every script."""

import ast
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers.paths import ROOT

BENCH = ROOT / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))
HEAVY = ("torch", "ray", "transformers", "lightning", "cbs_ray.train", "cbs_ray.tune", "cbs_ray.sources",
         "cbs_ray.integrations", "cbs_ray.data")
"""What a script's module-level imports may not load for its ``--help`` to be quick (seconds of imports each)."""


def _imports(tree: ast.AST, *, top_level_only: bool) -> list[tuple[str, list[str]]]:
    """(module, names) of every import (``import m``: names empty), at the top level only where asked."""
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
    return found


def _module_file(module: str) -> Path | None:
    path = ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py") if path.with_suffix(".py").is_file() \
        else None


def _defined(module_file: Path) -> set[str]:
    """The names a module defines at its top level (functions, classes, assignments, imports, ``__all__``)."""
    tree = ast.parse(module_file.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
                if isinstance(target, ast.Name) and target.id == "__all__":
                    names |= set(ast.literal_eval(node.value))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def test_every_bench_script_is_listed_in_the_readme():
    readme = (BENCH / "README.md").read_text()
    unlisted = [p.name for p in [*SCRIPTS, *BENCH.glob("*.sh"), *BENCH.glob("*.json")] if f"`{p.name}`" not in readme
                and p.name not in readme]
    assert unlisted == []


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_bench_script_compiles_and_every_cbs_ray_name_it_imports_exists(script):
    tree = ast.parse(script.read_text(), filename=str(script))
    compile(tree, str(script), "exec")
    missing = []
    for module, names in _imports(tree, top_level_only=False):
        if module.split(".")[0] != "cbs_ray":
            continue
        source = _module_file(module)
        if source is None:
            missing.append(module)
            continue
        defined = _defined(source)
        missing += [f"{module}.{n}" for n in names
                    if n not in defined and _module_file(f"{module}.{n}") is None]
    assert missing == [], f"{script.name} imports names the package no longer has"


def _light(script: Path) -> bool:
    return not any(module == heavy or module.startswith(heavy + ".")
                   for module, _ in _imports(ast.parse(script.read_text()), top_level_only=True) for heavy in HEAVY)


LIGHT = [p for p in SCRIPTS if _light(p)]


def test_the_scripts_whose_help_is_light_answer_it():
    """Each in its own interpreter, two at a time (the quick tier's 2 cores)."""
    assert len(LIGHT) >= 8  # most scripts import their heavy parts where they run, not at the top
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def helped(script: Path) -> tuple[str, int, str]:
        done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, env=env,
                              timeout=60, cwd=ROOT)
        return script.name, done.returncode, done.stderr[-500:] if done.returncode else done.stdout[:6]

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(helped, LIGHT))
    assert [(name, rc, out) for name, rc, out in results if rc != 0 or out != "usage:"] == []


def test_the_gpu_session_script_parses():
    assert subprocess.run(["bash", "-n", str(BENCH / "gpu_session.sh")], capture_output=True).returncode == 0
