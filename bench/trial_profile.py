"""Where one default trial's time goes: training steps, evaluation, checkpoint and report, measured in-process
with the real loop (``train.loop.train_loop``) and a session that only records, on one thread as a trial's
worker runs (``resources.cpus_per_worker: 1``). Tune's and Ray's own overhead is not in it (bench/trial_overhead.py
measures that); this is the part a trial spends inside its worker.

    python bench/trial_profile.py [--batch 64] [--set KEY=VALUE ...]

Prints, for one trial of the default spec at the given batch size, twice side by side (every report on the
whole evaluation set, as before issue 38; then the default, ``training.eval_subset_examples``): the wall time of
each phase and its fraction of the trial, the evaluation's forward passes against the training samples, and the
evaluation's cost per example against a training sample's.
"""

from __future__ import annotations

import argparse
import time

import torch

from cbs_ray.sources.builtin import BuiltinSource
from cbs_ray.spec.load import load_spec
from cbs_ray.train import loop
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.sessions import LocalSession
from cbs_ray.tune.api import prepare


class Recorder(LocalSession):
    """Keeps nothing: stands in for Tune's report so that only the worker's own work is timed."""

    def report(self, metrics, checkpoint_dir):
        pass

    def get_checkpoint(self):
        return None


class Clock:
    """Accumulated wall time of the functions wrapped with ``timed``."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def timed(self, name, function):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        return wrapper


def profile(spec, batch: int, alpha: float, warmup: float) -> tuple[dict, float, int, int]:
    prepared = prepare(spec)
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    cfg = TrialConfig.from_tune(spec, {"log2_batch": batch.bit_length() - 1, "alpha": alpha,
                                       "warmup_fraction": warmup}, budget_samples=budget, model_config=config)
    clock = Clock()
    source_class = BuiltinSource
    originals = {"evaluate": source_class.evaluate, "save_state": loop.save_state}
    source_class.evaluate = clock.timed("evaluation", originals["evaluate"])
    loop.save_state = clock.timed("checkpoint", originals["save_state"])
    try:
        start = time.perf_counter()
        loop.train_loop(cfg, data, Recorder())
        total = time.perf_counter() - start
    finally:
        source_class.evaluate, loop.save_state = originals["evaluate"], originals["save_state"]
    reports = budget // spec.training.eval_every_samples
    return clock.seconds, total, reports, budget


def evaluated_examples(spec, reports: int) -> int:
    """Evaluation forward passes of one trial: the subset at every report but the last, all at the last."""
    whole = spec.data.builtin_eval_examples
    subset = min(spec.training.eval_subset_examples or whole, whole)
    return subset * (reports - 1) + whole


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args()
    torch.set_num_threads(1)
    totals = {}
    # Side by side in one run: every report on the whole evaluation set (before issue 38), then the default.
    for label, extra in (("whole set at every report", ["training.eval_subset_examples=null"]),
                         ("default (subset before the last report)", [])):
        spec = load_spec(None, args.set + extra)
        seconds, total, reports, budget = profile(spec, args.batch, alpha=0.625, warmup=0.1)
        evaluation, saving = seconds.get("evaluation", 0.0), seconds.get("checkpoint", 0.0)
        training = total - evaluation - saving
        evaluated = evaluated_examples(spec, reports)
        print(f"{label}: one trial at B={args.batch}, {budget} samples, {reports} reports, 1 thread: {total:.1f} s")
        for name, value in (("training", training), ("evaluation", evaluation), ("checkpoint", saving)):
            print(f"  {name:<11} {value:6.1f} s  {value / total:5.1%}")
        print(f"  evaluation forward passes {evaluated} vs {budget} training samples ({evaluated / budget:.1f}x); "
              f"per example {evaluation / evaluated * 1e3:.3f} ms evaluated vs {training / budget * 1e3:.3f} ms trained")
        totals[label] = (total, evaluation / total)
    (whole, whole_share), (default, default_share) = totals.values()
    print(f"RESULT evaluation {whole_share:.0%} of a trial's worker time on the whole set at every report, "
          f"{default_share:.0%} with the subset; trial {whole / default:.2f}x faster ({whole:.1f} s -> {default:.1f} s)")


if __name__ == "__main__":
    main()
