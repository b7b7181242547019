"""Every test under tests/e2e/ runs on a real local Ray cluster: marked ``e2e`` here, so that
``pytest -m e2e`` and the quick tier ``pytest -m "not e2e and not multiproc"`` select by folder. (A
``pytestmark`` in a conftest.py marks nothing; the hook does.)

Searches that run inside this process (``run_search``, ``resume_search``) share one local Ray, the
``shared_ray`` fixture: ``cbs_ray.tune.runner.ray_session`` leaves a Ray that is already up alone, as it
does for a user's own session, so each of them skips starting and stopping a cluster. The tests that
start their own Ray (the CLI in a subprocess, a driver killed with its cluster, the dashboard of the
cluster ``ray_session`` starts) run after every test that uses the shared one, which is shut down once the
last of those is done: never two Ray clusters at once."""

from pathlib import Path

import pytest

E2E = Path(__file__).parent
SHARED = "shared_ray"


def _in_e2e(item) -> bool:
    return E2E in item.path.parents


def _shares(item) -> bool:
    return SHARED in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config, items):
    slots = [i for i, item in enumerate(items) if _in_e2e(item)]
    for i in slots:
        items[i].add_marker(pytest.mark.e2e)
    # In their slots, the tests on the shared cluster first (stable: each group keeps the file order).
    ordered = sorted((items[i] for i in slots), key=lambda item: not _shares(item))
    for i, item in zip(slots, ordered):
        items[i] = item


@pytest.fixture(scope="session")
def shared_ray():
    """One local Ray for the searches run in this process, started as ``ray_session`` starts one (loopback
    only, a private temp dir); yields the RayContext."""
    import ray

    from cbs_ray.tune.runner import start_local_ray

    context = start_local_ray()
    yield context
    ray.shutdown()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """Shut the shared Ray down after the last test that uses it (its module fixtures torn down first), so
    the tests that start their own never run beside it."""
    if _shares(item) and (nextitem is None or not _shares(nextitem)):
        import ray

        ray.shutdown()
