"""Samples/s of cbs-ray's trial loop ÷ a bare PyTorch loop: same model, data, batch, threads, one process.

The bare loop is what a person writes by hand: forward, backward, clip, AdamW step, scheduler step,
zero_grad, over a shuffled DataLoader. The trial loop adds what the search needs (LR plan, sample
counting, milestone evaluation, reporting, a checkpoint at each report). Both train the same number of
samples and evaluate once at the end; runs alternate (bare, loop, bare, loop, …) and the ratio of
medians is reported, so machine noise hits both alike.

    python bench/loop_throughput.py [--batch 32] [--samples 8192] [--threads 1] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from cbs_ray.maths.lr_schedule import lr_multiplier
from cbs_ray.sources.builtin import evaluate
from cbs_ray.sources.model import build_model
from cbs_ray.spec.load import load_spec
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.loop import train_loop
from cbs_ray.train.optimizer import make_optimizer
from cbs_ray.train.sessions import LocalSession
from cbs_ray.tune.api import prepare


class Quiet(LocalSession):
    """Reports go nowhere (no Tune session in a benchmark); checkpoints are still written."""

    def report(self, metrics, checkpoint_dir):
        self.last = metrics

    def get_checkpoint(self):
        return None


def bare_loop(setup, data) -> float:
    torch.manual_seed(setup.seed)
    model = build_model(setup.model, setup.task, setup.model_config)
    optimizer = make_optimizer(model, setup.spec.training, setup.peak_lr, model_config=setup.model_config)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_multiplier(s, 0, setup.total_steps))
    dataset = torch.utils.data.TensorDataset(*(torch.tensor(a) for a in (data.train_ids, data.train_mask,
                                                                         data.train_labels)))
    loader = torch.utils.data.DataLoader(dataset, batch_size=setup.batch_size, shuffle=True, drop_last=True)
    start, steps = time.perf_counter(), 0
    model.train()
    while steps < setup.total_steps:
        for ids, mask, labels in loader:
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            steps += 1
            if steps == setup.total_steps:
                break
    evaluate(model, LocalSession(), data, setup)
    return setup.budget_samples / (time.perf_counter() - start)


def trial_loop(setup, data) -> float:
    start = time.perf_counter()
    train_loop(setup, data, Quiet())
    return setup.budget_samples / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    spec = load_spec(None, [f"training.budget_samples={args.samples}", f"training.eval_every_samples={args.samples}",
                            f"asha.grace_period_samples={args.samples}", f"search.batch_sizes=[{args.batch}]",
                            "search.num_trials=1", f"resources.cpus_per_worker={args.threads}"])
    prepared = prepare(spec)
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    tune_config = {"log2_batch": args.batch.bit_length() - 1, "alpha": 1.0, "warmup_fraction": 0.0}
    setup = TrialConfig.from_tune(spec, tune_config, budget_samples=budget, model_config=config)
    torch.set_num_threads(args.threads)
    bare_loop(setup, data)  # warm-up: first-call costs (lazy imports, allocator) charged to neither
    bare, loop = [], []
    for _ in range(args.repeats):
        bare.append(bare_loop(setup, data))
        loop.append(trial_loop(setup, data))
        print(f"bare {bare[-1]:.0f} samples/s, trial loop {loop[-1]:.0f} samples/s", flush=True)
    ratio = statistics.median(loop) / statistics.median(bare)
    print(f"RESULT batch={args.batch} threads={args.threads} samples={args.samples}: trial loop ÷ bare = "
          f"{ratio:.3f} (medians {statistics.median(loop):.0f} / {statistics.median(bare):.0f} samples/s, "
          f"{args.repeats} alternating repeats; target >= 0.95)")


if __name__ == "__main__":
    main()
