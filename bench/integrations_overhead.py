"""Overhead of cbs_ray.integrations' callbacks: the same training with and without each, side by side.

A GPT-2 built from a config (4 layers, 128 wide, 64 tokens; no download) trains at batch 32 as 4 micro-batches
of 8 on CPU, one thread, in HF Trainer and in Lightning: bare, with ``BatchSizeScheduleCallback`` (a one-stage
schedule at the same batch, so the work is identical and only the callback's bookkeeping differs) and with
``NoiseScaleCallback`` (two gradient norms a step). Runs alternate (bare, schedule, noise, bare, …) so the
machine's drift hits all alike; the figure is the median over repeats of the time per optimizer step after
the first steps, and the ratio to bare (paired per repeat), beside a second bare run (``bare again``: the
ratio two identical runs differ by on this machine, the measurement's own noise). Because a shared 2-core
machine's noise is larger than the effect, the time spent *inside* each callback (its hooks, and the gradient
norms it reads, timed with ``perf_counter``) is reported too, per step and as a share of the bare step: that
is the overhead itself. Target (issue 39): ≤ 2 % of step time.

    python bench/integrations_overhead.py [--repeats 5] [--steps 30] [--only hf|lightning]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time

import torch

from cbs_ray.integrations import BatchSizeSchedule

MICRO, ACCUMULATION, SEQ, WARMUP_STEPS = 8, 4, 64, 5
INSIDE = {"seconds": 0.0, "depth": 0}  # time inside the callbacks under test (hooks and gradient norms)


def timed(function):
    def wrapper(*args, **kwargs):
        INSIDE["depth"] += 1
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            INSIDE["depth"] -= 1
            if INSIDE["depth"] == 0:  # a norm read inside a hook counts once
                INSIDE["seconds"] += time.perf_counter() - start
    return wrapper


def instrument(callbacks: list) -> list:
    """Time every hook of these callback instances (the hooks they define themselves)."""
    for cb in callbacks:
        for name in dir(type(cb)):
            if name.startswith("on_") and name in type(cb).__dict__:
                setattr(cb, name, timed(getattr(cb, name)))
    return callbacks


def patch_norms() -> None:
    from cbs_ray.integrations import hf, torch_loop

    norm = timed(torch_loop.gradient_sqnorm)
    torch_loop.gradient_sqnorm = hf.gradient_sqnorm = norm


def model():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=512, n_positions=SEQ, n_embd=128, n_layer=4, n_head=4))


def rows(n: int) -> list[dict]:
    ids = torch.randint(0, 512, (n, SEQ), generator=torch.Generator().manual_seed(0))
    return [{"input_ids": r, "labels": r.clone()} for r in ids]


def hf_step_time(extra: str, steps: int) -> float:
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from cbs_ray.integrations.hf import BatchSizeScheduleCallback, NoiseScaleCallback

    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *args, **kwargs):
            stamps.append(time.perf_counter())

    callbacks = instrument({"bare": [], "bare again": [],
                            "schedule": [BatchSizeScheduleCallback(BatchSizeSchedule([(0, MICRO * ACCUMULATION)]))],
                            "noise": [NoiseScaleCallback()]}[extra])
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=MICRO,
                                 gradient_accumulation_steps=ACCUMULATION, max_steps=steps, report_to="none",
                                 save_strategy="no", logging_steps=10, disable_tqdm=True, use_cpu=True,
                                 train_sampling_strategy="sequential")
        data = rows(steps * MICRO * ACCUMULATION)
        Trainer(model=model(), args=args, train_dataset=data, callbacks=[Clock(), *callbacks]).train()
    return (stamps[-1] - stamps[WARMUP_STEPS]) / (len(stamps) - 1 - WARMUP_STEPS)


def lightning_step_time(extra: str, steps: int) -> float:
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    from cbs_ray.integrations.lightning import BatchSizeScheduleCallback, NoiseScaleCallback

    stamps: list[float] = []

    class Clock(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step > len(stamps):
                stamps.append(time.perf_counter())

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model()

        def training_step(self, batch, batch_idx):
            return self.model(**batch).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    callbacks = instrument({"bare": [], "bare again": [],
                            "schedule": [BatchSizeScheduleCallback(BatchSizeSchedule([(0, MICRO * ACCUMULATION)]))],
                            "noise": [NoiseScaleCallback()]}[extra])
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, accumulate_grad_batches=ACCUMULATION,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[Clock(), *callbacks])
    trainer.fit(Module(), DataLoader(rows(steps * MICRO * ACCUMULATION), batch_size=MICRO))
    return (stamps[-1] - stamps[WARMUP_STEPS]) / (len(stamps) - 1 - WARMUP_STEPS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--only", choices=["hf", "lightning"], help="one trainer only")
    opts = parser.parse_args()
    torch.set_num_threads(1)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    print(f"GPT-2 4×128, {SEQ} tokens, batch {MICRO * ACCUMULATION} = {ACCUMULATION} × {MICRO}, CPU, 1 thread; "
          f"{opts.repeats} alternated repeats of {opts.steps} steps; target: overhead ≤ 2 %")
    patch_norms()
    trainers = {"hf": ("HF Trainer", hf_step_time), "lightning": ("Lightning", lightning_step_time)}
    for key, (name, run) in trainers.items():
        if opts.only and key != opts.only:
            continue
        times = {k: [] for k in ("bare", "bare again", "schedule", "noise")}
        inside = {k: [] for k in times}
        for _ in range(opts.repeats):
            for extra in times:
                INSIDE["seconds"] = 0.0
                times[extra].append(run(extra, opts.steps))
                inside[extra].append(INSIDE["seconds"] / opts.steps)
        bare = statistics.median(times["bare"])
        print(f"{name}: bare {bare * 1e3:.1f} ms/step", flush=True)
        for extra in ("bare again", "schedule", "noise"):
            # Paired per repeat (the runs of one repeat ran back to back), then the median ratio.
            ratio = statistics.median(t / b for t, b in zip(times[extra], times["bare"]))
            own = statistics.median(inside[extra])
            print(f"  + {extra:10s} {statistics.median(times[extra]) * 1e3:.1f} ms/step, ratio {ratio:.3f} "
                  f"({(ratio - 1) * 100:+.1f} %); inside the callback {own * 1e3:.3f} ms/step = "
                  f"{own / bare * 100:.2f} % of the bare step", flush=True)


if __name__ == "__main__":
    main()
