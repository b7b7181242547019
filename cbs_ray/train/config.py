"""What a trial trains is one ``TrialConfig``: the validated spec, which the loop reads by section
(``cfg.spec.training.precision``), and the few values that are this trial's own. A new training option is
a field of the spec and its use in the loop; nothing here copies it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

from cbs_ray.maths.budget import optimizer_steps
from cbs_ray.maths.lr_schedule import scaled_lr, warmup_steps
from cbs_ray.spec.schema import SearchSpec, dataloader_workers
from cbs_ray.train.run_plan import BranchPlan, plan_from_config

__all__ = ["TrialConfig", "batch_size_of"]


def batch_size_of(config: dict) -> int:
    """Trials sample log2 of the batch size (an ordered integer for TPE); this is the batch itself."""
    return 2 ** int(config["log2_batch"])


@dataclass(frozen=True)
class TrialConfig:
    """Everything one trial's loop needs: the spec, plus what Tune chose for this trial and what the
    driver resolved. Built in the trial (``from_tune``), pickled to each of its workers."""

    spec: SearchSpec
    """The validated search spec; the loop reads its sections (``training``, ``resources``, ``data``)."""
    batch_size: int
    """The effective batch B of one optimizer step, over all workers and micro-batches."""
    alpha: float
    """LR-scaling exponent: peak LR = base_lr · (B / base_batch) ** alpha."""
    warmup_fraction: float
    """Warmup as a fraction of this trial's optimizer steps."""
    seed: int
    """Model initialisation and data order: the search's seed plus the trial's offset (a repeat's)."""
    budget_samples: int
    """Samples to train on (the resolved equal-sample budget)."""
    model_config: Any
    """The Hugging Face config object built in the driver (vocabulary, labels, padding resolved)."""
    trial_id: str = ""
    """The Tune trial's id (tags the trial's gauges in Ray's metrics); empty outside Tune."""
    started_at: float = field(default_factory=time.time)
    """When the trial started (epoch seconds), reported as ``trial_started_at``."""
    plan: Optional[BranchPlan] = None
    """Branch mode (``search.method: branch``): what this run of the branch search trains, in samples (its
    role, batch schedule, start, stop, reports, saves and LR). None: a from-scratch trial."""
    tokens_per_sample: Optional[int] = None
    """Tokens in every training sample with packed data (reported as ``tokens_seen``); None otherwise."""

    @classmethod
    def from_tune(cls, spec: SearchSpec, config: dict, *, budget_samples: int, model_config,
                  trial_id: str = "", tokens_per_sample: Optional[int] = None) -> TrialConfig:
        """From Tune's config: ``log2_batch``, ``alpha``, ``warmup_fraction`` and, for a repeat,
        ``seed_offset``. A branch-mode run's config also has ``role`` (``branch_plan.trunk_config`` and its
        kin): its plan is built here, and its batch is the plan's first; its seed is the search's, the trunk's."""
        plan = plan_from_config(spec, config, budget_samples, tokens_per_sample) if "role" in config else None
        return cls(spec=spec, batch_size=plan.batch_schedule[0][1] if plan else batch_size_of(config),
                   alpha=float(config["alpha"]), warmup_fraction=float(config["warmup_fraction"]),
                   seed=spec.search.seed + int(config.get("seed_offset", 0)), budget_samples=budget_samples,
                   model_config=model_config, trial_id=trial_id, started_at=time.time(), plan=plan,
                   tokens_per_sample=tokens_per_sample)

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
        """The peak LR at ``batch_size``: the alpha rule from ``training.base_lr`` at ``base_batch``; in branch
        mode from the trunk's peak at the trunk's batch (``BranchPlan.peak_lr``)."""
        if self.plan is not None:
            return self.plan.peak_lr(self.batch_size)
        t = self.spec.training
        return scaled_lr(t.base_lr, self.batch_size, t.base_batch, self.alpha)

    @property
    def total_steps(self) -> int:
        """Optimizer steps of this trial: the budget's at ``batch_size``; in branch mode this run's, from its
        start to its stop."""
        if self.plan is not None:
            return len(self.plan.steps())
        return optimizer_steps(self.budget_samples, self.batch_size)

    @property
    def warmup_steps(self) -> int:
        """Warmup steps of the LR schedule; in branch mode the trunk's (every run follows its schedule)."""
        if self.plan is not None:
            return self.plan.trunk_warmup_steps
        return warmup_steps(self.warmup_fraction, self.total_steps)

    @property
    def probe_limit(self) -> int:
        """Largest micro-batch the probe tries: the search's largest batch per worker, so one probe (and
        its cache entry) serves every batch size of the search."""
        return max(self.spec.batch_sizes) // self.spec.resources.workers_per_trial

    @property
    def probe_seq_len(self) -> int:
        """The sequence length the probe measures at: the data's padded length."""
        return self.spec.data.max_seq_length
