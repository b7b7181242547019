"""Branch mode's watch on the trunk, from the driver: a trunk trial that fails for good (its process died
more often than ``resources.max_failures`` allows, or it raised) cannot mark its own end, and the branches
waiting for its checkpoints would wait forever. Tune tells the driver; this writes the trunk's end marker
(``train.checkpoint.TRUNK_DONE``) for it, so a branch whose checkpoint never came fails with its one-line reason."""

from __future__ import annotations

from ray.tune import Callback

from cbs_ray.train.checkpoint import mark_trunk_done

__all__ = ["TrunkWatch"]


class TrunkWatch(Callback):
    """Writes ``TRUNK_DONE`` into ``checkpoint_dir`` when the trunk trial errors for good (Tune calls
    ``on_trial_recover`` for a restart and ``on_trial_error`` only once no restart is left)."""

    def __init__(self, checkpoint_dir: str):
        self.checkpoint_dir = checkpoint_dir

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        if trial.config.get("role") != "trunk":
            return
        mark_trunk_done(self.checkpoint_dir, "failed")
