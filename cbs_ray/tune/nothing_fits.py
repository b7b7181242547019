"""End a search at the first trial whose micro-batch probe found that not even one example fits.

That outcome depends on the model, sequence length, precision, device and memory limit, which every
trial shares, not on a trial's batch size or LR: every trial and each of its retries would fail alike,
minutes each on a cluster, and the reason would scroll past. A Tune callback reads each failed trial's
error before Tune retries it; a stopper then ends the experiment, and the search reports the reason.
"""

from __future__ import annotations

from typing import Optional

from ray.tune import Callback, Stopper

from cbs_ray.records.storage import error_lines, failed_trials
from cbs_ray.train.memory_planner import NOTHING_FITS

__all__ = ["NothingFitsStopper", "NothingFitsWatch", "nothing_fits_in", "nothing_fits_in_experiment"]


def nothing_fits_in(error_text: str) -> Optional[str]:
    """The probe's message in a trial's error text, e.g. 'not even a micro-batch of 1 fits in memory
    (cpu<=0.001GiB, sequence length 32, fp32)', or None."""
    at = error_text.rfind(NOTHING_FITS)
    return error_text[at:].splitlines()[0].strip() if at >= 0 else None


class NothingFitsStopper(Stopper):
    """Stops every trial once ``reason`` is set (by ``NothingFitsWatch``)."""

    def __init__(self):
        self.reason: Optional[str] = None

    def __call__(self, trial_id, result) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.reason is not None


class NothingFitsWatch(Callback):
    """Reads a failed trial's error file (Tune writes it before retrying the trial)."""

    def __init__(self, stopper: NothingFitsStopper):
        self.stopper = stopper

    def on_trial_recover(self, iteration, trials, trial, **info):
        if self.stopper.reason is None and trial.error_file:
            try:
                with open(trial.error_file, errors="replace") as f:
                    self.stopper.reason = nothing_fits_in(f.read())
            except OSError:
                pass

    on_trial_error = on_trial_recover


def nothing_fits_in_experiment(experiment_uri: str) -> Optional[str]:
    """The probe's message from any failed trial of a finished experiment, or None. For ``--resume``,
    whose stopper is Tune's unpickled copy, out of the caller's reach."""

    for trial in failed_trials(experiment_uri)[0]:
        reason = nothing_fits_in("\n".join(error_lines(trial)))
        if reason:
            return reason
    return None
