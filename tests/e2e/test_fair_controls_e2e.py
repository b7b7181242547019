"""``branch.controls_from`` end to end on a real local Ray (issue 50, item 4): a tiny from-scratch search, then
branch mode whose schedule validation's fixed-batch controls take that search's best configuration per batch
(slow tier: ≈ 1 min on 2 cores)."""

import json

import pytest

from cbs_ray.spec.load import load_spec

pytestmark = pytest.mark.slow

LM = "search_spaces/tiny_causal_lm.yaml"
# One budget for both: 1024 samples, reports every 256, a small eval set.
COMMON = ["training.budget_samples=1024", "training.eval_every_samples=256", "asha.grace_period_samples=256",
          "search.batch_sizes=[8, 16, 32]", "data.builtin_eval_examples=128", "data.builtin_train_examples=1024"]
# From scratch: every batch once at alpha 0.75 and warmup 0.1 (a grid of one point), so each control's tuned
# configuration is known and differs from the trunk's (alpha 0.5, warmup 0.05).
SCRATCH = COMMON + ["search.strategy=grid", "search.grid_points=1", "search.early_stopping=false",
                    "search.alpha_range=[0.75, 0.75]", "search.warmup_fraction_range=[0.1, 0.1]"]
# Branch mode: trunk B=8, one branch at B=16 from a quarter of the budget for half of it; ε = 0.005 nats (shared
# with the turning point: a loss metric's one tolerance). Measured (2 cores, seed 0): the trunk improves by 0.017
# over the window, more than 2ε, and B=16 ends 0.014 below it, within ε: the point is resolvable, the schedule
# doubles (8 → 16) and is validated on one seed.
BRANCH = COMMON + ["search.method=branch", "search.alpha_range=[0.5, 0.5]", "search.warmup_fraction_range=[0.05, 0.05]",
                   "branch.checkpoints=[0.25]", "branch.window=0.5", "branch.batch_sizes=[16]",
                   "branch.tolerance=0.005", "branch.validation_seeds=1", "branch.schedule_rule=once_per_crossing",
                   "branch.validate_schedule=true"]


def test_the_controls_train_at_the_from_scratch_search_s_best_configuration(tmp_path, shared_ray):
    from cbs_ray import run_search

    storage = tmp_path / "ray_results"
    scratch = run_search(load_spec(LM, SCRATCH + [f"storage_path={storage}", f"output_dir={tmp_path / 's'}"]),
                         verbose=0)
    result = run_search(load_spec(LM, BRANCH + [f"storage_path={storage}", f"output_dir={tmp_path / 'b'}",
                                                f"branch.controls_from={scratch.experiment_path}"]), verbose=0)
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["batch_size_schedule"][0] == [0, 8] and len(summary["batch_size_schedule"]) == 2
    assert summary["controls_from"] == scratch.experiment_path
    configs = summary["control_configurations"]
    assert configs and all((c["alpha"], c["warmup_fraction"], c["source"]) == (0.75, 0.1, scratch.experiment_path)
                           for c in configs)
    controls = result.history[(result.history["role"] == "schedule") & (result.history["control"] != "schedule")]
    schedule = result.history[(result.history["role"] == "schedule") & (result.history["control"] == "schedule")]
    assert len(controls) and (controls["alpha"] == 0.75).all() and (controls["warmup_fraction"] == 0.1).all()
    assert (schedule["alpha"] == 0.5).all()  # the schedule keeps its own
    report = (tmp_path / "b" / "report.md").read_text()
    assert f"branch.controls_from: {scratch.experiment_path}" in report and "alpha 0.75, warmup 0.1 (from" in report
