"""What a trial reports at each milestone: one ``TrialReport``, whose fields are the columns of
Tune's ``result.json`` and of the history the analysis reads. The readers name those columns through
``records.columns.Column``, which is checked against these fields at import: a field renamed here needs its
``Column`` renamed too.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

__all__ = ["TrialReport"]


@dataclass(kw_only=True)
class TrialReport:
    """One report of a trial: a row of its Tune results, whose columns the summary reads. A milestone's
    report sets every field; a diverged trial's report has the worst metric as its evaluation and leaves
    unset (None, and out of the reported dict) what it never measured: noise, warmup steps, throughput,
    clocks other than the wall time, and the resume point."""

    evaluation: dict[str, float]
    """``evaluate``'s metrics (eval_loss, perplexity; accuracy and eval_examples for classification), at
    the full budget the dev set's as ``dev_*``; a diverged trial: ``WORST_METRIC``'s for its task."""
    grad_sq: Optional[float] = None
    """|G|² of the gradient noise scale (moving average, averaged over workers); NaN: not measurable."""
    trace_sigma: Optional[float] = None
    """tr(Σ) of the gradient noise scale; NaN: not measurable."""
    b_simple: Optional[float] = None
    """B_simple = tr(Σ) / |G|² (McCandlish et al. 2018); NaN: not measurable."""
    b_small: Optional[int] = None
    """The small batch the noise probe measures the gradient at."""
    noise_scale_note: Optional[str] = None
    """Why the noise scale is NaN ("" when measured)."""
    samples_seen: int
    steps: int
    """Optimizer steps taken (fp16 overflow skips do not count)."""
    batch_size: int
    alpha: float
    warmup_fraction: float
    warmup_steps: Optional[int] = None
    peak_lr: float
    lr: float
    """The LR of the last step taken."""
    train_loss: float
    """Mean training loss over the report interval, averaged over workers (diverged: the loss that
    diverged)."""
    grad_norm: float
    """The last step's global gradient norm, before clipping."""
    samples_per_s: Optional[float] = None
    """Training throughput over the report interval (evaluation and checkpoints excluded)."""
    train_time_s: Optional[float] = None
    """Seconds in optimizer steps since the trial started (a restart continues the clock)."""
    wall_time_s: float
    """Seconds since the loop started, building excluded (a restart continues the clock)."""
    micro_batch: int
    accumulation: int
    workers: int
    first_step_at: Optional[float] = None
    """When the first optimizer step (since the last start) ended, epoch seconds."""
    trial_started_at: Optional[float] = None
    reported_at: Optional[float] = None
    diverged: bool
    resumed_from_samples: Optional[int] = None
    """The checkpoint's samples this run continued from (0: from the start)."""
    node_id: str = ""
    """The Ray node ID of the worker that reported (rank 0's is the one Tune keeps; an in-process trial's
    its own); empty outside Ray. Node IPs are alike when several raylets share one host, their IDs not."""
    role: Optional[str] = None
    """Branch mode: the run's role (``methods.branch.runs.ROLES``: trunk, branch, schedule); None from scratch."""
    start_samples: Optional[int] = None
    """Branch mode: the trunk checkpoint a branch started from (0 for the trunk and the schedule run)."""
    seed_offset: Optional[int] = None
    """Branch mode: the run's seed offset (0: the trunk's seed; a repeat's or a validation seed's otherwise)."""
    control: Optional[str] = None
    """Branch mode's schedule validation: which run this is (``schedule``, ``small``, ``large``, ``iso_steps``)."""
    train_loss_ema: Optional[float] = None
    """Branch mode: the training loss smoothed by an EMA with α = 0.5 per optimizer step since the run started
    (Merrill et al. 2025's loss), averaged over workers."""
    tokens_seen: Optional[int] = None
    """With packed data (every sample the same tokens): ``samples_seen`` in tokens."""

    def to_dict(self) -> dict[str, Any]:
        """What is reported to Tune: the evaluation's metrics, then every field that is set."""
        metrics = dict(self.evaluation)
        for f in fields(self)[1:]:
            value = getattr(self, f.name)
            if value is not None:
                metrics[f.name] = value
        return metrics
