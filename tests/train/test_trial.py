"""How a trial's data travel (issue 16): the driver puts them in Ray's object store once, and trials and
their Ray Train workers carry a ``DataRef`` and fetch the data where the loop runs. Checked without Ray:
a recording TorchTrainer and a ``DataRef`` whose "object store" is the object itself."""

import pickle

import numpy as np
import pytest

import cbs_ray.train.trial as trial_module
from cbs_ray.spec.load import load_spec
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.trial import DataRef, run_trial, train_worker
from cbs_ray.train.trial_plans import SearchedPlans

TUNE_CONFIG = {"log2_batch": 5, "alpha": 0.5, "warmup_fraction": 0.1}


class InMemoryRef(DataRef):
    """A DataRef whose ref is the data itself (what ``ray.get`` of a real ref returns)."""

    def get(self):
        return self.ref


@pytest.fixture
def big_data():
    return {"train_ids": np.zeros((1000, 1000), dtype=np.int64)}  # 8 MB


@pytest.fixture
def loops(monkeypatch):
    """What train_loop was called with, in place of training."""
    calls = []
    monkeypatch.setattr(trial_module, "train_loop", lambda cfg, data, session: calls.append((cfg, data, session)))
    return calls


def test_a_multi_worker_trial_hands_its_workers_the_ref_not_the_data(monkeypatch, big_data, loops, tmp_path):
    import ray.train.torch
    import ray.tune.integration.ray_train

    made = {}

    class RecordingTrainer:
        def __init__(self, train_loop_per_worker, *, train_loop_config, **kwargs):
            made.update(worker=train_loop_per_worker, config=train_loop_config)

        def fit(self):
            made["fitted"] = True

    monkeypatch.setattr(ray.train.torch, "TorchTrainer", RecordingTrainer)
    # The real callback needs a Tune run around it.
    monkeypatch.setattr(ray.tune.integration.ray_train, "TuneReportCallback", ray.train.UserCallback)
    spec = load_spec(None, ["resources.workers_per_trial=2", f"storage_path={tmp_path}"])
    data_ref = InMemoryRef(big_data)
    run_trial(TUNE_CONFIG, spec=spec, data_ref=data_ref, budget_samples=1024, model_config=None,
              plans=SearchedPlans(spec, 1024))

    assert made["fitted"] and made["worker"] is train_worker and loops == []  # nothing trained in the trial
    assert set(made["config"]) == {"trial", "data_ref"} and made["config"]["data_ref"] is data_ref
    # The Train run's config is the handle and the trial's settings: what a real ref pickles to, not 8 MB.
    small = dict(made["config"], data_ref=DataRef("an ObjectRef"))
    assert len(pickle.dumps(small)) < 50_000

    monkeypatch.setattr(trial_module, "TrainSession", lambda: "a Ray Train session")  # needs a Train run
    train_worker(made["config"])  # each worker fetches the data from the ref
    (cfg, data, _), = loops
    assert data is big_data and isinstance(cfg, TrialConfig) and cfg.batch_size == 32


@pytest.mark.parametrize("users, polled", [(None, "0.5"), ("3", "3")])
def test_a_multi_worker_trials_train_run_polls_its_workers_every_half_second(monkeypatch, big_data, loops, tmp_path,
                                                                             users, polled):
    """Train V2's controller takes a worker's report at its poll (every 2 s by default; the worker waits, its queue
    holds one): the Train run the trial starts carries a 0.5 s poll to its controller and workers (what Ray Train
    propagates from the process calling fit()), unless the environment set one already."""
    import ray.train.torch
    import ray.tune.integration.ray_train
    from ray.train.v2._internal.constants import HEALTH_CHECK_INTERVAL_S_ENV_VAR, get_env_vars_to_propagate

    propagated = {}

    class RecordingTrainer:
        def __init__(self, train_loop_per_worker, **kwargs):
            pass

        def fit(self):
            propagated.update(get_env_vars_to_propagate())

    # set first, so that monkeypatch records the variable's state before the test and undoes what the trial sets
    monkeypatch.setenv(HEALTH_CHECK_INTERVAL_S_ENV_VAR, users or "unset")
    if users is None:
        monkeypatch.delenv(HEALTH_CHECK_INTERVAL_S_ENV_VAR)
    monkeypatch.setattr(ray.train.torch, "TorchTrainer", RecordingTrainer)
    monkeypatch.setattr(ray.tune.integration.ray_train, "TuneReportCallback", ray.train.UserCallback)
    spec = load_spec(None, ["resources.workers_per_trial=2", f"storage_path={tmp_path}"])
    run_trial(TUNE_CONFIG, spec=spec, data_ref=InMemoryRef(big_data), budget_samples=1024, model_config=None,
              plans=SearchedPlans(spec, 1024))
    assert propagated[HEALTH_CHECK_INTERVAL_S_ENV_VAR] == polled


def test_an_in_process_trial_fetches_the_data_itself(big_data, loops, tmp_path):
    spec = load_spec(None, [f"storage_path={tmp_path}"])
    run_trial(TUNE_CONFIG, spec=spec, data_ref=InMemoryRef(big_data), budget_samples=1024, model_config=None,
              plans=SearchedPlans(spec, 1024))
    (cfg, data, session), = loops
    assert data is big_data and type(session).__name__ == "LocalSession" and cfg.budget_samples == 1024


def test_the_driver_puts_the_data_once_per_ray_session_however_many_experiments(monkeypatch):
    import types

    import ray

    puts, session = [], {"job": "01000000"}
    monkeypatch.setattr(ray, "put", lambda data: puts.append(data) or f"ref-{len(puts)}")
    monkeypatch.setattr(ray, "get_runtime_context", lambda: types.SimpleNamespace(get_job_id=lambda: session["job"]))

    class Data:  # the spec path's PreparedData or the user's objects: any object
        pass

    data, other = Data(), Data()
    first = DataRef.put(data)
    assert DataRef.put(data) is first and puts == [data]  # the probe, the search, the repeats: one copy
    assert DataRef.put(other).ref == "ref-2"  # other data, its own copy
    session["job"] = "02000000"  # a new Ray session: the old ref is gone with the old one
    assert DataRef.put(data).ref == "ref-3" and len(puts) == 3
