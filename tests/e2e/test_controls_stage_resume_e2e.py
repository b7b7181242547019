"""``branch.controls_from: scratch`` (issue 60) end to end on a real local Ray: the from-scratch search that tunes
the schedule validation's fixed-batch controls runs as the stage ``controls`` of the branch experiment, between the
branches and the schedule; cut by Ctrl-C inside that stage and resumed, it trains each of its points once, the
branch search is not run again, and the controls take the stage's best configuration per batch."""

import json

import pytest

from cbs_ray.records.storage import load_history, read_meta
from cbs_ray.spec.load import load_spec
from helpers.ctrl_c import cut_by_ctrl_c

LM = "search_spaces/tiny_causal_lm.yaml"
# The branch search of test_fair_controls_e2e (trunk B=8, one branch at B=16: resolvable, the schedule doubles,
# validated on one seed); its from-scratch stage a grid of one configuration per batch (alpha 0.5, warmup 0.05:
# the trunk's, so that CBS(t) reads as there), three points, no early stopping.
SPEC = ["training.budget_samples=1024", "training.eval_every_samples=256", "asha.grace_period_samples=256",
        "search.batch_sizes=[8, 16, 32]", "data.builtin_eval_examples=128", "data.builtin_train_examples=1024",
        "search.method=branch", "search.alpha_range=[0.5, 0.5]", "search.warmup_fraction_range=[0.05, 0.05]",
        "search.strategy=grid", "search.grid_points=1", "search.early_stopping=false",
        "branch.checkpoints=[0.25]", "branch.window=0.5", "branch.batch_sizes=[16]", "branch.tolerance=0.005",
        "branch.validation_seeds=1", "branch.schedule_rule=once_per_crossing", "branch.validate_schedule=true",
        "branch.controls_from=scratch"]


@pytest.mark.slow  # ≈ 2 min on 2 cores (the branches, the stage cut and resumed, the validation)
def test_the_controls_stage_cut_by_ctrl_c_resumes_and_trains_each_point_once(tmp_path, shared_ray, monkeypatch):
    from cbs_ray import resume_search, run_search

    spec = load_spec(LM, SPEC + [f"storage_path={tmp_path / 'rr'}"])
    marker = str(tmp_path / "interrupted")
    path = cut_by_ctrl_c(monkeypatch, marker, lambda: run_search(spec, output_dir=str(tmp_path / "out"), verbose=0),
                         lambda config, result: result.get("samples_seen", 0) >= 256,
                         cuts=lambda name: name.endswith("-controls"))
    controls = f"{path}-controls"
    meta = read_meta(path)  # the branch experiment: what --resume takes; the stage recorded before it started
    assert meta["stages"] == [{"name": "search", "experiment": path}, {"name": "controls", "experiment": controls}]
    assert meta["method"] == "branch" and meta["metric"] == "eval_loss"  # the stage overwrote none of it
    branches = load_history(path)

    resume_search(path, output_dir=str(tmp_path / "resumed"), verbose=0)
    assert load_history(path).equals(branches)  # the branch search, done before the cut, was not run again
    tuned = load_history(controls)
    finals = tuned.sort_values("samples_seen").groupby("trial_id").last()
    assert sorted(finals["batch_size"]) == [8, 16, 32]  # one trial per point: none trained twice
    assert (finals["samples_seen"] == 1024).all()
    assert [s["name"] for s in read_meta(path)["stages"]] == ["search", "controls", "schedule"]
    summary = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert summary["controls_from"] == controls
    configs = summary["schedule_validation"]["frontier_controls"]["configurations"]
    in_search = [c for c in configs if c["batch_size"] in (8, 16, 32)]
    assert in_search and all(c["source"] == controls for c in in_search)
