"""Gradient-accumulation overhead: the same effective batch as k micro-steps vs one step, same device.

Runs the real trial loop (tiny BERT, CPU, 1 thread) at B=64 as 1 × 64 and as 2 × 32 (and 4 × 16),
alternated, and reports the samples/s ratio. The smaller micro-steps also pay for smaller matrix
products, so on a CPU this is an upper bound on accumulation's own cost.

    python bench/accumulation_overhead.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from cbs_ray.search import prepare
from cbs_ray.spec import load_spec
from cbs_ray.train_loop import train_loop
from cbs_ray.trial import make_setup
from loop_throughput import Quiet  # bench/ is on sys.path when a bench script runs


def samples_per_s(micro: int) -> float:
    spec = load_spec(None, ["search.batch_sizes=[64]", "search.num_trials=1", "training.budget_samples=8192",
                            "training.eval_every_samples=8192", "asha.grace_period_samples=8192",
                            f"training.micro_batch_size={micro}", "training.noise_scale=false"])
    data, budget, config = prepare(spec)
    setup = make_setup(spec, {"log2_batch": 6, "alpha": 1.0, "warmup_fraction": 0.0}, budget_samples=budget,
                       model_config=config)
    start = time.perf_counter()
    train_loop(setup, data, Quiet())
    return budget / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    samples_per_s(64)  # warm-up
    runs = {64: [], 32: [], 16: []}
    for _ in range(args.repeats):
        for micro in runs:
            runs[micro].append(samples_per_s(micro))
        print("  ".join(f"{64 // m}×{m}: {runs[m][-1]:.0f}" for m in runs), "samples/s", flush=True)
    for micro in (32, 16):
        ratio = statistics.median(runs[micro]) / statistics.median(runs[64])
        print(f"RESULT B=64 as {64 // micro} × {micro} ÷ 1 × 64: {ratio:.3f} "
              f"(overhead {1 - ratio:.1%}; target <= 5 %)")


if __name__ == "__main__":
    main()
