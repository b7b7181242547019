import os
from pathlib import Path

# Tests never reach a model hub: an unknown model name must fail at once, not after retries.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

OPT_IN_MARKERS = ("slow", "gpu", "cluster")
"""Run only when a -m expression names them (pytest -m slow, pytest -m gpu, pytest -m cluster; .ci/run runs
the cluster tier as its own step): excluded from plain
``pytest`` and from the quick tier ``pytest -m "not e2e and not multiproc"`` alike, which a -m in
addopts could not do (the command line's -m replaces it)."""


def pytest_addoption(parser):
    parser.addoption("--ray-reaching-only", action="store_true",
                     help="only the test modules that can reach Ray (tests/helpers/ray_reach.py): .ci/run's check at "
                          "the lower end of the Ray range, where code that never calls Ray cannot behave differently")


def pytest_collection_modifyitems(config, items):
    expression = config.getoption("markexpr") or ""
    opted_out = [m for m in OPT_IN_MARKERS if m not in expression]
    deselected = [item for item in items if any(item.get_closest_marker(m) for m in opted_out)]
    if config.getoption("ray_reaching_only"):
        from helpers.ray_reach import RayReach

        reach = RayReach(Path(__file__).resolve().parents[1])
        reaching = {path for path in {item.path for item in items} if reach.reaches_ray(path)}
        deselected += [item for item in items if item.path not in reaching and item not in deselected]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item not in deselected]
