"""The pre-training user's comparison (issue 48): a batch-size schedule 8 → 16 against staying at batch 8, with the
trunk's LR shape (warmup, then linear decay to zero at the budget) indexed by optimizer step (the old way, what an
HF Trainer did with ``max_steps`` = the schedule's steps: the same warmup steps and a decay over the run's own steps,
so in the first stage the warmup and decay run ahead of the samples) and laid out in samples (the new way:
``BatchSizeSchedule.lr_factor``, as branch mode trains its branches; the shape written for the run at batch 8).

A GPT-2 from a config (2 layers, 64 wide, no download) on the built-in markov language (``cbs_ray.data.markov``:
vocabulary 128, packed 32-token sequences), AdamW, peak LR 3e-3 at batch 8 (× √2 at 16, alpha 0.5), warmup 10 %
of the batch-8 run's steps. Per seed every run starts from the same weights and trains the same samples in the same
order (sequential over one draw); the figure is the eval loss (nats per token, 512 held-out sequences) at the end of
the budget, and each schedule's gap to the fixed batch. One CPU thread.

    python bench/integrations_lr_in_samples.py [--seeds 0 1] [--budget 4096] [--switch 1024]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from cbs_ray.data.markov import markov_chain, sample_sequences
from cbs_ray.integrations import BatchSizeSchedule
from cbs_ray.maths.lr_schedule import lr_multiplier, warmup_steps

VOCAB, SEQ, B0, B1, PEAK_LR, WARMUP_FRACTION = 128, 32, 8, 16, 3e-3, 0.1


def tiny_gpt(seed: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=64, n_layer=2, n_head=2, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config)


def eval_loss(model, data: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        losses = [float(model(input_ids=chunk, labels=chunk).loss) for chunk in data.split(128)]
    model.train()
    return float(np.mean(losses))


def markov_sequences(chain, budget: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A seed's training sequences (``budget`` of them, in the order every run trains them) and its 512 held-out
    ones, from the markov ``chain``."""
    data = torch.from_numpy(sample_sequences(chain, budget, SEQ, seed=[seed, 1]).astype(np.int64))
    held_out = torch.from_numpy(sample_sequences(chain, 512, SEQ, seed=[seed, 2]).astype(np.int64))
    return data, held_out


def train(seed: int, data: torch.Tensor, held_out: torch.Tensor, schedule: BatchSizeSchedule, lr_factor) -> float:
    """Train ``schedule`` over the data in order with LambdaLR(``lr_factor``); the final eval loss."""
    model = tiny_gpt(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=PEAK_LR, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    for step, stage in schedule.steps():
        first = schedule.samples_before_step(step)
        batch = data[first:first + stage.batch_size]
        model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return eval_loss(model, held_out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--budget", type=int, default=4096, help="samples each run trains")
    parser.add_argument("--switch", type=int, default=1024, help="sample where the schedule doubles 8 → 16")
    options = parser.parse_args()
    torch.set_num_threads(1)
    chain = markov_chain(VOCAB, rank=8, zipf_exponent=1.0, coupling=3.0, seed=0)
    base_steps = options.budget // B0
    warmup = warmup_steps(WARMUP_FRACTION, base_steps)

    def shape(k: int) -> float:  # the trunk's LR shape, written for a run at batch 8
        return lr_multiplier(k, warmup, base_steps, decay="linear")

    fixed = BatchSizeSchedule([(0, B0)], budget_samples=options.budget)
    grown = BatchSizeSchedule([(0, B0), (options.switch, B1)], budget_samples=options.budget)
    grown_steps = grown.optimizer_steps()

    def by_step(k: int) -> float:  # the old way: the same warmup steps, the decay over the run's own steps
        return lr_multiplier(k, warmup, grown_steps, decay="linear") * grown.stage_at_step(k).lr_multiplier

    ways = {"fixed B=8": (fixed, shape),
            "8→16, LR by step (old)": (grown, by_step),
            "8→16, LR by samples (new)": (grown, grown.lr_factor(shape))}
    print(f"budget {options.budget} samples of {SEQ} tokens; 8 → 16 at sample {options.switch} "
          f"({grown.optimizer_steps()} steps against {fixed.optimizer_steps()}); warmup {warmup} steps at B=8; "
          f"peak LR {PEAK_LR:g}; seeds {options.seeds}")
    rows, started = [], time.time()
    for seed in options.seeds:
        data, held_out = markov_sequences(chain, options.budget, seed)
        losses = {name: train(seed, data, held_out, *way) for name, way in ways.items()}
        rows.append(losses)
        print(f"seed {seed}: " + ", ".join(f"{name} {loss:.4f}" for name, loss in losses.items()), flush=True)
    print(f"\n{'':28s}{'eval loss':>10s}{'gap to B=8':>12s}")
    for name in ways:
        mean = float(np.mean([r[name] for r in rows]))
        gaps = [r[name] - r["fixed B=8"] for r in rows]
        print(f"{name:28s}{mean:10.4f}{float(np.mean(gaps)):+12.4f}  (per seed {', '.join(f'{g:+.4f}' for g in gaps)})")
    print(f"\n{time.time() - started:.0f} s, one thread")
    assert math.isfinite(rows[0]["fixed B=8"])


if __name__ == "__main__":
    main()
