"""The import contracts that list the search methods by hand (pyproject.toml's import-linter section) list every
built-in method of the registry: a fourth method's folder cannot be left out of them (and so out of their checks)."""

import pytest

from cbs_ray.records.method_registry import BUILT_IN_METHODS
from helpers.paths import ROOT

try:
    import tomllib  # Python 3.11+
except ModuleNotFoundError:  # Python 3.10: pytest brings tomli there
    import tomli as tomllib

PYPROJECT = ROOT / "pyproject.toml"
FOLDERS = {f"cbs_ray.methods.{entry.name}" for entry in BUILT_IN_METHODS}


def _contracts() -> list[dict]:
    return tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]


def test_the_independence_contract_lists_every_built_in_methods_folder():
    independent = [c for c in _contracts() if c["name"].startswith("The search methods are independent")]
    assert len(independent) == 1 and independent[0]["type"] == "independence"
    assert set(independent[0]["modules"]) == FOLDERS


@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_each_built_in_methods_folder_has_its_layers_contract(folder):
    layered = [c for c in _contracts() if c["type"] == "layers" and c.get("containers") == [folder]]
    assert len(layered) == 1, f"no layers contract with containers = [{folder!r}] in pyproject.toml"
    assert layered[0]["layers"][0] == "search"  # its Ray half on top
