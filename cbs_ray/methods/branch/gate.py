"""Branch mode's runs handed to Tune as their checkpoints come: a Tune ``Searcher`` that
suggests the trunk first and each branch only once the trunk has published the checkpoint it starts from.

Before, every branch was a trial from the start and waited inside its trial slot for its checkpoint; when the
trunk failed, the waiting branches held every slot and Tune's retry of the trunk stayed pending for ever. Now
no trial waits for a checkpoint that does not exist: until one is published, ``suggest`` answers None (Tune
asks again), and once the trunk has ended (its ``TRUNK_DONE`` marker, which the trunk writes when it finishes
or diverges and ``methods.branch.trunk_watch`` when it fails for good) the branches whose checkpoint never came are
dropped and the searcher is finished. Being a ``Searcher``, Tune wraps it in a ``ConcurrencyLimiter`` at
``max_concurrent_trials``, and it saves and restores its queue with the experiment, so a resumed search goes on
where it stopped."""

from __future__ import annotations

import os
import pickle
from typing import Optional

from ray.tune.search import Searcher

from cbs_ray.train.checkpoint import STATE_FILE, TRUNK_DONE, trunk_checkpoint_path

__all__ = ["PublishedCheckpoints", "checkpoint_published", "never_started"]


def checkpoint_published(checkpoint_dir: str, samples: int) -> bool:
    """Whether the trunk's checkpoint at ``samples`` is complete on disk (``train.checkpoint.publish_state``
    renames it into place whole, and ``train.checkpoint.trunk_checkpoint_path`` names it)."""
    return os.path.exists(os.path.join(trunk_checkpoint_path(checkpoint_dir, samples), STATE_FILE))


def never_started(points: list[dict], checkpoint_dir: str) -> list[dict]:
    """The branches among ``points`` the gate drops: the trunk has ended and their checkpoint is not there.
    (Read from disk, as the gate decides: Tune runs a copy of the searcher it is given.)"""
    if not os.path.exists(os.path.join(checkpoint_dir, TRUNK_DONE)):
        return []
    return [p for p in points if p.get("role") == "branch"
            and not checkpoint_published(checkpoint_dir, p["start_samples"])]


class PublishedCheckpoints(Searcher):
    """Suggests ``points`` (the trunk's config, then the branches', ``methods.branch.runs``) in order, each branch
    once its checkpoint is published; drops the rest once the trunk has ended without them."""

    def __init__(self, points: list[dict], checkpoint_dir: str):
        super().__init__(metric=None, mode=None)
        self.pending = list(points)
        self.checkpoint_dir = checkpoint_dir
        self.dropped: list[dict] = []
        """The branches whose checkpoint the trunk never wrote (it diverged, failed or stopped before)."""

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True  # the points are the configs; the space only names their keys for Tune

    def suggest(self, trial_id: str) -> Optional[dict]:
        for i, point in enumerate(self.pending):
            if point.get("role") != "branch" or checkpoint_published(self.checkpoint_dir, point["start_samples"]):
                return self.pending.pop(i)
        # The marker may be written right after a last checkpoint: that branch was suggested above first.
        dropped = never_started(self.pending, self.checkpoint_dir)
        self.dropped += dropped
        self.pending = [p for p in self.pending if p not in dropped]
        # Ray annotates suggest's return Optional[Dict] but documents Searcher.FINISHED (a str) as its end
        return None if self.pending else Searcher.FINISHED  # type: ignore[return-value]

    def on_trial_complete(self, trial_id: str, result: Optional[dict] = None, error: bool = False) -> None:
        pass

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump({"pending": self.pending, "dropped": self.dropped, "checkpoint_dir": self.checkpoint_dir}, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)
        self.pending, self.dropped, self.checkpoint_dir = state["pending"], state["dropped"], state["checkpoint_dir"]
