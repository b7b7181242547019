"""The ladder's averaged reading under FSDP (``ladder.reading: ewa`` with ``training.parallelism: fsdp``):
each rank averages its own shards (``train.averaging.ShardedAverage``) and evaluates them swapped into the sharded
model; on two gloo ranks its ``ewa_eval_loss`` equals DDP's averaged copy's within 1e-5, and the trained weights
come back after every evaluation (the losses after it agree with DDP's)."""


import pytest
import torch

from cbs_ray.methods.ladder.hooks import AveragesIterates
from cbs_ray.spec.load import load_spec
from cbs_ray.train.averaging import ShardedAverage
from helpers.gloo import GlooCapture, free_port, join_gloo, train_recording_losses

GPT2 = ["task=causal-lm", "model.config={model_type: gpt2, n_embd: 32, n_layer: 2, n_head: 2, n_positions: 16, "
        "resid_pdrop: 0.0, embd_pdrop: 0.0, attn_pdrop: 0.0}",
        "data.builtin_task=markov", "data.markov_vocab_size=64", "data.max_seq_length=16",
        "data.builtin_eval_examples=64", "search.metric=eval_loss", "search.mode=min",
        "training.budget_samples=384", "training.eval_every_samples=128", "search.batch_sizes=[16]",
        "asha.grace_period_samples=128", "search.num_trials=1", "resources.workers_per_trial=2",
        "training.micro_batch_size=4", "training.base_lr=0.003", "search.seed=7"]
"""24 steps of B=16 on two ranks, three evaluations: the average trails the raw weights by then."""


def _averaged_run(parallelism: str):
    session = GlooCapture()
    losses = train_recording_losses(GPT2 + [f"training.parallelism={parallelism}"], session,
                                    plan_changes={"hooks": AveragesIterates()})
    return {"losses": losses, "reports": session.reports}


def _ddp_and_fsdp(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    join_gloo(rank, port)
    found = {name: _averaged_run(name) for name in ("ddp", "fsdp")}
    torch.save(found, f"{out}/found-{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.multiproc
def test_the_averaged_reading_under_fsdp_equals_ddps(tmp_path):
    torch.multiprocessing.spawn(_ddp_and_fsdp, args=(free_port(), str(tmp_path)), nprocs=2)
    for rank in (0, 1):
        found = torch.load(f"{tmp_path}/found-{rank}.pt", weights_only=False)
        ddp, fsdp = found["ddp"]["reports"], found["fsdp"]["reports"]
        assert len(ddp) == len(fsdp) == 3
        print(f"rank {rank}: ewa_eval_loss {[r['ewa_eval_loss'] for r in fsdp]} (fsdp), "
              f"{[r['ewa_eval_loss'] for r in ddp]} (ddp); eval_loss {[r['eval_loss'] for r in fsdp]}")
        for f_report, d_report in zip(fsdp, ddp):
            assert f_report["ewa_eval_loss"] == pytest.approx(d_report["ewa_eval_loss"], rel=1e-5)
            assert f_report["eval_loss"] == pytest.approx(d_report["eval_loss"], rel=1e-5)
        # The average is not the raw model: it trails it (the comparison is of the average, not of the weights).
        assert all(abs(r["ewa_eval_loss"] / r["eval_loss"] - 1) > 1e-3 for r in fsdp)
        # The trained shards came back after each evaluation: training after one goes on as DDP's.
        assert found["fsdp"]["losses"] == pytest.approx(found["ddp"]["losses"], rel=1e-4)


def test_the_sharded_average_of_a_plain_model_follows_the_polynomial_decay():
    """Without a process group a plain module's parameters are their own 'shards': η = 0 is the running mean."""
    model = torch.nn.Linear(2, 1)
    average = ShardedAverage(model, eta=0.0)
    for value in (1.0, 2.0, 3.0):
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(value)
        average.update_parameters(model)
    with average.swapped_in() as module:
        assert float(module.weight.detach()[0, 0]) == pytest.approx(2.0)
    assert float(model.weight.detach()[0, 0]) == pytest.approx(3.0)  # the trained weights are back


def test_an_ewa_ladder_under_fsdp_is_a_valid_spec():
    spec = load_spec(None, GPT2 + ["training.parallelism=fsdp", "search.method=ladder", "search.batch_sizes=[4, 8, 16, 32]",
                                   "training.budget_samples=4096", "search.num_trials=4"])
    assert spec.section("ladder").reading == "ewa"
