"""Gradient-accumulation overhead: the same effective batch as k micro-steps vs one step, same device.

Runs the real trial loop (tiny BERT, CPU, 1 thread) at B=64 as 1 × 64 and as 2 × 32 (and 4 × 16),
alternated, and reports the samples/s ratio. The smaller micro-steps also pay for smaller matrix
products and for a fixed per-operator cost (the dispatcher; on a GPU, kernel launches), so on a CPU
this is an upper bound on accumulation's own cost. Two columns separate the causes:

- ``bare``: the same forward/backward passes and one AdamW step in a hand-written loop (no loop
  bookkeeping, no DataLoader, no evaluation). Its ratio is what PyTorch itself charges for running the
  batch as k smaller passes; the trial loop's ratio ÷ the bare ratio is what the loop adds.
- ``--compile``: the trial loop with ``training.compile=true`` (torch.compile fuses the tiny model's
  elementwise operators, which cuts the per-operator cost the micro-steps pay k times).

``--batch 512`` measures the regime the planner produces, where a micro-batch is the largest that fits.

    python bench/accumulation_overhead.py [--repeats 5] [--batch 64] [--compile]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from cbs_ray.sources.model import build_model
from cbs_ray.spec.load import load_spec
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.loop import train_loop
from cbs_ray.train.optimizer import make_optimizer
from cbs_ray.tune.api import prepare
from loop_throughput import Quiet  # bench/ is on sys.path when a bench script runs

SAMPLES = 8192


def trial_setup(batch: int, micro: int, compiled: bool):
    spec = load_spec(None, [f"search.batch_sizes=[{batch}]", "search.num_trials=1",
                            f"training.budget_samples={SAMPLES}", f"training.eval_every_samples={SAMPLES}",
                            f"asha.grace_period_samples={SAMPLES}", f"training.micro_batch_size={micro}",
                            "training.noise_scale=false", f"training.compile={str(compiled).lower()}"])
    prepared = prepare(spec)
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    tune_config = {"log2_batch": batch.bit_length() - 1, "alpha": 1.0, "warmup_fraction": 0.0}
    setup = TrialConfig.from_tune(spec, tune_config, budget_samples=budget, model_config=config)
    return setup, data


def loop_samples_per_s(batch: int, micro: int, compiled: bool) -> float:
    setup, data = trial_setup(batch, micro, compiled)
    start = time.perf_counter()
    train_loop(setup, data, Quiet())
    return setup.budget_samples / (time.perf_counter() - start)


def bare_samples_per_s(batch: int, micro: int, steps: int = 40) -> float:
    """Forward + backward over ``batch // micro`` micro-batches of fixed data, one AdamW step, timed."""
    setup, data = trial_setup(batch, micro, False)
    torch.set_num_threads(setup.threads)
    torch.manual_seed(0)
    model = build_model(setup.model, setup.task, setup.model_config)
    optimizer = make_optimizer(model, setup.spec.training, 1e-4, model_config=setup.model_config)
    accumulation = batch // micro
    ids, mask, labels = (torch.tensor(a[:micro]) for a in (data.train_ids, data.train_mask, data.train_labels))

    def step():
        for _ in range(accumulation):
            (model(input_ids=ids, attention_mask=mask, labels=labels).loss / accumulation).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * batch / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64, help="a power of two, at most 8192")
    parser.add_argument("--compile", action="store_true", help="also time the trial loop with training.compile")
    args = parser.parse_args()
    b = args.batch
    micros = (b, b // 2, b // 4)
    kinds = {"loop": lambda m: loop_samples_per_s(b, m, False), "bare": lambda m: bare_samples_per_s(b, m)}
    if args.compile:
        kinds["compiled loop"] = lambda m: loop_samples_per_s(b, m, True)
    for measure in kinds.values():  # warm-up: first-call costs (lazy imports, compilation caches)
        for m in micros:
            measure(m)
    runs = {(kind, m): [] for kind in kinds for m in micros}
    for _ in range(args.repeats):
        for m in micros:  # alternated, so machine noise hits every variant alike
            for kind, measure in kinds.items():
                runs[kind, m].append(measure(m))
        print("  ".join(f"{kind} {b // m}×{m}: {runs[kind, m][-1]:.0f}" for kind in kinds for m in micros),
              "samples/s", flush=True)
    ratio = {key: statistics.median(runs[key]) / statistics.median(runs[key[0], b]) for key in runs}
    for m in micros[1:]:
        for kind in kinds:
            print(f"RESULT B={b} as {b // m} × {m} ÷ 1 × {b}, {kind}: {ratio[kind, m]:.3f} "
                  f"(overhead {1 - ratio[kind, m]:.1%}; target <= 5 %)")
        print(f"RESULT B={b} as {b // m} × {m}: trial loop's own share = loop ratio ÷ bare ratio = "
              f"{ratio['loop', m] / ratio['bare', m]:.3f}")


if __name__ == "__main__":
    main()
