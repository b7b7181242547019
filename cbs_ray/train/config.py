"""What a trial trains is one ``TrialConfig``: the validated spec, which the loop reads by section
(``cfg.spec.training.precision``), and the few values that are this trial's own. A new training option is
a field of the spec and its use in the loop; nothing here copies it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

from cbs_ray.records.trial_point import batch_of
from cbs_ray.spec.schema import SearchSpec, dataloader_workers
from cbs_ray.train.run_plan import RunPlan
from cbs_ray.train.trial_plans import SearchedPlans

__all__ = ["TrialConfig", "batch_size_of"]


batch_size_of = batch_of
"""``records.trial_point.batch_of`` itself, under the name an experiment's pickled scheduler (``PerBatchASHA``) written
before the scheduler was handed ``batch_of`` holds, so that such an experiment still resumes; nothing calls it here."""


@dataclass(frozen=True)
class TrialConfig:
    """Everything one trial's loop needs: the spec, plus what Tune chose for this trial and what the
    driver resolved, with its ``RunPlan``: the one record of its batch, alpha and warmup (read through it here).
    Built in the trial (``for_plan``), pickled to each of its workers."""

    spec: SearchSpec
    """The validated search spec; the loop reads its sections (``training``, ``resources``, ``data``)."""
    seed: int
    """Model initialisation and data order: the search's seed plus the trial's offset (a repeat's)."""
    budget_samples: int
    """Samples to train on (the resolved equal-sample budget)."""
    model_config: Any
    """The Hugging Face config object built in the driver (vocabulary, labels, padding resolved)."""
    plan: RunPlan
    """What this trial trains, in samples: its batch schedule, start, stop, reports, LR and hooks; a from-scratch
    trial's (no hooks), or one run's of a branch search (``search.method: branch``: trunk, branch, schedule)."""
    trial_id: str = ""
    """The Tune trial's id (tags the trial's gauges in Ray's metrics); empty outside Tune."""
    started_at: float = field(default_factory=time.time)
    """When the trial started (epoch seconds), reported as ``trial_started_at``."""
    tokens_per_sample: Optional[int] = None
    """Tokens in every training sample with packed data (reported as ``tokens_seen``); None otherwise."""
    failure_dir: str = ""
    """Where the loop records the point it failed at (``train.failure``): the Tune trial's directory; empty
    outside Tune (nothing recorded)."""

    @classmethod
    def for_plan(cls, spec: SearchSpec, plan: RunPlan, *, budget_samples: int, model_config, trial_id: str = "",
                 tokens_per_sample: Optional[int] = None, failure_dir: str = "") -> TrialConfig:
        """A trial of ``plan`` (what the driver's ``train.trial_plans.TrialPlans`` gave it): its batch is the
        plan's first, its alpha, warmup fraction and seed offset the plan's (the seed is the search's plus it)."""
        return cls(spec=spec, seed=spec.search.seed + plan.seed_offset, budget_samples=budget_samples, plan=plan,
                   model_config=model_config, trial_id=trial_id, started_at=time.time(),
                   tokens_per_sample=tokens_per_sample, failure_dir=failure_dir)

    @classmethod
    def from_tune(cls, spec: SearchSpec, config: dict, *, budget_samples: int, model_config, trial_id: str = "",
                  failure_dir: str = "") -> TrialConfig:
        """A from-scratch trial of the searched point ``config`` (``log2_batch``, ``alpha``, ``warmup_fraction``
        and, for a repeat, ``seed_offset``): ``for_plan`` of ``SearchedPlans``' plan (tests and benches train one
        this way)."""
        plan = SearchedPlans(spec, budget_samples).plan(config)
        return cls.for_plan(spec, plan, budget_samples=budget_samples, model_config=model_config, trial_id=trial_id,
                            failure_dir=failure_dir)

    # ---- the plan's, named as the loop and the reports use them --------------------------------------
    @property
    def batch_size(self) -> int:
        """The effective batch B of the trial's first optimizer step, over all workers and micro-batches: the
        plan's first batch (``RunPlan.batch_schedule``)."""
        return self.plan.batch_schedule[0][1]

    @property
    def alpha(self) -> float:
        """LR-scaling exponent: peak LR = base_lr · (B / base_batch) ** alpha (the plan's ``lr.alpha``)."""
        return self.plan.lr.alpha

    @property
    def warmup_fraction(self) -> float:
        """Warmup as a fraction of the LR schedule's optimizer steps (the plan's ``lr.warmup_fraction``)."""
        return self.plan.lr.warmup_fraction

    # ---- derived values ------------------------------------------------------------------------------
    @property
    def task(self) -> str:
        return self.spec.task

    @property
    def metric(self) -> str:
        return self.spec.search.metric

    @property
    def model(self) -> dict:
        """What ``build_model`` and the probe cache key take: the pretrained name or the config keys."""
        return {"name": self.spec.model.name, "config": self.spec.model.config}

    @property
    def use_gpu(self) -> bool:
        return self.spec.resources.use_gpu

    @property
    def threads(self) -> int:
        """torch's thread count in each worker: its CPUs."""
        return self.spec.resources.cpus_per_worker

    @property
    def dataloader_workers(self) -> int:
        return dataloader_workers(self.spec.training, self.use_gpu)

    @property
    def peak_lr(self) -> float:
        """The peak LR at ``batch_size`` (``RunPlan.peak_lr``): the alpha rule from ``training.base_lr`` at
        ``base_batch``; in a branch search from the trunk's peak at the trunk's batch."""
        return self.plan.peak_lr(self.batch_size)

    @property
    def total_steps(self) -> int:
        """Optimizer steps of this trial, from its plan's start to its stop: the budget's at ``batch_size`` from
        scratch."""
        return self.plan.total_steps

    @property
    def warmup_steps(self) -> int:
        """Warmup steps of the LR schedule: ``warmup_fraction`` of the trial's steps from scratch; in a branch
        search the trunk's (every run follows its schedule)."""
        return self.plan.lr.warmup_steps

    @property
    def probe_limit(self) -> int:
        """Largest micro-batch the probe tries: the search's largest batch per worker, so one probe (and
        its cache entry) serves every batch size of the search."""
        return max(self.spec.batch_sizes) // self.spec.resources.workers_per_trial

    @property
    def probe_seq_len(self) -> int:
        """The sequence length the probe measures at: the data's padded length."""
        return self.spec.data.max_seq_length
