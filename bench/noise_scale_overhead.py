"""Throughput with the online noise-scale estimator on ÷ off: same model, same run shape, alternated.

(a) in-process, one worker, B=32 as 4 micro-batches of 8 (the estimator reads the first micro-batch's
    gradient norm once per step); 5 alternating pairs of whole training runs, wall time measured outside.
(b) Ray Train TorchTrainer with 2 gloo workers, B=32 (the estimator is a DDP communication hook summing
    each bucket's squares); 2 alternating pairs of one-trial searches, samples/s as the loop reports it
    (training steps only, so start-up noise stays out).

    python bench/noise_scale_overhead.py [--repeats 5] [--ray-repeats 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from cbs_ray.methods.scratch.search import fit_experiment
from cbs_ray.spec.load import load_spec
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.loop import train_loop
from cbs_ray.tune.api import prepare
from cbs_ray.tune.driver import ExperimentLauncher
from cbs_ray.tune.prepare import Prepared
from loop_throughput import Quiet  # bench/ is on sys.path when a bench script runs

SHAPE = ["search.batch_sizes=[32]", "search.num_trials=1", "training.budget_samples=8192",
         "training.eval_every_samples=8192", "asha.grace_period_samples=8192"]


def in_process(noise: bool) -> float:
    spec = load_spec(None, SHAPE + ["training.micro_batch_size=8", f"training.noise_scale={str(noise).lower()}"])
    prepared = prepare(spec)
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    setup = TrialConfig.from_tune(spec, {"log2_batch": 5, "alpha": 1.0, "warmup_fraction": 0.0},
                                  budget_samples=budget, model_config=config)
    start = time.perf_counter()
    session = Quiet()
    train_loop(setup, data, session)
    assert noise == (session.last["noise_scale_note"] == "")  # the estimator really ran (or really did not)
    return budget / (time.perf_counter() - start)


def two_workers(noise: bool, storage: str) -> float:
    from cbs_ray.records.storage import load_history

    spec = load_spec(None, SHAPE + ["resources.workers_per_trial=2", f"storage_path={storage}",
                                    f"training.noise_scale={str(noise).lower()}",
                                    "training.eval_every_samples=2048", "asha.grace_period_samples=2048"])
    prepared = prepare(spec)
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    history = load_history(fit_experiment(spec, ExperimentLauncher(spec, Prepared(data, budget, config), verbose=0)))
    return float(history["samples_per_s"].median())


def ratios(on: list[float], off: list[float]) -> str:
    """Both summaries: the ratio of the medians, and the median of the side-by-side pair ratios (the
    latter is the more robust to the machine's drift between pairs)."""
    pairs = statistics.median(a / b for a, b in zip(on, off))
    return (f"on ÷ off = {statistics.median(on) / statistics.median(off):.3f} (ratio of medians), "
            f"{pairs:.3f} (median of {len(on)} pair ratios)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ray-repeats", type=int, default=2)
    args = parser.parse_args()
    in_process(False)  # warm-up
    on, off = [], []
    for _ in range(args.repeats):
        off.append(in_process(False))
        on.append(in_process(True))
        print(f"in-process: off {off[-1]:.0f}, on {on[-1]:.0f} samples/s", flush=True)
    print(f"RESULT in-process accumulation (B=32 = 8 × 4): {ratios(on, off)} (target >= 0.98)")
    if args.ray_repeats:
        import ray

        ray.init(include_dashboard=True, dashboard_host="127.0.0.1", logging_level="WARNING")
        on, off = [], []
        try:
            with tempfile.TemporaryDirectory() as storage:
                for _ in range(args.ray_repeats):
                    off.append(two_workers(False, storage))
                    on.append(two_workers(True, storage))
                    print(f"2 gloo workers: off {off[-1]:.0f}, on {on[-1]:.0f} samples/s", flush=True)
        finally:
            ray.shutdown()
        print(f"RESULT 2 gloo workers (DDP comm hook, B=32): {ratios(on, off)} (target >= 0.98)")


if __name__ == "__main__":
    main()
