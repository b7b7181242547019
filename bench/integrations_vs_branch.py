"""The pre-training user's comparison (a schedule 8 → 16 against staying at batch 8, same
weights and sample order per seed, 2 seeds) loses no more than branch mode's own difference + 0.005 nats.

The same task as ``bench/integrations_lr_in_samples.py``: a GPT-2 from a config (2 layers, 64 wide) on the built-in
markov language (vocabulary 128, packed 32-token sequences), AdamW, peak LR 3e-3 at batch 8 (× √2 at 16, alpha
0.5), warmup 10 % of the batch-8 run's steps, linear decay to zero at the budget; the figure is the eval loss (nats
per token, 512 held-out sequences) at the end of the budget. One CPU thread. Three ways of training each pair:

- **branch mode's own** (a): the steps and LR factors branch mode's loop trains its schedule run and its fixed
  small-batch control from (``train.run_plan.RunPlan``: ``steps()`` and ``lr_factors()``, the trunk's shape laid out
  in samples), one whole batch a step, as the package's loop does;
- **the user's loop through the integration** (b): a ``DataLoader`` of micro-batches of 4 (accumulation 2 at 8,
  4 at 16), ``scheduled_steps`` and a ``LambdaLR`` the user wrote for a run at batch 8, laid out in samples by
  ``scale_lambda_scheduler``, the fixed batch the same loop with a one-stage schedule;
- **the old step-indexed way**, beside it: the user's loop with the same warmup steps and the decay over the run's
  own optimizer steps (what ``integrations/hf.py`` did before).

Threshold, fixed before the run: mean over seeds 0 and 1 of the user's gap (schedule − fixed,
way b) ≤ mean of branch mode's own gap (way a) + 0.005 nats. The old way's gap is reported, not judged.

    PYTHONPATH=$PWD python bench/integrations_vs_branch.py [--seeds 0 1] [--budget 8192] [--switch 2048]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from cbs_ray.data.markov import markov_chain
from cbs_ray.integrations import BatchSizeSchedule
from cbs_ray.integrations.torch_loop import scale_lambda_scheduler, scheduled_steps
from cbs_ray.maths.lr_schedule import lr_multiplier, warmup_steps
from cbs_ray.train.run_plan import LrSchedule, RunPlan
from integrations_lr_in_samples import (  # the same model, data and LR as that bench
    B0,
    B1,
    PEAK_LR,
    SEQ,
    VOCAB,
    WARMUP_FRACTION,
    eval_loss,
    markov_sequences,
    tiny_gpt,
)

ALPHA, MICRO = 0.5, 4
MARGIN = 0.005
"""Nats the user's gap may exceed branch mode's own by (the target, fixed before the run)."""


def branch_plan(stages, budget: int, warmup: int) -> RunPlan:
    """Branch mode's plan of a validation run (its schedule, or the fixed small-batch control)."""
    lr = LrSchedule(batch=B0, alpha=ALPHA, peak=PEAK_LR, warmup_steps=warmup, total_steps=budget // B0,
                    decay="linear", in_samples=True)
    return RunPlan(batch_schedule=tuple(stages), start_samples=0, stop_samples=budget, report_at=(budget,), lr=lr)


def train_branch(seed: int, data, held_out, plan: RunPlan) -> float:
    """Way (a): one whole batch a step at ``plan.steps()``, LambdaLR(``plan.lr_factors()``)."""
    model = tiny_gpt(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=plan.peak_lr(plan.batch_schedule[0][1]), weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, plan.lr_factors())
    for first, batch in plan.steps():
        chunk = data[first:first + batch]
        model(input_ids=chunk, labels=chunk).loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return eval_loss(model, held_out)


def train_user(seed: int, data, held_out, schedule: BatchSizeSchedule, factor, *, in_samples: bool) -> float:
    """Ways (b) and old: the user's loop, micro-batches of ``MICRO`` from a DataLoader, ``scheduled_steps``."""
    model = tiny_gpt(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=PEAK_LR, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    if in_samples:
        assert scale_lambda_scheduler(scheduler, schedule)
    loader = torch.utils.data.DataLoader(data, batch_size=MICRO, shuffle=False)
    for step in scheduled_steps(loader, schedule):
        for micro in step.micro_batches:
            (model(input_ids=micro, labels=micro).loss / step.accumulation_steps).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return eval_loss(model, held_out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--budget", type=int, default=8192, help="samples each run trains")
    parser.add_argument("--switch", type=int, default=2048, help="sample where the schedule doubles 8 → 16")
    options = parser.parse_args()
    torch.set_num_threads(1)
    chain = markov_chain(VOCAB, rank=8, zipf_exponent=1.0, coupling=3.0, seed=0)
    base_steps = options.budget // B0
    warmup = warmup_steps(WARMUP_FRACTION, base_steps)

    def shape(k: int) -> float:  # the user's LR shape, written for a run at batch 8
        return lr_multiplier(k, warmup, base_steps, decay="linear")

    stages = [(0, B0), (options.switch, B1)]
    fixed = BatchSizeSchedule([(0, B0)], alpha=ALPHA, budget_samples=options.budget)
    grown = BatchSizeSchedule(stages, alpha=ALPHA, budget_samples=options.budget, warmup_samples=warmup * B0)
    grown_steps = grown.optimizer_steps()

    def by_step(k: int) -> float:  # the old way: the same warmup steps, the decay over the run's own steps
        return lr_multiplier(k, warmup, grown_steps, decay="linear") * grown.stage_at_step(k).lr_multiplier

    ways = {"branch: fixed B=8": lambda s, d, h: train_branch(s, d, h, branch_plan([(0, B0)], options.budget, warmup)),
            "branch: 8→16": lambda s, d, h: train_branch(s, d, h, branch_plan(stages, options.budget, warmup)),
            "user: fixed B=8": lambda s, d, h: train_user(s, d, h, fixed, shape, in_samples=True),
            "user: 8→16 (samples)": lambda s, d, h: train_user(s, d, h, grown, shape, in_samples=True),
            "user: 8→16 (by step, old)": lambda s, d, h: train_user(s, d, h, grown, by_step, in_samples=False)}
    print(f"budget {options.budget} samples of {SEQ} tokens; 8 → 16 at sample {options.switch} ({grown_steps} steps "
          f"against {fixed.optimizer_steps()}); warmup {warmup} steps at B=8; peak LR {PEAK_LR:g}; micro-batch "
          f"{MICRO} in the user's loop; seeds {options.seeds}")
    rows, started = [], time.time()
    for seed in options.seeds:
        data, held_out = markov_sequences(chain, options.budget, seed)
        losses = {name: way(seed, data, held_out) for name, way in ways.items()}
        rows.append(losses)
        print(f"seed {seed}: " + ", ".join(f"{name} {loss:.4f}" for name, loss in losses.items()), flush=True)
    gaps = {"branch mode's own (a)": ("branch: 8→16", "branch: fixed B=8"),
            "user's loop, LR in samples (b)": ("user: 8→16 (samples)", "user: fixed B=8"),
            "user's loop, LR by step (old)": ("user: 8→16 (by step, old)", "user: fixed B=8")}
    print(f"\n{'gap to the fixed batch 8':34s}{'mean':>9s}  per seed")
    means = {}
    for name, (schedule_run, fixed_run) in gaps.items():
        per_seed = [r[schedule_run] - r[fixed_run] for r in rows]
        means[name] = float(np.mean(per_seed))
        print(f"{name:34s}{means[name]:+9.4f}  {', '.join(f'{g:+.4f}' for g in per_seed)}")
    branch, user = means["branch mode's own (a)"], means["user's loop, LR in samples (b)"]
    verdict = "met" if user <= branch + MARGIN else "MISSED"
    print(f"\ntarget: user's gap {user:+.4f} ≤ branch mode's {branch:+.4f} + {MARGIN} = {branch + MARGIN:+.4f}: "
          f"{verdict}")
    print(f"{time.time() - started:.0f} s, one thread")


if __name__ == "__main__":
    main()
