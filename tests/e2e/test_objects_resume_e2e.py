"""Branch mode and the ladder on a user's own objects (issue 35), interrupted and resumed, and branch mode with two
gloo workers per trial: the GPT-2, ``datasets.Dataset`` and HF collator of ``test_objects_every_method_e2e``.

The interruption is a real one: Ctrl-C (SIGINT) lands in the driver while the first stage's trials train, sent by a
Tune callback from the driver's own process (as ``tune.disk_watch`` stops Tune on a full disk), once. Tune saves the
experiment and returns, ``run_search`` raises ``SearchInterrupted``, and ``resume_search`` with the same objects
passed again finishes it: the runs the interrupt cut continue from their checkpoints (the ladder's; branch mode's
trunk may have finished before Tune stopped), the ones it never started run, and branch mode's schedule validation
(not started when it was cut) runs after them."""

from pathlib import Path

import pytest
from test_objects_every_method_e2e import BLOCK, COMMON, objects

from cbs_ray.records.storage import load_history, read_meta
from cbs_ray.spec.load import load_spec
from helpers.ctrl_c import cut_by_ctrl_c

# ≈ 1-2 min each on 2 cores: the slow tier.
pytestmark = pytest.mark.slow


def interrupted(monkeypatch, root: Path, overrides: list[str], when) -> str:
    """``run_search`` on the objects, cut by Ctrl-C in its first Tune experiment where ``when`` says; returns the
    experiment's path (from ``SearchInterrupted``)."""
    from cbs_ray import run_search

    spec = load_spec(None, COMMON + overrides + [f"storage_path={root / 'ray_results'}"])
    path = cut_by_ctrl_c(monkeypatch, str(root / "interrupted"),
                         lambda: run_search(spec, output_dir=str(root / "out"), verbose=0, **objects()), when)
    assert not (root / "out" / "summary.json").exists()
    return path


def resumed(path: str, root: Path, capsys):
    from cbs_ray import resume_search

    capsys.readouterr()
    result = resume_search(path, output_dir=str(root / "resumed"), verbose=0, **objects())
    out = capsys.readouterr().out
    assert f"resuming {path}" in out
    return result


def continued_from_a_checkpoint(history) -> bool:
    """Some run reported after a restart from a checkpoint of its own (a report's ``resumed_from_samples`` > 0)."""
    return "resumed_from_samples" in history and (history["resumed_from_samples"].fillna(0) > 0).any()


BRANCH = ["task=causal-lm", "search.method=branch", "training.budget_samples=null",
          f"training.budget_tokens={2048 * BLOCK}", "training.eval_every_samples=512", "search.batch_sizes=[8, 16, 32]",
          "branch.trunk_batch_size=8", "branch.checkpoints=[0.25, 0.5]", "branch.window=0.25", "branch.tolerance=0.15",
          "branch.validation_seeds=1", "branch.validate_schedule=true", "branch.window_min_steps=4",
          # the rule that doubles at each crossing: the schedule grows past the trunk over these two checkpoints
          # (under fitted, the default, no schedule runs were trained on this short budget)
          "branch.schedule_rule=once_per_crossing"]
"""``test_objects_every_method_e2e``'s branch search: a token budget of 2048 items, trunk B=8, branches at 16 and 32
from a quarter and a half of it, the schedule validated on one seed."""


def test_a_branch_search_on_objects_cut_by_ctrl_c_resumes_with_the_same_objects(tmp_path, shared_ray, monkeypatch,
                                                                               capsys):
    # Cut at the trunk's first checkpoint (512 samples of 2048): the trunk mid-way, no branch finished.
    path = interrupted(monkeypatch, tmp_path, BRANCH,
                       lambda config, result: config.get("role") == "trunk" and result.get("samples_seen") == 512)
    meta = read_meta(path)
    assert meta["user_objects"]["model_init"].endswith("gpt2") and not meta["method_record"].get("schedule_experiment")
    cut = load_history(path)
    assert cut[cut["role"] == "branch"]["trial_id"].nunique() < 4  # branches were left to run
    result = resumed(path, tmp_path, capsys)
    history = result.history
    assert history.loc[history["role"] == "trunk", "samples_seen"].max() == 2048
    # Every branch ran once, to its window's end: 2 checkpoints x batches 16 and 32.
    ends = history[history["role"] == "branch"].groupby("trial_id").agg(start=("start_samples", "first"),
                                                                       end=("samples_seen", "max"))
    assert len(ends) == 4 and ((ends["end"] - ends["start"]) == 512).all()
    # The validation, not started when the search was cut, ran after the resume.
    assert set(history["role"]) == {"trunk", "branch", "schedule"}
    assert read_meta(path)["method_record"]["schedule_experiment"] == result.schedule_experiment_path
    assert result.answer.batch_size in (8, 16, 32) and (tmp_path / "resumed" / "summary.json").is_file()


def test_a_ladder_on_objects_cut_by_ctrl_c_resumes_with_the_same_objects(tmp_path, shared_ray, monkeypatch, capsys):
    overrides = ["search.method=ladder", "training.budget_samples=2048", "training.eval_every_samples=1024",
                 "search.batch_sizes=[8, 16, 32, 64]", "ladder.fraction=0.5", "ladder.seeds=1",
                 "ladder.first_rung=0.0625", "ladder.validate=true", "ladder.min_steps=8"]
    # Cut at the first report at 256 samples or more: that run has a checkpoint to continue from.
    path = interrupted(monkeypatch, tmp_path, overrides, lambda config, result: result.get("samples_seen", 0) >= 256)
    result = resumed(path, tmp_path, capsys)
    history = result.history
    assert set(history["batch_size"]) == {8, 16, 32, 64} and continued_from_a_checkpoint(history)
    summary = result.summary.to_dict()
    assert summary["method"] == "ladder" and summary["ladder"]["rungs"] and "prediction_validation" in summary


def test_branch_mode_on_objects_with_two_gloo_workers_per_trial(tmp_path, shared_ray):
    """Every run of a branch search (the trunk, each branch) as a Ray Train run of two gloo workers: the trunk's
    checkpoint, written by rank 0, is what both ranks of a branch start from."""
    from cbs_ray import run_search

    overrides = ["task=causal-lm", "search.method=branch", "training.budget_samples=1024",
                 "training.eval_every_samples=512", "search.batch_sizes=[8, 16]", "branch.trunk_batch_size=8",
                 "branch.checkpoints=[0.5]", "branch.window=0.25", "branch.batch_sizes=[16]",
                 "branch.window_min_steps=4", "resources.workers_per_trial=2",
                 f"storage_path={tmp_path / 'ray_results'}"]
    spec = load_spec(None, COMMON + overrides)
    result = run_search(spec, output_dir=str(tmp_path / "out"), verbose=0, **objects())
    history = result.history
    assert sorted(history.groupby("trial_id")["role"].first()) == ["branch", "trunk"]
    assert (history["workers"] == 2).all()
    branch = history[history["role"] == "branch"]
    assert branch["start_samples"].iloc[0] == 512 and branch["samples_seen"].max() == 768
    assert branch["eval_loss"].notna().all() and (tmp_path / "out" / "summary.json").is_file()
