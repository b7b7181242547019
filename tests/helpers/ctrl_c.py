"""A search cut by a real Ctrl-C, once, for the resume tests: SIGINT lands in the driver's own process from a Tune
callback (as ``tune.disk_watch`` stops Tune on a full disk), Tune saves the experiment and returns, and
``run_search`` raises ``SearchInterrupted``."""

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from ray.tune import Callback

from cbs_ray.tune.driver import ExperimentLauncher
from cbs_ray.tune.runner import SearchInterrupted


class CtrlCOnce(Callback):
    """SIGINT to the driver's own process at the first result ``when(config, result)`` accepts: Tune's graceful
    stop, as Ctrl-C gives it. Tune pickles it with the experiment; the marker file keeps the restored one quiet."""

    def __init__(self, marker: str, when):
        self.marker, self.when = marker, when

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if os.path.exists(self.marker) or not self.when(trial.config, result):
            return
        Path(self.marker).write_text(f"{trial.trial_id} at {result.get('samples_seen')} samples\n")
        os.kill(os.getpid(), signal.SIGINT)


def cut_by_ctrl_c(monkeypatch, marker: str, search: Callable[[], object], when,
                  cuts: Callable[[str], bool] = bool) -> str:
    """Run ``search()`` (a ``run_search`` call) with Ctrl-C sent once, in the first new Tune experiment whose name
    ``cuts`` accepts (by default any: the first stage's), at the first result ``when(config, result)`` accepts;
    returns the experiment's path ``SearchInterrupted`` names (the one ``--resume`` takes)."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # CtrlCOnce travels with Tune's state
    original = ExperimentLauncher.tune

    def tune(self, **kw):
        if cuts(kw.get("name") or "") and not os.path.exists(marker):
            kw["callbacks"] = [*kw.get("callbacks", ()), CtrlCOnce(marker, when)]
        return original(self, **kw)

    monkeypatch.setattr(ExperimentLauncher, "tune", tune)
    try:
        with pytest.raises(SearchInterrupted) as cut:
            search()
    finally:
        monkeypatch.setattr(ExperimentLauncher, "tune", original)
    assert Path(marker).is_file()
    return cut.value.experiment_path
