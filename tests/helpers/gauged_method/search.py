"""The method's Ray half (``METHOD``, which its entry's ``search_module`` names): the from-scratch search's stages,
each given a launcher whose Tune experiments train scratch's plans with this method's hooks. Its outline, checks
and metadata are scratch's; a resume restores the same stages with the same hooks."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from cbs_ray.train.trial_plans import SearchedPlans, TrialPlans
from cbs_ray.tune.driver import ExperimentLauncher
from cbs_ray.tune.search_method import Stage, method_named

from . import NAME, SECTION
from .hooks import ReportsWeightNorm

__all__ = ["METHOD", "GaugedScratch"]

SCRATCH = method_named("scratch")
"""The from-scratch search's Ray half, found by its registry entry as the driver finds it."""


@dataclasses.dataclass(frozen=True)
class GaugedPlans:
    """Scratch's plan of each searched point (``train.trial_plans.SearchedPlans``), with ``hooks``."""

    searched: SearchedPlans
    hooks: ReportsWeightNorm

    @property
    def tokens_per_sample(self) -> Optional[int]:
        return self.searched.tokens_per_sample

    def plan(self, config: dict):
        return dataclasses.replace(self.searched.plan(config), hooks=self.hooks)


class _GaugedLauncher(ExperimentLauncher):
    """The driver's launcher (the same spec, data and held experiments), whose ``tune`` trains ``GaugedPlans``."""

    def __init__(self, launcher: ExperimentLauncher):
        super().__init__(launcher.spec, launcher.prepared, launcher.verbose, launcher.held)

    def tune(self, *, plans: Optional[TrialPlans] = None, **tune_args: Any) -> str:
        searched = SearchedPlans(self.spec, self.prepared.budget_samples)
        hooks = ReportsWeightNorm(self.spec.section(SECTION).norm_order)
        return super().tune(plans=GaugedPlans(searched, hooks), **tune_args)


class GaugedScratch:
    """``search.method: gauged_scratch`` (``tune.search_method.SearchMethod``)."""

    name = NAME

    def outline_lines(self, spec, prepared) -> list[str]:
        order = spec.section(SECTION).norm_order
        return [*SCRATCH.outline_lines(spec, prepared), f"  {NAME}: every report also gives weight_norm (order {order})"]

    def check(self, spec, prepared) -> None:
        SCRATCH.check(spec, prepared)

    def stages(self, spec, prepared) -> list[Stage]:
        """Scratch's stages (the search, its repeats), each started and restored through ``_GaugedLauncher``."""
        return [_gauged(stage) for stage in SCRATCH.stages(spec, prepared)]


def _gauged(stage: Stage) -> Stage:
    """``stage`` with its Tune experiments training the gauged plans."""

    def start(launcher: ExperimentLauncher, first: Optional[str]):
        return stage.start(_GaugedLauncher(launcher), first)

    def restore(launcher: ExperimentLauncher, path: str, meta) -> None:
        stage.restore(_GaugedLauncher(launcher), path, meta)

    return Stage(stage.name, start, restore)


METHOD = GaugedScratch()
