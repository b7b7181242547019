"""The private Ray APIs the package uses: all present in the installed Ray, all reached through
``cbs_ray.ray_internals``, and a clear one-line error when an upgrade removes one."""

import ast
from pathlib import Path

import pytest
import ray
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

from cbs_ray import ray_internals
from cbs_ray.ray_internals import SUPPORTED_RAY, RayInternalsMissing

PACKAGE = Path(ray_internals.__file__).parent
ROOT = Path(__file__).resolve().parents[2]  # the checkout (the package may be installed elsewhere)
PYPROJECT = ROOT / "pyproject.toml"


def test_every_private_ray_api_the_package_uses_is_in_the_installed_ray():
    gone = ray_internals.missing()
    assert not gone, (f"Ray {ray.__version__} lacks private APIs cbs-ray uses: {'; '.join(gone)} — "
                      f"move them in cbs_ray/ray_internals.py or narrow the Ray range ({SUPPORTED_RAY})")


def test_a_removed_api_is_one_line_naming_it_and_the_supported_range(monkeypatch):
    monkeypatch.setitem(ray_internals.REQUIRED, "token auth", ("ray._private.worker", "no_such_function_anymore"))
    with pytest.raises(RayInternalsMissing) as raised:
        ray_internals.token_auth_enabled()
    message = str(raised.value)
    assert "\n" not in message
    assert "ray._private.worker.no_such_function_anymore (token auth)" in message
    assert SUPPORTED_RAY in message and ray.__version__ in message
    assert ray_internals.missing() == ["ray._private.worker.no_such_function_anymore (token auth)"]


def test_a_removed_module_is_reported_too(monkeypatch):
    monkeypatch.setitem(ray_internals.REQUIRED, "Train V2 storage logger", ("ray.train.v9._gone", None))
    assert ray_internals.missing() == ["ray.train.v9._gone (Train V2 storage logger)"]


def test_the_library_requires_the_range_it_says_and_the_installed_ray_is_in_it():
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    ray_req = next(Requirement(d) for d in deps if Requirement(d).name == "ray")
    assert set(str(ray_req.specifier).split(",")) == set(SUPPORTED_RAY.split(","))
    assert {"tune", "train", "default"} <= ray_req.extras
    assert Version(ray.__version__) in ray_req.specifier, f"Ray {ray.__version__} is outside {ray_req.specifier}"


def _private_references(path: Path) -> list[str]:
    """``ray.…_private…`` / ``_internal…`` names a module imports or reads as attributes."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Attribute) and node.attr in ("_private", "_internal", "_global_node",
                                                               "storage_filesystem", "trial_fs_path"):
            names = [node.attr]
        found += [n for n in names if n.startswith("ray") and ("._private" in n or "._internal" in n)
                  or n in ("_private", "_internal", "_global_node", "storage_filesystem", "trial_fs_path")]
    return found


def test_only_ray_internals_reaches_past_rays_public_api():
    offenders = {str(p.relative_to(PACKAGE)): refs for p in PACKAGE.rglob("*.py")
                 if p.name != "ray_internals.py" and (refs := _private_references(p))}
    assert offenders == {}


def test_the_scan_finds_a_private_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from ray._private import ray_constants\nimport ray\nx = ray._private.worker\n"
                      "fs = trial.storage.storage_filesystem\n")
    assert sorted(_private_references(module)) == ["_private", "ray._private", "ray._private.ray_constants",
                                                   "storage_filesystem"]


def test_ci_runs_the_quick_tier_at_the_ranges_lower_end():
    import re

    ci = (ROOT / ".ci" / "run").read_text()
    pinned = re.findall(r'"ray\[tune,train,data,default\]==([0-9.]+)"', ci)
    lower = next(s.split(">=")[1] for s in SUPPORTED_RAY.split(",") if s.startswith(">="))
    assert pinned and Version(pinned[0]) == Version(lower), (pinned, SUPPORTED_RAY)
