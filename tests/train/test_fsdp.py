"""FSDP2 trials (``training.parallelism: fsdp``, issue 51): the block rule on hand-built models, the plan's bad input
before Ray, and on two gloo ranks an FSDP trial against a DDP trial of the same seed, data and batch (clipping,
accumulation and the noise scale on), then an FSDP trial resumed from its own checkpoint."""

import contextlib
import os
import shutil
import subprocess
import sys

import pytest
import torch

from cbs_ray.sources.blocks import FsdpPlanError, transformer_blocks
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.train.config import TrialConfig
from cbs_ray.tune.api import prepare
from helpers.gloo import GlooCapture, free_port, join_gloo

GPT2 = ["task=causal-lm", "model.config={model_type: gpt2, n_embd: 32, n_layer: 2, n_head: 2, n_positions: 16, "
        "resid_pdrop: 0.0, embd_pdrop: 0.0, attn_pdrop: 0.0}",
        "data.builtin_task=markov", "data.markov_vocab_size=64", "data.max_seq_length=16",
        "data.builtin_eval_examples=64", "search.metric=eval_loss", "search.mode=min"]
"""A 2-layer GPT-2 on the markov language: ``GPT2Block`` its blocks by ``_no_split_modules``."""

STEPS = 50
FIFTY_STEPS = GPT2 + ["training.budget_samples=800", "training.eval_every_samples=400", "search.batch_sizes=[16]",
                      "asha.grace_period_samples=400", "search.num_trials=1", "training.micro_batch_size=4",
                      "training.grad_clip_norm=0.5", "training.base_lr=0.003", "resources.workers_per_trial=2",
                      "search.seed=3"]
"""50 steps of B=16: per worker 2 micro-batches of 4 (accumulation), the norm clipped at 0.5 (most steps clip)."""


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x)


class Stack(torch.nn.Module):
    """A user's model: its blocks are the layers of its ModuleLists of repeated modules."""

    def __init__(self, layers=3):
        super().__init__()
        self.heads = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.ReLU()])  # not repeated: not blocks
        self.layers = torch.nn.ModuleList([Block() for _ in range(layers)])


def test_the_blocks_are_the_lists_of_repeated_layers_or_the_named_class():
    model = Stack()
    assert transformer_blocks(model) == list(model.layers)
    assert transformer_blocks(model, "Linear") == [model.heads[0]] + [b.linear for b in model.layers]
    model._no_split_modules = ["Block"]
    assert transformer_blocks(model) == list(model.layers)


def test_a_block_inside_a_block_is_left_to_its_parent():
    model = Stack()
    outer = torch.nn.ModuleList([Stack(1), Stack(1)])
    model.layers = outer
    assert transformer_blocks(model, "Stack") == list(outer)


def test_a_model_without_blocks_is_refused_naming_the_key():
    with pytest.raises(FsdpPlanError, match="training.fsdp_block_class"):
        transformer_blocks(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    with pytest.raises(FsdpPlanError, match="no module of class 'Missing'"):
        transformer_blocks(Stack(), "Missing")


def test_hugging_face_blocks_by_no_split_modules():
    spec = load_spec(None, GPT2)
    from cbs_ray.sources.model import build_model

    model = build_model({"name": None, "config": spec.model.config}, spec.task, prepare(spec).model_config)
    assert [type(b).__name__ for b in transformer_blocks(model)] == ["GPT2Block", "GPT2Block"]


def test_an_fsdp_plan_without_blocks_fails_before_ray_in_one_line(tmp_path):
    """The command line: one line, exit 2, nothing of Ray started (``--dry-run`` reaches the check too)."""
    result = subprocess.run([sys.executable, "-m", "cbs_ray.search", "--dry-run", "--set", "training.parallelism=fsdp",
                             "--set", "training.fsdp_block_class=NoSuchBlock", "--set", "resources.workers_per_trial=2",
                             "--output", str(tmp_path / "out")],
                            capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "RAY_ADDRESS": ""})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "training.fsdp_block_class" in lines[0], lines
    assert "Traceback" not in result.stderr


def test_fsdp_blocks_named_without_fsdp_are_refused():
    with pytest.raises(SpecError, match="set training.parallelism: fsdp"):
        load_spec(None, ["training.fsdp_block_class=GPT2Block"])


# ---- two gloo ranks -------------------------------------------------------------------------------

class CheckpointKeeper(GlooCapture):
    """A gloo rank that keeps each report's checkpoint (a copy of rank 0's directory) and can hand one back as
    a restart's ``get_checkpoint()``."""

    def __init__(self, keep: str, resume_from: str = ""):
        super().__init__()
        self.keep, self.resume_from, self.kept = keep, resume_from, []

    def report(self, metrics, checkpoint_dir):
        super().report(metrics, checkpoint_dir)
        if checkpoint_dir:
            target = f"{self.keep}/{len(self.kept)}"
            shutil.copytree(checkpoint_dir, target)
            self.kept.append(target)

    def get_checkpoint(self):
        if not self.resume_from:
            return None
        path = self.resume_from

        class Held:
            @contextlib.contextmanager
            def as_directory(self):
                yield path

        return Held()


def _train_recording_steps(overrides, session):
    """The real loop; returns (each step's loss, each noise reading (small, big), the session)."""
    from cbs_ray.maths.noise_scale import NoiseScaleMeter
    from cbs_ray.train import loop, setup

    losses, noise = [], []
    step, add, shard = loop._optimizer_step, NoiseScaleMeter.add, setup.shard_model

    def recording_shard(model, **kwargs):
        session.sharded = True
        return shard(model, **kwargs)

    def recording_step(*args, **kwargs):
        readings = step(*args, **kwargs)
        losses.append(readings.loss)
        return readings

    def recording_add(self, small, big):
        noise.append((small, big))
        return add(self, small, big)

    loop._optimizer_step, NoiseScaleMeter.add, setup.shard_model = recording_step, recording_add, recording_shard
    session.sharded = False
    try:
        spec = load_spec(None, FIFTY_STEPS + overrides)
        ready = prepare(spec)
        data, budget, config = ready.data, ready.budget_samples, ready.model_config
        cfg = TrialConfig.from_tune(spec, {"log2_batch": 4, "alpha": 0.5, "warmup_fraction": 0.1},
                                    budget_samples=budget, model_config=config)
        loop.train_loop(cfg, data, session)
    finally:
        loop._optimizer_step, NoiseScaleMeter.add, setup.shard_model = step, add, shard
    return losses, noise, session


def _fsdp_and_ddp(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    join_gloo(rank, port)
    found = {}
    for name in ("ddp", "fsdp"):
        keep = f"{out}/{name}-{rank}"
        losses, noise, session = _train_recording_steps([f"training.parallelism={name}"], CheckpointKeeper(keep))
        found[name] = {"losses": losses, "noise": noise, "reports": session.reports, "sharded": session.sharded,
                       "weights": session.weights, "kept": session.kept}
    # The FSDP run again from its first report's checkpoint: the second half must retrace the uninterrupted run.
    losses, _, session = _train_recording_steps(["training.parallelism=fsdp"], CheckpointKeeper(
        f"{out}/resumed-{rank}", resume_from=f"{out}/fsdp-0/0"))  # rank 0's first: both ranks read it
    found["resumed"] = {"losses": losses, "reports": session.reports, "weights": session.weights}
    torch.save(found, f"{out}/found-{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.multiproc
def test_fsdp_trains_as_ddp_does_and_resumes_from_its_checkpoint(tmp_path):
    """Same seed, data and batch on two gloo ranks: FSDP2's 50 losses within 1e-4 (relative) of DDP's, its
    noise readings (each rank's own gradient, the reduced one) and its reported B_simple within 5 %, its gathered
    checkpoint the same weights; resumed from its first checkpoint it retraces its own second half."""
    torch.multiprocessing.spawn(_fsdp_and_ddp, args=(free_port(), str(tmp_path)), nprocs=2)
    for rank in (0, 1):
        found = torch.load(f"{tmp_path}/found-{rank}.pt", weights_only=False)
        ddp, fsdp, resumed = found["ddp"], found["fsdp"], found["resumed"]
        assert len(ddp["losses"]) == len(fsdp["losses"]) == STEPS
        assert fsdp["sharded"] and not ddp["sharded"]
        print(f"rank {rank}: largest relative loss difference "
              f"{max(abs(f / d - 1) for f, d in zip(fsdp['losses'], ddp['losses'])):.2e}; B_simple "
              f"{[round(r['b_simple'], 2) for r in fsdp['reports']]} (fsdp), "
              f"{[round(r['b_simple'], 2) for r in ddp['reports']]} (ddp)")
        assert fsdp["losses"] == pytest.approx(ddp["losses"], rel=1e-4)
        assert fsdp["losses"][-1] < 0.9 * fsdp["losses"][0]  # it learned: the comparison is not of two still runs
        clipped = [r["grad_norm"] for r in ddp["reports"]]
        assert max(clipped) > 0.5  # the norm reported before clipping exceeds the clip: clipping was on
        assert len(fsdp["noise"]) == STEPS
        for (small_f, big_f), (small_d, big_d) in zip(fsdp["noise"], ddp["noise"]):
            assert small_f == pytest.approx(small_d, rel=1e-3) and big_f == pytest.approx(big_d, rel=1e-3)
        for f_report, d_report in zip(fsdp["reports"], ddp["reports"]):
            assert f_report["b_simple"] == pytest.approx(d_report["b_simple"], rel=0.05)
            assert f_report["eval_loss"] == pytest.approx(d_report["eval_loss"], rel=1e-4)
        assert resumed["losses"] == pytest.approx(fsdp["losses"][STEPS // 2:], rel=1e-5)
        if rank == 0:
            for fsdp_weights, ddp_weights in zip(fsdp["weights"], ddp["weights"]):
                for name, value in ddp_weights.items():
                    assert torch.allclose(fsdp_weights[name], value, atol=1e-4), name
            assert resumed["weights"][-1].keys() == fsdp["weights"][-1].keys()
            for name, value in fsdp["weights"][-1].items():
                assert torch.allclose(resumed["weights"][-1][name], value, atol=1e-5), name
