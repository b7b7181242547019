"""The micro-batch probe under FSDP (``training.probe_micro_batch`` with ``training.parallelism: fsdp``, issue 51):
on two gloo ranks it measures the sharded model (memory per rank), every rank tries the same sizes and takes the
same answer (an all-reduce MIN of each ``fits``), and the trial then trains exactly as one planned by hand."""

import os

import pytest
import torch

from cbs_ray.spec.load import load_spec
from helpers.gloo import GlooCapture, free_port, join_gloo, train_recording_losses

GPT2 = ["task=causal-lm", "model.config={model_type: gpt2, n_embd: 32, n_layer: 2, n_head: 2, n_positions: 16, "
        "resid_pdrop: 0.0, embd_pdrop: 0.0, attn_pdrop: 0.0}",
        "data.builtin_task=markov", "data.markov_vocab_size=64", "data.max_seq_length=16",
        "data.builtin_eval_examples=32", "search.metric=eval_loss", "search.mode=min",
        "training.budget_samples=128", "training.eval_every_samples=64", "search.batch_sizes=[16]",
        "asha.grace_period_samples=64", "search.num_trials=1", "resources.workers_per_trial=2",
        "training.parallelism=fsdp", "search.seed=5", "training.base_lr=0.003"]
"""8 steps of B=16 on two ranks (8 a rank): the probe may try micro-batches up to 8."""

INFLATED_FROM = 5
"""Rank 1 reports a peak over the limit from this micro-batch on: alone it would plan 2, rank 0 alone 8."""


def _train(overrides, session):
    return train_recording_losses(GPT2 + overrides, session)


def _probe_on_two_ranks(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    from cbs_ray.train import memory_planner, setup
    from cbs_ray.train.fsdp import is_fsdp

    os.environ["HOME"] = f"{out}/home-{rank}"  # each rank its own probe cache: both probe, none reads the other's
    join_gloo(rank, port)
    tried, sharded, planned = [], [], []
    real_step, real_bytes, real_probe = memory_planner._probe_step, memory_planner.PeakResidentMemory.bytes, \
        setup.probe_micro_batch_size

    def recording_step(model, optimizer, m, **kwargs):
        tried.append(m)
        sharded.append(is_fsdp(model))
        return real_step(model, optimizer, m, **kwargs)

    def inflated_bytes(self):  # rank 1's peak over the limit from INFLATED_FROM on
        return real_bytes(self) + (2 ** 40 if rank == 1 and tried and tried[-1] >= INFLATED_FROM else 0)

    def recording_probe(*args, **kwargs):
        found = real_probe(*args, **kwargs)
        planned.append(found)
        return found

    memory_planner._probe_step, memory_planner.PeakResidentMemory.bytes = recording_step, inflated_bytes
    setup.probe_micro_batch_size = recording_probe
    try:
        probed = _train(["training.probe_micro_batch=true", "training.memory_limit_gb=64"], GlooCapture())
    finally:
        memory_planner._probe_step, memory_planner.PeakResidentMemory.bytes = real_step, real_bytes
        setup.probe_micro_batch_size = real_probe
    by_hand = _train(["training.micro_batch_size=2"], GlooCapture())
    torch.save({"tried": tried, "sharded": sharded, "planned": planned, "probed": probed, "by_hand": by_hand},
               f"{out}/found-{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.multiproc
def test_the_probe_under_fsdp_measures_each_rank_and_agrees_on_one_micro_batch(tmp_path):
    torch.multiprocessing.spawn(_probe_on_two_ranks, args=(free_port(), str(tmp_path)), nprocs=2)
    found = [torch.load(f"{tmp_path}/found-{rank}.pt", weights_only=False) for rank in (0, 1)]
    print(f"sizes tried {found[0]['tried']}; planned {[f['planned'] for f in found]}")
    assert found[0]["tried"] == found[1]["tried"]  # the same sizes in the same order: the collectives match
    assert found[0]["tried"][:3] == [2, 3, 5] and max(found[0]["tried"]) == INFLATED_FROM  # stopped at rank 1's
    assert all(found[0]["sharded"]) and found[0]["sharded"]  # it measured the sharded model: memory per rank
    for f in found:
        assert f["planned"] == [(2, 2)]  # (cap, largest fitting): rank 1's answer, on rank 0 too
        assert len(f["probed"]) == len(f["by_hand"]) == 8
        # The probe's steps were undone: the trial trains as one planned at micro-batch 2 by hand.
        assert f["probed"] == pytest.approx(f["by_hand"], rel=1e-5)


def test_a_probe_under_fsdp_is_a_valid_spec():
    """The spec no longer refuses the probe with FSDP (it measures the sharded model)."""
    spec = load_spec(None, GPT2 + ["training.probe_micro_batch=true", "training.memory_limit_gb=8"])
    assert spec.training.probe_micro_batch and spec.training.parallelism == "fsdp"
