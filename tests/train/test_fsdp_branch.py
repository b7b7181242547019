"""Branch mode's trunk-to-branch restore under FSDP (``search.method: branch`` with ``training.parallelism: fsdp``),
on two gloo ranks: the trunk publishes its gathered state at a branch point, a branch's ranks each read it
and keep their shards (``train.checkpoint.load_branch_start``). A branch at the trunk's own batch then retraces the
trunk exactly, and a branch at twice the batch trains as DDP's branch from DDP's trunk does."""

import dataclasses

import pytest
import torch

from cbs_ray.methods.branch.hooks import StartsFromCheckpoint
from cbs_ray.methods.branch.runs import branch_configs, branch_run_plan, trunk_config
from cbs_ray.methods.branch.settings import resolve_branch_settings
from cbs_ray.spec.load import load_spec
from cbs_ray.train.config import TrialConfig
from cbs_ray.tune.api import prepare
from helpers.gloo import GlooCapture, free_port, join_gloo
from helpers.paths import SEARCH_SPACES

SHRUNK = ["model.config.n_embd=32", "model.config.n_layer=2", "data.builtin_train_examples=400",
          "data.builtin_eval_examples=64", "training.budget_samples=512", "training.eval_every_samples=256",
          "asha.grace_period_samples=256", "search.batch_sizes=[8, 16, 32]", "search.repeats=1",
          "search.method=branch", "branch.checkpoints=[128, 256]", "branch.window=64", "branch.batch_sizes=[16, 32]",
          "branch.alphas=[0.5, 1.0]", "resources.workers_per_trial=2"]
"""``tests/train/test_branch_loop.py``'s shrunk search (2 layers here: FSDP shards two blocks) on two workers."""


def _runs(parallelism: str, directory: str) -> dict:
    from cbs_ray.train.loop import train_loop

    spec = load_spec(str(SEARCH_SPACES / "tiny_causal_lm.yaml"), SHRUNK + [f"training.parallelism={parallelism}"])
    ready = prepare(spec)
    branching = resolve_branch_settings(spec, ready.budget_samples)

    def trial(config: dict) -> TrialConfig:
        return TrialConfig.for_plan(spec, branch_run_plan(spec, branching, config), budget_samples=ready.budget_samples,
                                    model_config=ready.model_config)

    def train(cfg: TrialConfig) -> list[dict]:
        session = GlooCapture()
        train_loop(cfg, ready.data, session)
        return session.reports

    trunk = trial(trunk_config(branching, directory))  # cut at 192: its checkpoint at 128, reports at 128 and 192
    trunk = dataclasses.replace(trunk, plan=dataclasses.replace(trunk.plan, stop_samples=192, report_at=(128, 192),
                                                                hooks=dataclasses.replace(trunk.plan.hooks,
                                                                                          publish_at=(128,))))
    found = {"trunk": train(trunk)}
    own = dataclasses.replace(trunk.plan, batch_schedule=((128, 8),), start_samples=128, stop_samples=192,
                              report_at=(192,), noise_scale_off="not measured",
                              hooks=StartsFromCheckpoint("branch", checkpoint_dir=directory))
    found["own"] = train(dataclasses.replace(trunk, plan=own))
    (twice,) = [c for c in branch_configs(branching, directory)
                if c["start_samples"] == 128 and c["log2_batch"] == 4 and c["alpha"] == 1.0]
    found["twice"] = train(trial(twice))
    return found


def _ddp_and_fsdp(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    join_gloo(rank, port)
    found = {name: _runs(name, f"{out}/{name}/checkpoints") for name in ("ddp", "fsdp")}
    torch.save(found, f"{out}/found-{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.multiproc
@pytest.mark.slow  # ≈ 35 s on 2 cores: plain pytest keeps within its 10 min; CI's slow step runs it
def test_a_branch_under_fsdp_starts_from_the_trunks_gathered_checkpoint(tmp_path):
    torch.multiprocessing.spawn(_ddp_and_fsdp, args=(free_port(), str(tmp_path)), nprocs=2)
    assert (tmp_path / "fsdp" / "checkpoints" / "samples_128" / "state.pt").is_file()  # the trunk published it
    for rank in (0, 1):
        found = torch.load(f"{tmp_path}/found-{rank}.pt", weights_only=False)
        ddp, fsdp = found["ddp"], found["fsdp"]
        trunk_at_192 = fsdp["trunk"][-1]
        (own,) = fsdp["own"]
        print(f"rank {rank}: own-batch branch {own['eval_loss']:.7f} vs trunk {trunk_at_192['eval_loss']:.7f}; "
              f"B=16 branch {fsdp['twice'][0]['eval_loss']:.7f} (fsdp) {ddp['twice'][0]['eval_loss']:.7f} (ddp)")
        # The same weights, optimizer state and data position: the trunk's own second half, exactly.
        assert (own["samples_seen"], own["start_samples"], own["resumed_from_samples"]) == (192, 128, 0)
        assert own["eval_loss"] == pytest.approx(trunk_at_192["eval_loss"], rel=1e-6)
        assert own["train_loss"] == pytest.approx(trunk_at_192["train_loss"], rel=1e-6)
        # A branch at twice the batch, FSDP's against DDP's: the restore sharded as DDP's whole copy is.
        (f_twice,), (d_twice,) = fsdp["twice"], ddp["twice"]
        assert (f_twice["samples_seen"], f_twice["batch_size"]) == (192, 16)
        for key in ("eval_loss", "train_loss"):
            assert f_twice[key] == pytest.approx(d_twice[key], rel=1e-4)
        assert f_twice["eval_loss"] != pytest.approx(trunk_at_192["eval_loss"], rel=1e-6)  # it is another run
