"""The dry run's time estimate: the search's wall time from steps measured here, not guessed. The spec's
model trains a few micro-batches of its own data on the driver at each micro-batch size the plan uses (a warm-up step
first, then the median of ``TIMED_STEPS``), with the threads a worker gets (``resources.cpus_per_worker``), and
evaluates one evaluation batch. Every method lays out the runs it plans (``PlannedStage``: the from-scratch
search's trials and repeats, ``scratch_stages``; branch mode's trunk, branches and schedule validation; the ladder's
runs), each as a ``PlannedRun``: its micro-steps per worker × the step, its evaluations × the evaluation batches ×
the forward (twice where it also evaluates the average of its iterates), and its set-up (the model built, the first
step: measured too). A stage's runs go ``concurrency`` at a time (``resources.max_concurrent_trials``, else this
machine's CPUs over a trial's), never faster than its longest run; the stages one after another, after Ray's start
(``RAY_START_S``) and each run's start on Ray (``TRIAL_START_S``): the two figures not measured here, measured once
on a 2-core CPU.

What it leaves out, and says so: ASHA's early stops (every trial is counted to the full budget: an upper bound where
``search.early_stopping`` is on), where a ladder run reaches its target (a range: every run stopped at the smallest
batch's samples, to every run at its cap), the gradient all-reduce between workers, a GPU the driver does not have.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass
from typing import Optional, Sequence

from cbs_ray.maths.budget import plan_batch
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.tune.prepare import Prepared, spec_model

__all__ = ["RAY_START_S", "TRIAL_START_S", "TIMED_STEPS", "StepTimes", "PlannedRun", "PlannedStage", "measure_steps",
           "planned_batches", "scratch_stages", "run_seconds", "stage_seconds", "search_seconds", "estimate_lines"]

RAY_START_S = 8.0
"""Ray's local start and shutdown, and the report (2-core CPU, from four real searches): not measured by the dry
run."""
TRIAL_START_S = 4.0
"""A run's start and end on Ray beyond its model's set-up (Tune's actor, the Train worker group, the workers'
imports, a checkpoint's restore) and its steps' slow-down beside another trial: not measured by the dry run. From four
searches on a 2-core CPU (the default space, markov_lm.yaml from scratch, with the ladder and in branch mode): their
wall time less the estimate without it, over the runs each trial slot ran, came to 0.4 (ASHA's early stops offset
it), 10, 10 and 5 s; 4 s puts all four within 1.5x."""
TIMED_STEPS = 3
"""Steps timed per micro-batch size, after one warm-up step; their median is the step."""


class StepTimes:
    """What the driver measured: seconds per training micro-step at each micro-batch size, per evaluation batch
    (``eval_batch`` examples, forward only), and a trial's set-up (the model built and its first step)."""

    def __init__(self, train_s: dict[int, float], eval_s: float, eval_batch: int, setup_s: float):
        self.train_s, self.eval_s, self.eval_batch, self.setup_s = train_s, eval_s, eval_batch, setup_s


@dataclass(frozen=True)
class PlannedRun:
    """One run a method plans, as the estimate counts it (``train.run_plan.RunPlan``'s fields that cost time): the
    batch it trains at from each sample on (``batch_schedule``) between ``start`` and ``stop``, where it evaluates
    (``report_at``; before ``stop`` on the evaluation set's first ``eval_subset`` examples where set), how many
    forwards an evaluation takes (2: the average of its iterates beside the raw model) and, for a run a stopper ends
    once it reaches a target, the earliest it can stop (``earliest_stop``; None: it trains to ``stop``)."""

    label: str
    batch_schedule: tuple[tuple[int, int], ...]
    start: int
    stop: int
    report_at: tuple[int, ...]
    eval_subset: Optional[int] = None
    forwards: int = 1
    earliest_stop: Optional[int] = None
    fixes_micro_batch: bool = False

    @classmethod
    def of(cls, label: str, plan, earliest_stop: Optional[int] = None) -> PlannedRun:
        """The run a ``train.run_plan.RunPlan`` plans."""
        return cls(label, tuple((int(s), int(b)) for s, b in plan.batch_schedule), int(plan.start_samples),
                   int(plan.stop_samples), tuple(int(r) for r in plan.report_at), plan.eval_subset,
                   plan.hooks.evaluation_forwards, earliest_stop, bool(plan.fixes_micro_batch))

    def micro_batches(self, workers: int, cap: Optional[int]) -> dict[int, int]:
        """Each batch of its schedule and the micro-batch it trains in (a fixed micro-batch: the first batch's)."""
        first = plan_batch(self.batch_schedule[0][1], workers, cap).micro_batch
        return {b: first if self.fixes_micro_batch else plan_batch(b, workers, cap).micro_batch
                for _, b in self.batch_schedule}


@dataclass(frozen=True)
class PlannedStage:
    """A stage of the search: its runs, which go side by side, and what its estimate assumes (``note``)."""

    name: str
    runs: tuple[PlannedRun, ...]
    note: str = ""


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


def scratch_stages(spec: SearchSpec, budget: int) -> Optional[list[PlannedStage]]:
    """The from-scratch search's runs (``planned_batches``): its trials, each from 0 to ``budget`` reporting every
    ``training.eval_every_samples``, then the repeats; None where the strategy decides its trials as it goes."""
    batches = planned_batches(spec)
    if batches is None:
        return None
    t, searched = spec.training, len(batches) - len(spec.batch_sizes) * max(0, spec.search.repeats - 1)
    reports = tuple(range(t.eval_every_samples, budget + 1, t.eval_every_samples)) or (budget,)

    def run(b: int) -> PlannedRun:
        return PlannedRun(f"B={b}", ((0, b),), 0, budget, reports, t.eval_subset_examples)

    asha = " (every trial counted to the full budget; ASHA stops some early)" \
        if spec.search.early_stopping and spec.search.strategy != "grid" else ""
    stages = [PlannedStage("search", tuple(run(b) for b in batches[:searched]), asha)]
    if len(batches) > searched:
        stages.append(PlannedStage("repeats", tuple(run(b) for b in batches[searched:])))
    return stages


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


def run_seconds(spec: SearchSpec, run: PlannedRun, eval_examples: int, times: StepTimes,
                until: Optional[int] = None) -> float:
    """One run's seconds, trained to ``until`` (default its ``stop``): each stretch of its batch schedule in
    micro-steps per worker × the measured step at its micro-batch, its evaluations up to there (each on
    ``eval_subset`` examples before its ``stop``, else all ``eval_examples``) × the evaluation batches × the measured
    forward × its ``forwards``, over the workers, its set-up and its start on Ray (``TRIAL_START_S``)."""
    t, workers = spec.training, spec.resources.workers_per_trial
    end = run.stop if until is None else min(until, run.stop)
    micro = run.micro_batches(workers, t.micro_batch_size)
    bounds = [*(s for s, _ in run.batch_schedule[1:]), run.stop]
    train = 0.0
    for (frm, b), to in zip(run.batch_schedule, bounds):
        samples = max(0, min(to, end) - max(frm, run.start))
        train += samples / (micro[b] * workers) * times.train_s[micro[b]]
    evaluated = 0
    for r in run.report_at:
        if r <= end:
            examples = eval_examples if r >= run.stop or not run.eval_subset else min(eval_examples, run.eval_subset)
            evaluated += math.ceil(examples / times.eval_batch)
    return train + evaluated * run.forwards * times.eval_s / workers + times.setup_s + TRIAL_START_S


def stage_seconds(spec: SearchSpec, stage: PlannedStage, eval_examples: int, times: StepTimes,
                  earliest: bool = False) -> float:
    """A stage's wall time: its runs ``_concurrency`` at a time, never less than its longest run; ``earliest``:
    each run stopped where it can stop first (``PlannedRun.earliest_stop``)."""
    each = [run_seconds(spec, r, eval_examples, times, r.earliest_stop if earliest else None) for r in stage.runs]
    return max([*each, sum(each) / _concurrency(spec, len(each))]) if each else 0.0


def search_seconds(spec: SearchSpec, stages: Sequence[PlannedStage], eval_examples: int,
                   times: StepTimes) -> tuple[float, float]:
    """The search's wall time, (earliest, at most): Ray's start and every stage in turn (``stage_seconds``); the
    two differ only where a run may stop before its ``stop``."""
    low = RAY_START_S + sum(stage_seconds(spec, s, eval_examples, times, earliest=True) for s in stages)
    high = RAY_START_S + sum(stage_seconds(spec, s, eval_examples, times) for s in stages)
    return low, high


def _per_run(spec: SearchSpec, stage: PlannedStage, eval_examples: int, times: StepTimes) -> str:
    """``B=8 1.2 s, ...``: each distinct run's seconds (to its earliest stop and its most where they differ)."""
    seen: dict[str, str] = {}
    for r in stage.runs:
        high = run_seconds(spec, r, eval_examples, times)
        low = run_seconds(spec, r, eval_examples, times, r.earliest_stop) if r.earliest_stop else high
        seen.setdefault(r.label, f"{r.label} {low:.1f}" + (f"–{high:.1f}" if high > low + 0.05 else "") + " s")
    return ", ".join(seen.values())


def estimate_lines(spec: SearchSpec, planned: Prepared, stages: Optional[Sequence[PlannedStage]]) -> list[str]:
    """The dry run's lines of the estimate: the search's time, each stage's runs and the measured steps; or why
    none (``stages`` None: the method cannot lay its runs out before they run)."""
    if planned.model_config is None or not hasattr(planned.data, "eval_ids"):
        return ["time estimate: needs the spec's own model and data (the user's objects are timed by their run)"]
    if not stages:
        return [f"time estimate: search.strategy {spec.search.strategy} decides its trials as it goes"]
    workers, cap = spec.resources.workers_per_trial, spec.training.micro_batch_size
    micros = sorted({m for s in stages for r in s.runs for m in r.micro_batches(workers, cap).values()})
    times = measure_steps(spec, planned, micros)
    examples = len(planned.data.eval_ids)
    low, high = search_seconds(spec, stages, examples, times)
    runs = sum(len(s.runs) for s in stages)
    span = f"{low:.0f}–{high:.0f} s" if high > low + 0.5 else f"{high:.0f} s"
    at_most = " at most" if any(s.note.startswith(" (every trial counted") for s in stages) else ""
    lines = [f"time estimate: {span}{at_most}: {runs} runs in {len(stages)} stage(s), "
             f"{_concurrency(spec, runs)} at a time, from a step measured here at each micro-batch (median of "
             f"{TIMED_STEPS} after a warm-up, {spec.resources.cpus_per_worker} thread(s)) plus Ray's start "
             f"(~{RAY_START_S:.0f} s) and each run's (~{TRIAL_START_S:.0f} s)"]
    lines += [f"  {s.name}: {len(s.runs)} runs, {stage_seconds(spec, s, examples, times):.0f} s{s.note}: "
              + _per_run(spec, s, examples, times) for s in stages]
    lines.append("  step " + ", ".join(f"micro {m}: {1000 * s:.1f} ms" for m, s in sorted(times.train_s.items()))
                 + f"; evaluation batch of {times.eval_batch}: {1000 * times.eval_s:.1f} ms; set-up "
                 f"{times.setup_s:.1f} s")
    if spec.resources.use_gpu or workers > 1:
        lines.append("  measured on this machine's CPU" + (" (the trials train on GPUs)" if spec.resources.use_gpu
                                                           else "") + (", without the workers' gradient all-reduce"
                                                                       if workers > 1 else ""))
    return lines
