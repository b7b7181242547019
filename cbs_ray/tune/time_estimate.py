"""``--dry-run --estimate-time``: the search's wall time estimated from steps measured here, not guessed (issue 59).
The spec's model trains a few micro-batches of its own data on the driver at each micro-batch size the plan uses
(a warm-up step first, then the median of ``TIMED_STEPS``), with the threads a worker gets
(``resources.cpus_per_worker``), and evaluates one evaluation batch; a trial's time is then its micro-steps per
worker × the step, its evaluations × the evaluation batches × the forward, and its set-up (the model built, the first
step: measured too). The trials run ``concurrency`` at a time (``resources.max_concurrent_trials``, else this
machine's CPUs over a trial's), after Ray's start (``RAY_START_S``, the one figure not measured here).

What it leaves out, and says so: ASHA's early stops (every trial is counted to the full budget: an upper bound
where ``search.early_stopping`` is on), the gradient all-reduce between workers, a GPU the driver does not have.
Only the from-scratch search lays its trials out here (``planned_batches``); the other methods print why not.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from typing import Optional, Sequence

from cbs_ray.maths.budget import plan_batch
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.tune.prepare import Prepared, spec_model

__all__ = ["RAY_START_S", "TIMED_STEPS", "StepTimes", "measure_steps", "planned_batches", "search_seconds",
           "estimate_lines"]

RAY_START_S = 8.0
"""Ray's local start and shutdown, and the report (2-core CPU, issue 59's measurement): the one figure not measured
by the dry run."""
TIMED_STEPS = 3
"""Steps timed per micro-batch size, after one warm-up step; their median is the step."""


class StepTimes:
    """What the driver measured: seconds per training micro-step at each micro-batch size, per evaluation batch
    (``eval_batch`` examples, forward only), and a trial's set-up (the model built and its first step)."""

    def __init__(self, train_s: dict[int, float], eval_s: float, eval_batch: int, setup_s: float):
        self.train_s, self.eval_s, self.eval_batch, self.setup_s = train_s, eval_s, eval_batch, setup_s


def planned_batches(spec: SearchSpec) -> Optional[list[int]]:
    """The batch of every full-budget trial the from-scratch search plans: a grid's points, TPE's or random's
    ``search.num_trials`` spread over the batches (balanced), and the repeats; None for a strategy whose trial count
    is decided as it goes (``bisect``: its most trials instead)."""
    s, batches = spec.search, list(spec.batch_sizes)
    if s.strategy == "grid":
        points = max(1, int(s.grid_points or 1))
        trials = [b for b in batches for _ in range(points)]
    elif s.strategy in ("tpe", "random"):
        trials = [batches[i % len(batches)] for i in range(int(s.num_trials))]
    else:
        return None
    return trials + [b for b in batches for _ in range(max(0, s.repeats - 1))]


def _batch_arrays(data, size: int):
    """``size`` rows of the data's evaluation arrays (the training arrays of streamed data are not held; both have
    the same padded length), repeated where the set is smaller."""
    import numpy as np
    import torch

    rows = np.resize(np.arange(len(data.eval_ids)), size)
    return (torch.as_tensor(data.eval_ids[rows]), torch.as_tensor(data.eval_mask[rows]),
            torch.as_tensor(data.eval_labels[rows]))


def _inputs(arrays, task: str) -> dict:
    ids, mask, labels = arrays
    if task == "causal-lm":
        labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def measure_steps(spec: SearchSpec, planned: Prepared, micro_batches: Sequence[int]) -> StepTimes:
    """Time the spec's model on the driver (``planned``: ``with_model_config``'s, the model's config set): a
    forward, backward and AdamW step at each of ``micro_batches``, and a forward of one evaluation batch (each the
    median of ``TIMED_STEPS`` after a
    warm-up)."""
    import torch

    from cbs_ray.sources.model import build_model

    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, spec.resources.cpus_per_worker))
    try:
        start = time.perf_counter()
        model = build_model(spec_model(spec), spec.task, planned.model_config)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        built = time.perf_counter() - start
        train_s, first = {}, 0.0
        for m in sorted(set(micro_batches)):
            batch = _inputs(_batch_arrays(planned.data, m), spec.task)
            times = []
            for step in range(TIMED_STEPS + 1):
                start = time.perf_counter()
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                times.append(time.perf_counter() - start)
            first = max(first, times[0])
            train_s[m] = statistics.median(times[1:])
        eval_batch = min(spec.training.eval_batch_size, len(planned.data.eval_ids))
        batch = _inputs(_batch_arrays(planned.data, eval_batch), spec.task)
        model.eval()
        with torch.no_grad():
            model(**batch)  # the warm-up
            forwards = []
            for _ in range(TIMED_STEPS):
                start = time.perf_counter()
                model(**batch)
                forwards.append(time.perf_counter() - start)
        eval_s = statistics.median(forwards)
    finally:
        torch.set_num_threads(threads)
    return StepTimes(train_s, eval_s, eval_batch, built + first)


def _concurrency(spec: SearchSpec, trials: int) -> int:
    r = spec.resources
    fits = r.max_concurrent_trials or max(1, (os.cpu_count() or 1) // (r.cpus_per_worker * r.workers_per_trial))
    return max(1, min(int(fits), trials))


def search_seconds(spec: SearchSpec, budget: int, eval_examples: int, batches: Sequence[int],
                   times: StepTimes) -> tuple[float, list[tuple[int, float]]]:
    """The search's wall time and each batch's trial time (seconds): every trial to the full ``budget``, its
    micro-steps per worker × the measured step, its evaluations (every ``eval_every_samples``; all but the last on
    ``training.eval_subset_examples``) × the evaluation batches × the measured forward, and its set-up; the trials
    ``_concurrency`` at a time after ``RAY_START_S``."""
    t, workers = spec.training, spec.resources.workers_per_trial
    per_batch = []
    for b in sorted(set(batches)):
        micro = plan_batch(b, workers, t.micro_batch_size).micro_batch
        train = budget / (micro * workers) * times.train_s[micro]
        reports = max(1, budget // t.eval_every_samples)
        subset = min(eval_examples, t.eval_subset_examples or eval_examples)
        batches_evaluated = (reports - 1) * math.ceil(subset / times.eval_batch) + math.ceil(
            eval_examples / times.eval_batch)
        per_batch.append((b, train + batches_evaluated * times.eval_s / workers + times.setup_s))
    each = dict(per_batch)
    total = sum(each[b] for b in batches)
    return RAY_START_S + total / _concurrency(spec, len(batches)), per_batch


def estimate_lines(spec: SearchSpec, planned: Prepared, method_lays_out_trials: bool) -> list[str]:
    """``--dry-run --estimate-time``'s lines: the estimate, each batch's trial and the measured steps; or why none."""
    if not method_lays_out_trials:
        return ["time estimate: only the from-scratch search lays its trials out before they run"]
    if planned.model_config is None or not hasattr(planned.data, "eval_ids"):
        return ["time estimate: needs the spec's own model and data (the user's objects are timed by their run)"]
    batches = planned_batches(spec)
    if not batches:
        return [f"time estimate: search.strategy {spec.search.strategy} decides its trials as it goes"]
    workers = spec.resources.workers_per_trial
    micros = [plan_batch(b, workers, spec.training.micro_batch_size).micro_batch for b in set(batches)]
    times = measure_steps(spec, planned, micros)
    total, per_batch = search_seconds(spec, planned.budget_samples, len(planned.data.eval_ids), batches, times)
    stops = " at most (every trial counted to the full budget; ASHA stops some early)" \
        if spec.search.early_stopping and spec.search.strategy != "grid" else ""
    lines = [f"time estimate: {total:.0f} s{stops}: {len(batches)} trials, {_concurrency(spec, len(batches))} at a "
             f"time, from a step measured here at each micro-batch (median of {TIMED_STEPS} after a warm-up, "
             f"{spec.resources.cpus_per_worker} thread(s)) plus Ray's start (~{RAY_START_S:.0f} s)",
             "  per trial: " + ", ".join(f"B={b} {s:.1f} s" for b, s in per_batch)
             + "; step " + ", ".join(f"micro {m}: {1000 * s:.1f} ms" for m, s in sorted(times.train_s.items()))
             + f"; evaluation batch of {times.eval_batch}: {1000 * times.eval_s:.1f} ms; set-up {times.setup_s:.1f} s"]
    if spec.resources.use_gpu or workers > 1:
        lines.append("  measured on this machine's CPU" + (" (the trials train on GPUs)" if spec.resources.use_gpu
                                                           else "") + (", without the workers' gradient all-reduce"
                                                                       if workers > 1 else ""))
    return lines
