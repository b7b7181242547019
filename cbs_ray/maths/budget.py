"""Equal-sample budget arithmetic: optimizer steps, report milestones and the micro-batch plan.

Every candidate batch size trains on the same number of samples (``budget_samples``), so a batch of B
takes ``budget_samples / B`` optimizer steps. Reports land on exact sample milestones, multiples of
``eval_every_samples``, which is a multiple of the largest batch so every batch size hits every
milestone exactly (a batch of 128 cannot stop at sample 1000).

A causal LM's budget can be given in tokens (``training.budget_tokens``): its texts are then packed into
blocks of ``max_seq_length`` tokens, so every sample holds the same tokens and equal samples are equal tokens
(``samples_for_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sized

__all__ = ["scratch_grid_samples", "BatchPlan", "plan_batch", "optimizer_steps", "milestones", "samples_for_tokens"]


def scratch_grid_samples(budget_samples: int, branch_batches: Sized, alphas: Sized) -> int:
    """Samples a from-scratch search over the same batch sizes and alphas trains: the trunk's batch once and
    every branch batch at every alpha, each for the whole budget (no early stopping): what branch mode's
    cost is measured against."""
    return budget_samples * (1 + len(branch_batches) * len(alphas))


@dataclass(frozen=True)
class BatchPlan:
    """How an effective batch is made: ``micro_batch × accumulation × workers == batch_size``."""

    batch_size: int
    micro_batch: int
    accumulation: int
    workers: int
    micro_batch_cap: int | None = field(default=None, compare=False)
    """The cap the micro-batch was lowered from, where the cap does not divide the per-worker share."""

    def __str__(self) -> str:
        plan = f"B={self.batch_size} = {self.micro_batch} micro × {self.accumulation} accum × {self.workers} workers"
        if self.micro_batch_cap is None:
            return plan
        return (f"{plan} (a micro-batch of {self.micro_batch_cap} does not divide the "
                f"{self.batch_size // self.workers} per worker: {self.micro_batch} is the largest divisor under it)")


def plan_batch(batch_size: int, workers: int, max_micro_batch: int | None = None) -> BatchPlan:
    """Split ``batch_size`` over ``workers`` with micro-batches of at most ``max_micro_batch``.

    The effective batch is always exactly ``batch_size``: the micro-batch is the largest divisor of the
    per-worker share that fits under the cap, and accumulation makes up the rest.
    """
    if batch_size <= 0 or workers <= 0:
        raise ValueError("batch_size and workers must be positive")
    if batch_size % workers:
        raise ValueError(f"batch size {batch_size} does not split over {workers} workers")
    per_worker = batch_size // workers
    cap = per_worker if max_micro_batch is None else min(per_worker, max_micro_batch)
    if cap <= 0:
        raise ValueError("max_micro_batch must be positive")
    micro = max(d for d in range(1, cap + 1) if per_worker % d == 0)
    return BatchPlan(batch_size, micro, per_worker // micro, workers, cap if micro < cap else None)


def optimizer_steps(samples: int, batch_size: int) -> int:
    """Optimizer steps needed to see ``samples`` at ``batch_size`` (samples must divide exactly)."""
    if samples % batch_size:
        raise ValueError(f"{samples} samples is not a whole number of batches of {batch_size}")
    return samples // batch_size


def milestones(budget_samples: int, eval_every_samples: int) -> list[int]:
    """Sample counts at which a trial evaluates and reports: eval_every, 2·eval_every, …, budget."""
    if budget_samples % eval_every_samples:
        raise ValueError("budget_samples must be a multiple of eval_every_samples")
    return list(range(eval_every_samples, budget_samples + 1, eval_every_samples))


def samples_for_tokens(budget_tokens: int, tokens_per_sample: int, eval_every_samples: int) -> tuple[int, str]:
    """(the equal-sample budget a token budget makes, a line saying how): whole samples of
    ``tokens_per_sample`` tokens, rounded down to a whole number of report intervals. 0 samples when the
    tokens do not fill one report interval (the caller says that is too few)."""
    blocks = budget_tokens // tokens_per_sample
    samples = blocks // eval_every_samples * eval_every_samples
    line = (f"budget: {budget_tokens} tokens = {blocks} samples of {tokens_per_sample} tokens"
            + (f", rounded down to {samples} samples (a multiple of training.eval_every_samples, "
               f"{eval_every_samples}) = {samples * tokens_per_sample} tokens" if samples != blocks else ""))
    return samples, line
