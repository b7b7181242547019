"""records.moved_modules: a pickle naming a module by its path before the methods moved into cbs_ray.methods
(issue 46: Tune's searcher, stopper and trial state of an old experiment) unpickles as today's class while inside
``moved_module_names``, and the old path is gone again after it."""

import importlib
import pickle
import sys

import pytest

import cbs_ray.analysis
import cbs_ray.tune
from cbs_ray.methods.ladder.reading_stop import LadderStop
from cbs_ray.records.moved_modules import MOVED_MODULES, moved_module_names


def _as_written_before_the_move(obj, old: str, new: str) -> bytes:
    """``obj`` pickled as an experiment written before the move holds it: protocol 2 names a class by
    ``GLOBAL module\\nname\\n``, here the old module."""
    data = pickle.dumps(obj, protocol=2)
    assert f"c{new}\n".encode() in data
    return data.replace(f"c{new}\n".encode(), f"c{old}\n".encode())


def test_an_old_pickle_loads_as_todays_class_inside_and_the_old_path_is_gone_after():
    stop = LadderStop(reference_batch=16, reference_stop=512, seeds=2)
    stop.reached = {32: {0}}
    old_bytes = _as_written_before_the_move(stop, "cbs_ray.analysis.ladder_stop",
                                            "cbs_ray.methods.ladder.reading_stop")
    with pytest.raises(ModuleNotFoundError, match="cbs_ray.analysis.ladder_stop"):
        pickle.loads(old_bytes)
    with moved_module_names():
        loaded = pickle.loads(old_bytes)
    assert type(loaded) is LadderStop
    assert (loaded.reference_batch, loaded.reference_stop, loaded.seeds, loaded.reached) == (16, 512, 2, {32: {0}})
    assert "cbs_ray.analysis.ladder_stop" not in sys.modules and not hasattr(cbs_ray.analysis, "ladder_stop")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("cbs_ray.analysis.ladder_stop")


def test_a_class_named_by_an_old_ray_half_path_is_the_same_class():
    from cbs_ray.methods.scratch.per_batch_asha import PerBatchASHA

    old_bytes = _as_written_before_the_move(PerBatchASHA, "cbs_ray.tune.per_batch_asha",
                                            "cbs_ray.methods.scratch.per_batch_asha")
    with moved_module_names():
        assert pickle.loads(old_bytes) is PerBatchASHA
    assert "cbs_ray.tune.per_batch_asha" not in sys.modules and not hasattr(cbs_ray.tune, "per_batch_asha")


def test_only_the_moved_names_resolve_inside():
    with moved_module_names():
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("cbs_ray.tune.no_such_module")
        new = importlib.import_module(MOVED_MODULES["cbs_ray.report.ladder"])
        assert importlib.import_module("cbs_ray.report.ladder") is new
    assert "cbs_ray.report.ladder" not in sys.modules
