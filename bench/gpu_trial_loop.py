"""The trial loop itself on one GPU: BERT-base bf16 at sequence 128, the samples/s the loop reports and
the MFU they make, at B = micro as 1 × micro and as 4 × micro/4. ``gpu_bert_base.py`` times a bare
training step; this times what a trial runs (DataLoader, per-step token counting, the one device sync
per step, clipping, the LR schedule and milestone evaluation, which the reported samples/s leave out as
the search's own figures do). Checkpoints are not written: BERT-base with its AdamW state is 1.3 GB per
report, time the figure leaves out but the device session's minutes do not.

Runs without Ray, in an in-process session on the device (as ``pytest -m gpu``). Each run trains
2 × ``--steps`` optimizer steps and reports twice; the second report's samples/s (the first interval
carries the warm-up) is the figure. Runs alternate, whole and split, ``--repeats`` times.

    python bench/gpu_trial_loop.py [--micro 2048] [--steps 10] [--repeats 2] [--compile]
    python bench/gpu_trial_loop.py --smoke    # the same code on the CPU with a tiny BERT, in seconds
"""

from __future__ import annotations

import argparse
import statistics

import torch

import cbs_ray.train.loop
from cbs_ray.sources.model import build_model
from cbs_ray.spec.load import load_spec
from cbs_ray.spec.schema import TINY_BERT
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.loop import train_loop
from cbs_ray.tune.api import prepare
from gpu_bert_base import palm_flops_per_token  # bench/ is on sys.path when a bench script runs
from loop_throughput import Quiet


class DeviceSession(Quiet):
    """The in-process session on the bench's device; keeps the last report."""

    def __init__(self, device: torch.device):
        self.device = device


def trial(batch: int, micro: int, args, device: torch.device, prepared=None):
    """The trial's setup and data: BERT-base (or the tiny BERT) from its config, built-in sentences padded
    to ``args.seq``, alpha 0 (the base LR at any batch), no warm-up, bf16 (fp32 in the smoke run). One
    epoch holds every step, so no epoch boundary (the DataLoader's workers filling up again) falls inside
    a timed interval. ``prepared``: the data and config of an earlier call (they do not depend on micro)."""
    model = "{model_type: bert}" if not args.smoke else "{" + ", ".join(f"{k}: {v}" for k, v in TINY_BERT.items()) + "}"
    samples = 2 * args.steps * batch
    spec = load_spec(None, [
        f"model.config={model}", f"data.max_seq_length={args.seq}",
        f"data.builtin_train_examples={max(8192, samples + batch)}",
        "data.builtin_eval_examples=256", f"search.batch_sizes=[{batch}]", "search.num_trials=1",
        f"training.budget_samples={samples}", f"training.eval_every_samples={samples // 2}",
        f"asha.grace_period_samples={samples // 2}", f"training.micro_batch_size={micro}",
        f"training.precision={'fp32' if args.smoke else 'bf16'}", f"training.compile={str(args.compile).lower()}",
        f"resources.use_gpu={str(device.type == 'cuda').lower()}"])
    if prepared is None:
        ready = prepare(spec)
        prepared = (ready.data, ready.budget_samples, ready.model_config)
    data, budget, config = prepared
    tune_config = {"log2_batch": batch.bit_length() - 1, "alpha": 0.0, "warmup_fraction": 0.0}
    setup = TrialConfig.from_tune(spec, tune_config, budget_samples=budget, model_config=config)
    return setup, (data, budget, config)


def samples_per_s(batch: int, micro: int, args, device: torch.device, prepared) -> dict:
    setup, (data, _, _) = trial(batch, micro, args, device, prepared)
    if args.compile:
        torch._dynamo.reset()  # each run compiles its own static shapes, as a fresh trial process would
    session = DeviceSession(device)
    train_loop(setup, data, session)
    return session.last


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--micro", type=int, default=2048, help="the planned micro-batch (the H200 probe's: 2048)")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps per report interval")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--compile", action="store_true", help="training.compile=true")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H100/H200 SXM)")
    parser.add_argument("--smoke", action="store_true", help="tiny BERT on the CPU, seq 32, micro 16, 2 steps")
    args = parser.parse_args()
    if args.smoke:
        args.micro, args.seq, args.steps, args.repeats = 16, 32, 2, 1
    else:
        assert torch.cuda.is_available(), "needs a CUDA GPU (or --smoke)"
        torch.backends.cuda.matmul.allow_tf32 = True
    device = torch.device("cuda" if not args.smoke else "cpu")
    cbs_ray.train.loop.save_state = lambda *args, **kwargs: None  # no checkpoints (see the docstring)
    setup, prepared = trial(args.micro, args.micro, args, device)
    per_token = palm_flops_per_token(build_model(setup.model, setup.task, setup.model_config), args.seq)
    batch, runs = args.micro, {1: [], 4: []}
    for _ in range(args.repeats):
        for accumulation in runs:
            last = samples_per_s(batch, batch // accumulation, args, device, prepared)
            assert (last["micro_batch"], last["accumulation"]) == (batch // accumulation, accumulation), last
            runs[accumulation].append(last["samples_per_s"])
            print(f"trial loop {accumulation} x {batch // accumulation}: {last['samples_per_s']:.0f} samples/s "
                  f"(train loss {last['train_loss']:.3f})", flush=True)
    label = "compiled" if args.compile else "eager"
    whole, split = (statistics.median(runs[a]) for a in (1, 4))
    mfu = per_token * whole * args.seq / (args.peak_tflops * 1e12)
    print(f"RESULT trial loop BERT-base bf16 seq {args.seq} micro {batch} {label}: {whole:.0f} samples/s, "
          f"MFU {mfu:.1%} (PaLM definition; target >= 45 %)", flush=True)
    print(f"RESULT trial loop accumulation {label} B={batch} as 4 x {batch // 4} / 1 x {batch}: {split / whole:.3f} "
          f"(overhead {1 - split / whole:.1%}; target <= 5 %; medians of {args.repeats})", flush=True)


if __name__ == "__main__":
    main()
