"""The search space of a critical-batch search, and its outline per batch size (what ``--dry-run`` prints).

Trials sample log2 B (an ordered integer for TPE), alpha and the warmup fraction. Every batch size is
seeded once with the middle alpha and a warmup that grows with the batch (``maths.lr_schedule.seed_warmup_fraction``:
from the middle of the range at B0, whatever the grid); ``search.balance_batches`` makes alpha and warmup parameters
of their batch size; the ``grid`` strategy lists every point.
"""

from __future__ import annotations

from typing import Optional

from cbs_ray.maths.budget import plan_batch, samples_for_tokens
from cbs_ray.maths.lr_schedule import scaled_lr, seed_warmup_fraction, warmup_steps
from cbs_ray.records.trial_point import BATCH_KEY, decode_batch, encode_batch
from cbs_ray.spec.schema import SearchSpec

__all__ = ["outline_lines", "tune_space", "PerBatchSpace", "per_batch_space", "grid_points",
           "evenly_spaced", "num_trials", "max_concurrent"]


def outline_lines(spec: SearchSpec, budget_samples: int, tokens_per_sample: Optional[int] = None) -> list[str]:
    """The outline a user checks first: per batch size, the LR range over alpha, how B is made, steps. A token budget
    is stated in ``tokens_per_sample`` (the user's own items' length on the objects path; default the spec's
    ``data.max_seq_length``: without it the outline said 16 tokens a sample where the trials trained 32)."""
    t, s, r = spec.training, spec.search, spec.resources
    repeats = (f" + up to {len(spec.batch_sizes) * (s.repeats - 1)} repeat trials (each batch size's best, "
               f"{s.repeats - 1} more seed{'s' if s.repeats > 2 else ''})" if s.repeats > 1 else "")
    most = "up to " if s.strategy == "bisect" else ""
    lines = [f"{spec.name}: {len(spec.batch_sizes)} batch sizes, {most}{num_trials(spec)} trials{repeats} ({s.strategy}"
             f"{', balanced over batch sizes' if s.balance_batches and s.strategy in ('tpe', 'random') else ''}"
             f"{', ASHA early stopping' if s.early_stopping else ', no early stopping'}), "
             f"{budget_samples} samples each (equal-sample budget), report every {t.eval_every_samples} "
             f"samples, metric {s.metric} ({s.mode}), alpha in {s.alpha_range}, warmup fraction in "
             f"{s.warmup_fraction_range}"]
    if t.budget_tokens is not None:  # how the token budget became samples (rounded to report intervals)
        lines.append("  " + samples_for_tokens(t.budget_tokens, tokens_per_sample or spec.data.max_seq_length,
                                               t.eval_every_samples)[1])
    for b in spec.batch_sizes:
        plan = plan_batch(b, r.workers_per_trial, t.micro_batch_size)
        steps = budget_samples // b
        lrs = [scaled_lr(t.base_lr, b, t.base_batch, a) for a in s.alpha_range]
        warm = [warmup_steps(w, steps) for w in s.warmup_fraction_range]
        lines.append(f"  {plan}: lr {min(lrs):.3g}..{max(lrs):.3g}, {steps} steps, "
                     f"warmup {warm[0]}..{warm[1]} steps")
    if t.probe_micro_batch and not (r.use_gpu or t.memory_limit_gb):
        lines.append("  micro-batches: not probed (a CPU probe needs training.memory_limit_gb)")
    elif t.probe_micro_batch:
        where = "on a GPU" if r.use_gpu else f"within {t.memory_limit_gb} GiB per worker"
        lines.append(f"  micro-batches: lowered further to the largest that fits {where} (probed, cached in "
                     f"~/.cache/cbs_ray/); each trial prints its final plan")
    return lines


def tune_space(spec: SearchSpec):
    from ray import tune

    s, batches = spec.search, spec.batch_sizes
    low, high = encode_batch(batches[0]), encode_batch(batches[-1])
    space = {
        # log2 of the batch as an ordered integer: TPE sees that 64 lies between 32 and 128.
        BATCH_KEY: tune.randint(low, high + 1) if len(batches) == high - low + 1
        else tune.choice([encode_batch(b) for b in batches]),
        "alpha": tune.uniform(*s.alpha_range),
        "warmup_fraction": tune.uniform(*s.warmup_fraction_range),
    }
    return space, [{BATCH_KEY: encode_batch(b), "alpha": alpha, "warmup_fraction": warmup}
                   for b, alpha, warmup in _seeds(spec)]


def _seeds(spec: SearchSpec) -> list[tuple[int, float, float]]:
    """(batch size, alpha, warmup fraction) of each batch size's seeded trial: the middle alpha and a
    warmup that grows with the batch (``seed_warmup_fraction``: the middle of the range at B0, whatever the grid)."""
    s = spec.search
    return [(b, sum(s.alpha_range) / 2, seed_warmup_fraction(s.warmup_fraction_range, b, spec.training.base_batch))
            for b in spec.batch_sizes]


class PerBatchSpace:
    """Optuna define-by-run space of ``search.balance_batches``: alpha and warmup are parameters of their
    batch size (``alpha_B512``, ``warmup_fraction_B512``); a class, not a closure, so Tune can pickle it."""

    def __init__(self, batch_sizes: list[int], alpha_range: list, warmup_range: list):
        self.log2_batches = [encode_batch(b) for b in batch_sizes]
        self.alpha_range, self.warmup_range = list(alpha_range), list(warmup_range)

    def __call__(self, trial) -> dict:
        b = decode_batch(trial.suggest_categorical(BATCH_KEY, self.log2_batches))
        return {"alpha": trial.suggest_float(f"alpha_B{b}", *self.alpha_range),
                "warmup_fraction": trial.suggest_float(f"warmup_fraction_B{b}", *self.warmup_range)}


def per_batch_space(spec: SearchSpec) -> tuple[PerBatchSpace, list[dict]]:
    """The balanced space and the points that fix the batch size of every trial: the seeds (middle
    alpha, warmup growing with the batch: ``seed_warmup_fraction``), then round robin."""
    s, batches = spec.search, spec.batch_sizes
    seeds = [{BATCH_KEY: encode_batch(b), f"alpha_B{b}": alpha, f"warmup_fraction_B{b}": warmup}
             for b, alpha, warmup in _seeds(spec)]
    rounds = [{BATCH_KEY: encode_batch(batches[i % len(batches)])}
              for i in range(s.num_trials - len(batches))]
    return PerBatchSpace(batches, s.alpha_range, s.warmup_fraction_range), seeds + rounds


def evenly_spaced(low: float, high: float, n: int) -> list[float]:
    """``n`` evenly spaced values from ``low`` to ``high`` (just ``low`` for n = 1)."""
    return [low] if n == 1 else [round(low + (high - low) * i / (n - 1), 6) for i in range(n)]


def grid_points(spec: SearchSpec) -> list[dict]:
    """The ``grid`` strategy's configurations: every batch size × ``grid_points`` evenly spaced alphas ×
    as many warmup fractions (the ends and the middle for 3)."""
    s = spec.search
    return [{BATCH_KEY: encode_batch(b), "alpha": a, "warmup_fraction": w} for b in spec.batch_sizes
            for a in evenly_spaced(s.alpha_range[0], s.alpha_range[1], s.grid_points)
            for w in evenly_spaced(s.warmup_fraction_range[0], s.warmup_fraction_range[1], s.grid_points)]


def num_trials(spec: SearchSpec) -> int:
    """The trials the search starts (``bisect``: the most it can start, every alpha candidate and every other
    batch once)."""
    s = spec.search
    if s.strategy == "bisect":
        return s.grid_points + len(spec.batch_sizes) - 1
    return len(grid_points(spec)) if s.strategy == "grid" else s.num_trials


def max_concurrent(spec: SearchSpec, cluster: dict) -> int:
    """How many trials run at once: ``resources.max_concurrent_trials`` when set, since an autoscaling
    cluster's resources at the start (``cluster``, e.g. a CPU-only head and no GPU node yet) are not what
    it grows to; otherwise as many trials as ``cluster``'s CPUs and GPUs fit side by side, at least one."""
    r = spec.resources
    if r.max_concurrent_trials:
        return r.max_concurrent_trials
    limits = [max(1, int(cluster.get("CPU", 1) // (r.workers_per_trial * r.cpus_per_worker)))]
    if r.use_gpu:
        limits.append(max(1, int(cluster.get("GPU", 0) // r.workers_per_trial)))
    return min(limits)
