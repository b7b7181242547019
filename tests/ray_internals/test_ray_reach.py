"""Which test modules can reach Ray (``tests/helpers/ray_reach.py``): the ones ``.ci/run`` runs again at the lower
end of the Ray range with ``pytest --ray-reaching-only``."""

from pathlib import Path

import pytest

from helpers.ray_reach import RayReach, import_names

ROOT = Path(__file__).resolve().parents[2]


def test_import_names_at_any_depth_and_at_import_time():
    source = ("import os\nfrom typing import TYPE_CHECKING\nfrom pkg.a import b\n"
              "if TYPE_CHECKING:\n    import typed\n"
              "try:\n    import fast\nexcept ImportError:\n    import slow\n"
              "def f():\n    import ray.tune\n"
              "class C:\n    def g(self):\n        from pkg import c\n")
    anywhere, loaded = import_names(source)
    assert loaded == {"os", "typing", "typing.TYPE_CHECKING", "pkg.a", "pkg.a.b", "fast", "slow"}
    assert anywhere == loaded | {"typed", "ray.tune", "pkg", "pkg.c"}


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A package whose modules reach Ray in each way the reading tells apart, and tests that import them."""
    files = {
        "cbs_ray/__init__.py": "def __getattr__(name):\n    from cbs_ray import api\n    return api.run\n",
        "cbs_ray/api.py": "def run():\n    import ray\n    return ray.init()\n",          # calls Ray when run
        "cbs_ray/maths.py": "import math\n",                                                # never
        "cbs_ray/storage.py": "from cbs_ray import api\n",                                  # through api
        "cbs_ray/loop_a.py": "import cbs_ray.loop_b\n",                                     # a cycle ...
        "cbs_ray/loop_b.py": "import cbs_ray.loop_a\nimport ray.tune\n",                    # ... that loads Ray
        "cbs_ray/loud/__init__.py": "import ray\n",                                         # loads Ray
        "cbs_ray/loud/quiet.py": "X = 1\n",                                                 # in a package that does
        "tests/helpers/__init__.py": "",
        "tests/helpers/spawn.py": "def spawn():\n    from cbs_ray.storage import api\n",
        "tests/maths/test_maths.py": "from cbs_ray.maths import math\n",
        "tests/maths/test_lazy_api.py": "def test():\n    from cbs_ray.storage import api\n",
        "tests/maths/test_package_api.py": "from cbs_ray import run\n",
        "tests/maths/test_cycle.py": "import cbs_ray.loop_a\n",
        "tests/maths/test_parent.py": "from cbs_ray.loud.quiet import X\n",
        "tests/maths/test_helper.py": "from helpers import spawn\n",
        "tests/maths/test_process.py": "import subprocess\nsubprocess.run(['cbs-ray'])\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_each_way_of_reaching_ray_and_the_modules_that_never_do(checkout):
    reach = RayReach(checkout)
    answers = {path.stem: reach.reaches_ray(path) for path in sorted((checkout / "tests" / "maths").glob("test_*.py"))}
    assert answers == {"test_maths": False, "test_lazy_api": True, "test_package_api": True, "test_cycle": True,
                       "test_parent": True, "test_helper": True, "test_process": True}


@pytest.fixture(scope="module")
def this_checkout() -> RayReach:
    return RayReach(ROOT)


def test_a_module_only_on_the_way_to_another_is_read_at_import_time(this_checkout):
    # cbs_ray/__init__.py's lazy API (run_search, ...) reaches Ray; importing cbs_ray.maths.x runs only its top level.
    reach = this_checkout
    assert "cbs_ray" in reach.called and "cbs_ray" not in reach.loaded
    assert not reach.reaches_ray(ROOT / "tests" / "maths" / "test_ladder.py")


def test_in_this_checkout_the_tests_that_reach_ray_are_kept(this_checkout):
    reach = this_checkout
    kept = ["ray_internals/test_ray_internals.py",  # imports Ray
            "golden/test_golden_reports.py",        # reads Tune's experiments (records.storage's ExperimentAnalysis)
            "train/test_trial.py",                  # a Ray Train trial
            "faces/test_cbs_ray_command.py"]        # the command in a subprocess
    assert all(reach.reaches_ray(ROOT / "tests" / name) for name in kept)
    assert not any(reach.reaches_ray(ROOT / "tests" / name) for name in ("maths/test_prediction.py",
                                                                         "integrations/test_schedule_inputs.py"))
