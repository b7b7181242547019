"""An experiment written before the subpackages pickled the old flat module names: they resolve while Tune
reads it, and only then."""

import pickle
import sys

import pytest

from cbs_ray.records.legacy import OLD_MODULES, old_module_names
from cbs_ray.spec.schema import SearchSection
from cbs_ray.train.trial import run_trial
from cbs_ray.tune.nothing_fits import NothingFitsStopper


def _global(module: str, name: str) -> bytes:
    return f"c{module}\n{name}\n.".encode()  # pickle's GLOBAL opcode: what Tune's state holds for a class


def test_old_names_resolve_to_the_new_objects_inside_and_not_outside():
    with old_module_names():
        assert pickle.loads(_global("cbs_ray.nothing_fits", "NothingFitsStopper")) is NothingFitsStopper
        assert pickle.loads(_global("cbs_ray.trial", "run_trial")) is run_trial
        assert pickle.loads(_global("cbs_ray.spec", "SearchParams")) is SearchSection  # renamed with the move
    assert "cbs_ray.trial" not in sys.modules and not hasattr(sys.modules["cbs_ray.spec"], "SearchParams")
    with pytest.raises((ModuleNotFoundError, AttributeError)):
        pickle.loads(_global("cbs_ray.nothing_fits", "NothingFitsStopper"))


def test_every_new_module_named_exists():
    import importlib

    for old, news in OLD_MODULES.items():
        assert old.count(".") == 1, old  # the old modules were flat: cbs_ray.<module>
        for new in news:
            importlib.import_module(new)
