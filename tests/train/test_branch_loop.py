"""Branch mode's loop without Ray (``search.method: branch``; see cbs_ray/branch_plan.py): the trunk, the
branches and the schedule run of a shrunk tiny causal LM, in-process with a recording session.

The shrunk search: a 1-layer GPT-2, budget 512 samples, trunk batch 8 (64 steps; base_lr 0.002 at B0 16,
trunk alpha 0.75, warmup 0.1 × 64 ≈ 6 steps), branch batches 16 and 32, checkpoints at 128 and 256 samples,
a window of 64, reports every 256. 400 training examples: branch mode trains on 384 (a whole number of the
largest batch, 32), so the budget runs into the second epoch.
"""

import dataclasses
import math
import os
import shutil

import pytest

from cbs_ray.methods.branch.hooks import StartsFromCheckpoint
from cbs_ray.methods.branch.runs import branch_configs, branch_run_plan, schedule_config, trunk_config
from cbs_ray.methods.branch.settings import resolve_branch_settings
from cbs_ray.spec.load import load_spec
from cbs_ray.train.checkpoint import STATE_FILE, TRUNK_DONE
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.loop import train_loop
from cbs_ray.tune.api import prepare
from helpers.paths import SEARCH_SPACES
from helpers.training import RecordingSession

SPACE = str(SEARCH_SPACES / "tiny_causal_lm.yaml")
SHRUNK = ["model.config.n_embd=32", "model.config.n_layer=1", "data.builtin_train_examples=400",
          "data.builtin_eval_examples=64", "training.budget_samples=512", "training.eval_every_samples=256",
          "asha.grace_period_samples=256", "search.batch_sizes=[8, 16, 32]", "search.repeats=1",
          "search.method=branch", "branch.checkpoints=[128, 256]", "branch.window=64", "branch.batch_sizes=[16, 32]",
          "branch.alphas=[0.5, 1.0]"]

TRUNK_PEAK_LR = 0.002 * (8 / 16) ** 0.75  # the alpha rule at the trunk's alpha, the middle of [0.5, 1.0]


@pytest.fixture(scope="module")
def search():
    """(spec, data, budget, model config) of the shrunk branch search."""
    spec = load_spec(SPACE, SHRUNK)
    prepared = prepare(spec)
    data, budget, model_config = prepared.data, prepared.budget_samples, prepared.model_config
    return spec, data, budget, model_config


def trial(search, config: dict) -> TrialConfig:
    """The trial of the branch-mode point ``config``, with the plan the driver builds for it."""
    spec, _, budget, model_config = search
    plan = branch_run_plan(spec, resolve_branch_settings(spec, budget), config)
    return TrialConfig.for_plan(spec, plan, budget_samples=budget, model_config=model_config)


def train(search, cfg: TrialConfig, session=None) -> RecordingSession:
    session = session or RecordingSession()
    train_loop(cfg, search[1], session)
    return session


class KeepingAt192(RecordingSession):
    """Keeps the (Tune) checkpoint of the report at 192 samples in ``kept``: what a restart is handed."""

    kept = None

    def report(self, metrics, checkpoint_dir):
        super().report(metrics, checkpoint_dir)
        if metrics["samples_seen"] == 192:
            shutil.copytree(checkpoint_dir, self.kept)


@pytest.fixture(scope="module")
def trunk(search, tmp_path_factory):
    """The trunk, trained once: (its config, its session, its checkpoint directory)."""
    directory = tmp_path_factory.mktemp("branch") / "checkpoints"
    cfg = trial(search, trunk_config(resolve_branch_settings(search[0], search[2]), str(directory)))
    session = KeepingAt192()
    session.kept = directory.parent / "kept_at_192"
    return cfg, train(search, cfg, session), directory


def by_samples(session) -> dict:
    return {r["samples_seen"]: r for r in session.reports}


def test_the_trunk_saves_at_every_branch_point_reports_at_every_point_and_marks_its_end(trunk):
    cfg, session, directory = trunk
    assert cfg.plan.hooks.role == "trunk" and cfg.batch_size == 8 and cfg.total_steps == 64
    # Every 256 samples, at each checkpoint (128, 256) and at the end of each window (192, 320).
    assert [r["samples_seen"] for r in session.reports] == [128, 192, 256, 320, 512]
    assert [r["steps"] for r in session.reports] == [16, 24, 32, 40, 64]
    assert {(r["role"], r["start_samples"], r["batch_size"]) for r in session.reports} == {("trunk", 0, 8)}
    for samples in (128, 256):
        assert os.path.isfile(directory / f"samples_{samples}" / STATE_FILE)
    assert sorted(os.listdir(directory)) == ["samples_128", "samples_256", TRUNK_DONE]  # no half-written leftovers
    last = session.reports[-1]
    # Micro-batches of half the trunk's batch: the noise scale is measured, B_simple is plotted beside CBS(t).
    assert (last["micro_batch"], last["accumulation"]) == (4, 2)
    assert math.isfinite(last["b_simple"]) and last["b_small"] == 4 and last["noise_scale_note"] == ""
    assert last["peak_lr"] == pytest.approx(TRUNK_PEAK_LR, rel=1e-12) and not last["diverged"]


def test_a_branch_at_the_trunks_own_batch_reproduces_the_trunk(search, trunk):
    """Same weights, optimizer state, LR and data from the checkpoint at 128: the trunk's loss at 128 + 64.
    resolve_branch_settings refuses such a branch, so its plan is built from the trunk's."""
    cfg, whole, directory = trunk
    own = dataclasses.replace(cfg.plan, batch_schedule=((128, 8),), start_samples=128, stop_samples=192,
                              report_at=(192,), noise_scale_off="not measured",
                              hooks=StartsFromCheckpoint("branch", checkpoint_dir=str(directory)))
    branch = train(search, dataclasses.replace(cfg, plan=own))
    (report,) = branch.reports
    theirs = by_samples(whole)[192]
    assert (report["samples_seen"], report["steps"], report["role"], report["start_samples"]) == (192, 8, "branch", 128)
    assert report["eval_loss"] == pytest.approx(theirs["eval_loss"], rel=1e-6, abs=1e-6)
    assert report["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-6)  # the same interval, 128 to 192
    assert report["lr"] == pytest.approx(theirs["lr"], rel=1e-9)
    assert report["resumed_from_samples"] == 0  # started from the trunk, not restarted


def test_a_branch_at_twice_the_batch_takes_half_the_steps_at_the_planned_lr(search, trunk):
    _, _, directory = trunk
    spec, _, budget, _ = search
    (config,) = [c for c in branch_configs(resolve_branch_settings(spec, budget), str(directory))
                 if c["start_samples"] == 128 and c["log2_batch"] == 4 and c["alpha"] == 1.0]
    cfg = trial(search, config)
    (report,) = train(search, cfg).reports
    # 64 samples at 16: 4 steps (the trunk takes 8), the last from sample 176 = the trunk's step 22.
    assert (report["samples_seen"], report["steps"], report["batch_size"]) == (192, 4, 16)
    assert (report["micro_batch"], report["accumulation"]) == (16, 1)
    # Linear decay after 6 warmup steps of 64: 1 − (22 − 6 + 1) / (64 − 6 + 1) = 42 / 59; × (16 / 8) ** 1.
    assert report["lr"] == pytest.approx(TRUNK_PEAK_LR * 2 * 42 / 59, rel=1e-9)
    assert report["lr"] == pytest.approx(cfg.plan.lr_at(176, 16), rel=1e-9)
    assert report["peak_lr"] == pytest.approx(TRUNK_PEAK_LR * 2, rel=1e-12)
    assert math.isnan(report["b_simple"]) and "branch" in report["noise_scale_note"]
    assert math.isfinite(report["eval_loss"]) and not report["diverged"]
    # Its first step is at its own LR, not at the trunk's that came with the optimizer's state: a window of one
    # step reports it. Sample 128 is the trunk's step 16: 1 − (16 − 6 + 1) / 59 = 48 / 59.
    one_step = dataclasses.replace(cfg, plan=dataclasses.replace(cfg.plan, stop_samples=144, report_at=(144,)))
    (first,) = train(search, dataclasses.replace(one_step, tokens_per_sample=32)).reports
    assert (first["samples_seen"], first["steps"], first["tokens_seen"]) == (144, 1, 144 * 32)  # packed data
    assert first["lr"] == pytest.approx(TRUNK_PEAK_LR * 2 * 48 / 59, rel=1e-9)


def test_a_one_entry_schedule_trains_exactly_as_the_trunk(search, trunk):
    cfg, whole, _ = trunk
    br = resolve_branch_settings(search[0], search[2])
    schedule = train(search, trial(search, schedule_config(br, [[0, 8]], br.trunk_alpha)))
    assert [r["samples_seen"] for r in schedule.reports] == [256, 512]
    for report in schedule.reports:
        theirs = by_samples(whole)[report["samples_seen"]]
        assert (report["role"], report["start_samples"], report["steps"]) == ("schedule", 0, theirs["steps"])
        assert report["eval_loss"] == theirs["eval_loss"]


def test_a_two_step_schedule_takes_the_steps_it_implies(search, trunk):
    _, whole, _ = trunk
    br = resolve_branch_settings(search[0], search[2])
    cfg = trial(search, schedule_config(br, [[0, 8], [256, 16]], 1.0))
    reports = train(search, cfg).reports
    # 256 samples at 8 (32 steps), then 256 at 16 (16 steps): 48 steps where the trunk takes 64.
    assert [(r["samples_seen"], r["steps"], r["batch_size"]) for r in reports] == [(256, 32, 8), (512, 48, 16)]
    assert cfg.total_steps == 48
    # The run's micro-batch stays the trunk's (4): a batch of 16 accumulates 4 of them.
    assert [(r["micro_batch"], r["accumulation"]) for r in reports] == [(4, 2), (4, 4)]
    # Before the switch it is the trunk, alpha aside (the trunk's batch scales by (8 / 8) ** alpha = 1).
    assert reports[0]["eval_loss"] == by_samples(whole)[256]["eval_loss"]
    # The last step starts at 496: the trunk's step 62 of 64, 1 − (62 − 6 + 1) / 59 = 2 / 59; × (16 / 8) ** 1.
    assert reports[1]["lr"] == pytest.approx(TRUNK_PEAK_LR * 2 * 2 / 59, rel=1e-9)
    assert reports[1]["peak_lr"] == pytest.approx(TRUNK_PEAK_LR * 2, rel=1e-12)


def test_a_branch_whose_checkpoint_never_comes_fails_once_the_trunk_is_done(search, tmp_path):
    spec, _, budget, _ = search
    config = branch_configs(resolve_branch_settings(spec, budget), str(tmp_path))[0]
    (tmp_path / TRUNK_DONE).write_text("64\n")
    with pytest.raises(RuntimeError, match=r"the trunk ended without its checkpoint .*samples_128/state.pt"):
        train(search, trial(search, config))


def test_a_restarted_trunk_resumes_at_its_samples_and_ends_as_the_whole_trunk(search, trunk, tmp_path):
    """A restart of the trunk from its report at 192 (step 24): it continues there, reports what is left, leaves
    the branch checkpoint already written as it is, and ends where the uninterrupted trunk ended."""
    from ray.train import Checkpoint

    cfg, whole, directory = trunk
    shutil.copytree(directory, tmp_path / "checkpoints", ignore=shutil.ignore_patterns(TRUNK_DONE))
    hooks = dataclasses.replace(cfg.plan.hooks, checkpoint_dir=str(tmp_path / "checkpoints"))
    own = dataclasses.replace(cfg, plan=dataclasses.replace(cfg.plan, hooks=hooks))

    class Restarted(RecordingSession):
        def get_checkpoint(self):
            return Checkpoint.from_directory(str(whole.kept))

    written = os.path.getmtime(tmp_path / "checkpoints" / "samples_256" / STATE_FILE)
    again = train(search, own, Restarted())
    assert [r["samples_seen"] for r in again.reports] == [192, 256, 320, 512]  # its checkpoint's row first
    trained = again.reports[1:]
    assert [r["steps"] for r in trained] == [32, 40, 64]
    assert {r["resumed_from_samples"] for r in trained} == {192}
    assert os.path.getmtime(tmp_path / "checkpoints" / "samples_256" / STATE_FILE) == written
    assert (tmp_path / "checkpoints" / TRUNK_DONE).read_text() == "512\n"
    assert again.reports[-1]["eval_loss"] == pytest.approx(whole.reports[-1]["eval_loss"], rel=1e-5)


def test_a_diverging_trunk_marks_its_end_and_its_branches_fail_instead_of_waiting(tmp_path):
    spec = load_spec(SPACE, SHRUNK + ["training.base_lr=1e6", "training.grad_clip_norm=null",
                                      "training.weight_decay=0.0"])
    prepared = prepare(spec)
    data, budget, model_config = prepared.data, prepared.budget_samples, prepared.model_config
    br = resolve_branch_settings(spec, budget)
    cfg = TrialConfig.for_plan(spec, branch_run_plan(spec, br, trunk_config(br, str(tmp_path))),
                               budget_samples=budget, model_config=model_config)
    session = RecordingSession()
    train_loop(cfg, data, session)
    (report,) = session.reports
    assert report["diverged"] and report["role"] == "trunk" and report["samples_seen"] < 128
    assert os.listdir(tmp_path) == [TRUNK_DONE]  # no checkpoint for a branch to start from
    branch = TrialConfig.for_plan(spec, branch_run_plan(spec, br, branch_configs(br, str(tmp_path))[0]),
                                  budget_samples=budget, model_config=model_config)
    with pytest.raises(RuntimeError, match="the trunk ended without its checkpoint"):
        train_loop(branch, data, RecordingSession())


def test_a_branch_waits_for_its_checkpoint_until_the_trunk_writes_it(tmp_path):
    """What a branch started before the trunk reached its point does: it polls, and goes on once the state is
    there (published whole, by a rename)."""
    import threading

    import torch

    from cbs_ray.train.checkpoint import publish_state, wait_for_trunk

    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    path = str(tmp_path / "samples_128")
    lines = []
    writer = threading.Timer(0.3, publish_state, (path, model, optimizer, scheduler, scaler, 16, {}))
    writer.start()
    wait_for_trunk(path, str(tmp_path), poll_s=0.05, log=lines.append)
    writer.join()
    assert os.path.isfile(os.path.join(path, STATE_FILE)) and len(lines) == 1 and "waiting" in lines[0]
    assert not publish_state(path, model, optimizer, scheduler, scaler, 16, {})  # already there: left as it is


def test_a_trunk_that_fails_for_good_releases_its_branches_from_the_driver(tmp_path):
    import types

    from cbs_ray.methods.branch.trunk_watch import TrunkWatch
    from cbs_ray.train.checkpoint import wait_for_trunk

    watch, checkpoints = TrunkWatch(str(tmp_path / "trunk")), tmp_path / "trunk"
    branch = types.SimpleNamespace(config={"role": "branch", "start_samples": 128})
    watch.on_trial_error(1, [], branch)
    assert not (checkpoints / TRUNK_DONE).exists()  # a failed branch says nothing about the trunk
    watch.on_trial_error(1, [], types.SimpleNamespace(config={"role": "trunk"}))
    assert (checkpoints / TRUNK_DONE).read_text() == "failed\n"
    with pytest.raises(RuntimeError, match="the trunk ended without its checkpoint"):
        wait_for_trunk(str(checkpoints / "samples_128"), str(checkpoints), poll_s=0.01)
