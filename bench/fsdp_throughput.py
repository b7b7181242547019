"""The trial loop under FSDP2 against a bare FSDP2 loop, side by side in one run (issue 51's target: ≥ 0.9×).

Two gloo processes on this CPU (1 thread each). Both train the same GPT-2 from its config on the markov language,
at the same batch (micro-batch × accumulation × 2 workers), the same model sharded the same way (``fully_shard`` on
each ``GPT2Block``, then the root), AdamW, the norm clipped, accumulation without a sync per micro-batch:

- ``loop``: the real trial loop (``train.loop``, ``training.parallelism: fsdp``, the noise scale on), its training
  throughput as it reports it (``samples_per_s`` of the second report interval: no start-up, no evaluation);
- ``bare``: a hand-written FSDP2 loop over the same micro-batches, timed over the same number of steps after as many
  warm-up steps.

Rounds alternate the two; the ratio is loop ÷ bare per round, and the median is printed.

    python bench/fsdp_throughput.py [--rounds 3] [--steps 20] [--width 128] [--layers 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from cbs_ray.spec.load import load_spec
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.loop import train_loop
from cbs_ray.tune.api import prepare


class GlooSession:
    """One of two gloo ranks as the loop sees a Ray Train worker (FSDP shards the model itself)."""

    world_size = 2
    device = torch.device("cpu")

    def __init__(self):
        self.rank = torch.distributed.get_rank()
        self.reports = []

    def prepare_model(self, model):
        return model

    def prepare_data_loader(self, loader):
        return loader

    def all_reduce(self, tensor):
        torch.distributed.all_reduce(tensor)
        return tensor

    def all_reduce_min(self, value):
        tensor = torch.tensor([value])
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MIN)
        return int(tensor.item())

    def report(self, metrics, checkpoint_dir):
        self.reports.append(metrics)

    def get_checkpoint(self):
        return None


def spec_of(args):
    batch, steps = args.micro * args.accumulation * 2, args.steps
    return load_spec(None, [
        "task=causal-lm", f"model.config={{model_type: gpt2, n_embd: {args.width}, n_layer: {args.layers}, "
        f"n_head: 4, n_positions: {args.length}, resid_pdrop: 0.0, embd_pdrop: 0.0, attn_pdrop: 0.0}}",
        "data.builtin_task=markov", f"data.max_seq_length={args.length}", "data.builtin_eval_examples=64",
        "search.metric=eval_loss", "search.mode=min", f"search.batch_sizes=[{batch}]", "search.num_trials=1",
        f"training.budget_samples={2 * steps * batch}", f"training.eval_every_samples={steps * batch}",
        f"asha.grace_period_samples={steps * batch}", f"training.micro_batch_size={args.micro}",
        "training.parallelism=fsdp", "resources.workers_per_trial=2", "training.eval_subset_examples=64"])


def loop_throughput(spec, prepared) -> float:
    batch = spec.batch_sizes[0]
    cfg = TrialConfig.from_tune(spec, {"log2_batch": batch.bit_length() - 1, "alpha": 0.5, "warmup_fraction": 0.0},
                                budget_samples=prepared.budget_samples, model_config=prepared.model_config)
    session = GlooSession()
    train_loop(cfg, prepared.data, session)
    return session.reports[-1]["samples_per_s"]


def bare_throughput(spec, prepared, args) -> float:
    from torch.distributed.fsdp import fully_shard

    from cbs_ray.sources.model import build_model

    torch.manual_seed(0)
    model = build_model({"name": None, "config": spec.model.config}, spec.task, prepared.model_config)
    for block in model.transformer.h:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.tensor(prepared.data.train_ids)
    rank, micro = torch.distributed.get_rank(), args.micro
    step_items = args.micro * args.accumulation * 2 * (args.length - 1)

    def step(index: int) -> None:
        for k in range(args.accumulation):
            start = ((index * args.accumulation + k) * 2 + rank) * micro % (len(ids) - micro)
            batch = ids[start:start + micro]
            model.set_requires_gradient_sync(k == args.accumulation - 1)
            logits = model(input_ids=batch).logits.float()
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), batch[:, 1:].flatten(),
                                                     reduction="sum") * 2 / step_items
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).full_tensor()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for index in range(args.steps):
        step(index)
    began = time.perf_counter()
    for index in range(args.steps, 2 * args.steps):
        step(index)
    return args.steps * args.micro * args.accumulation * 2 / (time.perf_counter() - began)


def worker(rank: int, port: int, args) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    spec = spec_of(args)
    prepared = prepare(spec)
    ratios = []
    for round_index in range(args.rounds):
        loop = loop_throughput(spec, prepared)
        bare = bare_throughput(spec, prepared, args)
        ratios.append(loop / bare)
        if rank == 0:
            print(f"round {round_index + 1}: loop {loop:.1f} samples/s, bare {bare:.1f} samples/s, "
                  f"ratio {loop / bare:.3f}", flush=True)
    if rank == 0:
        print(f"median ratio (loop ÷ bare FSDP2): {statistics.median(ratios):.3f} over {args.rounds} rounds "
              f"(GPT-2 {args.layers}×{args.width}, sequence {args.length}, {args.micro} × {args.accumulation} "
              f"per worker × 2 gloo workers)", flush=True)
    torch.distributed.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--accumulation", type=int, default=2)
    args = parser.parse_args()
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(worker, args=(port, args), nprocs=2)


if __name__ == "__main__":
    main()
