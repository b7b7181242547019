"""Gradient-accumulation overhead: the same effective batch as k micro-steps vs one step, same device.

Runs the real trial loop (tiny BERT, CPU, 1 thread) at B=64 as 1 × 64 and as 2 × 32 (and 4 × 16),
alternated, and reports the samples/s ratio. The smaller micro-steps also pay for smaller matrix
products, so on a CPU this is an upper bound on accumulation's own cost. ``--batch 512`` measures the
regime the planner produces, where a micro-batch is the largest that fits (2 × 256, 4 × 128).

    python bench/accumulation_overhead.py [--repeats 5] [--batch 64]
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


def samples_per_s(batch: int, micro: int) -> float:
    spec = load_spec(None, [f"search.batch_sizes=[{batch}]", "search.num_trials=1", "training.budget_samples=8192",
                            "training.eval_every_samples=8192", "asha.grace_period_samples=8192",
                            f"training.micro_batch_size={micro}", "training.noise_scale=false"])
    data, budget, config = prepare(spec)
    setup = make_setup(spec, {"log2_batch": batch.bit_length() - 1, "alpha": 1.0, "warmup_fraction": 0.0}, budget_samples=budget,
                       model_config=config)
    start = time.perf_counter()
    train_loop(setup, data, Quiet())
    return budget / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64, help="a power of two, at most 8192")
    args = parser.parse_args()
    b = args.batch
    samples_per_s(b, b)  # warm-up
    runs = {b: [], b // 2: [], b // 4: []}
    for _ in range(args.repeats):
        for micro in runs:
            runs[micro].append(samples_per_s(b, micro))
        print("  ".join(f"{b // m}×{m}: {runs[m][-1]:.0f}" for m in runs), "samples/s", flush=True)
    for micro in (b // 2, b // 4):
        ratio = statistics.median(runs[micro]) / statistics.median(runs[b])
        print(f"RESULT B={b} as {b // micro} × {micro} ÷ 1 × {b}: {ratio:.3f} "
              f"(overhead {1 - ratio:.1%}; target <= 5 %)")


if __name__ == "__main__":
    main()
