"""What the driver hands every trial of one Tune experiment: its ``TrialPlans``, in the trainable's closure
(``tune.with_parameters``), of which the trial asks its ``RunPlan``. Tune's config holds the trial's point (the
hyper-parameters it was given) and nothing that says how to train it; the plans are built on the driver by the
method that started the experiment, typed, and the trial never interprets the config's keys to pick one.

- ``SearchedPlans``: a from-scratch search's (and the bisect strategy's), whose points Tune's searcher chooses:
  each trial's plan is ``run_plan.scratch_run_plan`` of its searched batch, alpha, warmup fraction and (a repeat's)
  seed offset.
- ``PresetPlans``: a method that trains a fixed list of runs (branch mode's trunk, branches and validation, the
  ladder's rungs): every point beside the plan the driver built for it; a trial finds its plan by its point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Protocol

from cbs_ray.records.trial_point import batch_of
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.run_plan import RunPlan, scratch_run_plan

__all__ = ["TrialPlans", "SearchedPlans", "PresetPlans"]


class TrialPlans(Protocol):
    """The plans of one experiment's trials (module docstring)."""

    @property
    def tokens_per_sample(self) -> Optional[int]:
        """Tokens in every training sample where the method counts its budget in tokens (reported as
        ``tokens_seen``); None otherwise (read-only: the plans are frozen dataclasses)."""

    def plan(self, config: dict) -> RunPlan:
        """The plan of the trial Tune gave ``config``."""


@dataclass(frozen=True)
class SearchedPlans:
    """A searched experiment's plans: its trials' points are Tune's choices of ``log2_batch``, ``alpha`` and
    ``warmup_fraction`` (and a repeat's ``seed_offset``), each trained from scratch to ``budget_samples``."""

    spec: SearchSpec
    budget_samples: int
    tokens_per_sample: Optional[int] = None

    def plan(self, config: dict) -> RunPlan:
        return scratch_run_plan(self.spec, batch_of(config), float(config["alpha"]),
                            float(config["warmup_fraction"]), self.budget_samples,
                            seed_offset=int(config.get("seed_offset", 0) or 0))


@dataclass(frozen=True)
class PresetPlans:
    """A fixed list of runs: each point (the Tune config of one trial) with the plan built for it on the driver."""

    runs: tuple[tuple[tuple[tuple[str, object], ...], RunPlan], ...]
    """``(point's items, plan)`` per run, in the order Tune starts them."""
    tokens_per_sample: Optional[int] = None

    @classmethod
    def of(cls, points: Iterable[dict], plan_of: Callable[[dict], RunPlan], *,
           tokens_per_sample: Optional[int] = None) -> PresetPlans:
        """The plans of ``points``: ``plan_of`` each."""
        return cls(tuple((tuple(point.items()), plan_of(point)) for point in points), tokens_per_sample)

    @property
    def points(self) -> list[dict]:
        """The runs' Tune configs, in order (what ``tune.runner.points_config`` runs)."""
        return [dict(items) for items, _ in self.runs]

    def plan(self, config: dict) -> RunPlan:
        for items, plan in self.runs:
            if all(k in config and config[k] == v for k, v in items):
                return plan
        raise ValueError(f"no run of this experiment has the point {config!r}")
