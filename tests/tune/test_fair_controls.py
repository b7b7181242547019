"""``branch.controls_from``: the from-scratch search the schedule validation's controls take
their configuration from is found and read without Ray (the golden stored experiments), a wrong one is one line
and exit 2 before anything trains, and a tuned control trains on its own LR schedule (known answers)."""

import sys
from pathlib import Path

import pytest

from cbs_ray.cli import main
from cbs_ray.maths.lr_schedule import scaled_lr, warmup_steps
from cbs_ray.methods.branch.fair_controls import (
    TunedControls,
    best_batch,
    chosen_controls,
    frontier_batches,
    tuned_controls,
    validation_controls,
)
from cbs_ray.methods.branch.runs import TUNED, branch_run_plan, validation_configs
from cbs_ray.methods.branch.settings import resolve_branch_settings
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "golden"))
import make_golden  # noqa: E402

SCRATCH = make_golden.NAMES["scratch"]
BUDGET = make_golden.SCRATCH_BUDGET  # 65536: the golden from-scratch search's
LM = "search_spaces/tiny_causal_lm.yaml"


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return make_golden.copy_experiments(tmp_path_factory.mktemp("fair") / "experiments")


def _spec(storage, value, name="golden-scratch", *more):
    return load_spec(None, [f"storage_path={storage}", f"name={name}", f"branch.controls_from={value}", *more])


def test_a_named_search_gives_each_batch_its_best_configuration(storage):
    path, best = tuned_controls(_spec(storage, SCRATCH), BUDGET)[:2]
    assert path == str(storage / SCRATCH)
    # tests/helpers/report.history: one trial per batch, alpha 0.5, warmup 0.1, all completed
    assert sorted(best) == [16, 32, 64, 128, 256]
    assert (best[16]["alpha"], best[16]["warmup_fraction"]) == (0.5, 0.1)
    assert tuned_controls(_spec(storage, str(storage / SCRATCH)), BUDGET)[0] == path  # a path works too


def test_scratch_reads_its_own_stage_and_nothing_before_it_ran(storage):
    # issue 60: `scratch` is the from-scratch search run as this experiment's stage `controls`; before it ran
    # (the check before Ray) there is nothing to read, and a search of the same name beside it is not looked for
    assert tuned_controls(_spec(storage, "scratch"), BUDGET)[:2] == ("none", {})
    path, best = tuned_controls(_spec(storage, "scratch"), BUDGET, stage_experiment=str(storage / SCRATCH))[:2]
    assert path == str(storage / SCRATCH) and sorted(best) == [16, 32, 64, 128, 256]
    assert tuned_controls(_spec(storage, "none"), BUDGET)[:2] == ("none", {})


def test_the_best_tuned_batch_is_the_lowest_loss_a_tie_the_smaller():
    best = {16: {"eval_loss": 2.50}, 32: {"eval_loss": 2.40}, 64: {"eval_loss": 2.40}, 128: {"eval_loss": 2.70}}
    assert best_batch(best, metric="eval_loss", mode="min") == 32
    assert best_batch({8: {"accuracy": 0.8}, 16: {"accuracy": 0.9}}, metric="accuracy", mode="max") == 16
    assert best_batch({}, metric="eval_loss", mode="min") is None


@pytest.mark.parametrize("value, budget, says", [
    ("nope", BUDGET, "branch.controls_from: no experiment 'nope'"),
    (SCRATCH, 4096, "trained 65536 samples per trial, this branch search 4096"),
    (make_golden.NAMES["branch"], BUDGET, "is a branch search, not a from-scratch one"),
])
def test_a_missing_or_unfit_search_is_refused(storage, value, budget, says):
    with pytest.raises(SpecError, match=says):
        tuned_controls(_spec(storage, value), budget)


def test_a_missing_search_is_one_line_and_exit_2_before_ray(tmp_path, capsys):
    code = main(["search", "--dry-run", "--space", LM, "--validate-schedule", "--set", "search.method=branch",
                 "--set", f"storage_path={tmp_path}", "--set", "branch.controls_from=nope"])
    err = capsys.readouterr().err
    assert code == 2 and "branch.controls_from: no experiment 'nope'" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value, missing", [("nope", True), (SCRATCH, False), ("scratch", False)])
def test_controls_from_without_the_validation_is_said_to_be_ignored(storage, value, missing, capsys):
    # Issue 58, finding 20: a missing experiment was accepted without a word when --validate-schedule was not given.
    # Without the validation nothing reads the value (and --resume cannot add it), so the plan warns, and exits 0.
    code = main(["search", "--dry-run", "--space", LM, "--set", "search.method=branch", "--set",
                 f"storage_path={storage}", "--set", f"branch.controls_from={value}"])
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if "branch.controls_from" in line]
    assert code == 0 and len(said) == 1 and "is ignored without --validate-schedule" in said[0]
    assert ("names no experiment" in said[0]) == missing
    main(["search", "--dry-run", "--space", LM, "--set", "search.method=branch", "--set", f"storage_path={storage}"])
    assert "branch.controls_from" not in capsys.readouterr().out  # none: nothing to say


def test_a_tuned_control_trains_on_its_own_lr_schedule(storage):
    spec = load_spec(LM, ["search.method=branch", f"storage_path={storage}", f"branch.controls_from={SCRATCH}"])
    br = resolve_branch_settings(spec, BUDGET)
    chosen = chosen_controls(spec, br, [[0, 16], [1024, 512]], alpha=0.5)
    source, controls, configs, tuned = chosen.source, chosen.controls, chosen.configurations, chosen.tuned
    assert controls == [("small", 16), ("large", 512), ("iso_steps", 256), ("above", 1024)]  # the grid (branch.frontier's default)
    assert source == str(storage / SCRATCH) and tuned == {16: (0.5, 0.1), 256: (0.5, 0.1)}  # no 512, 1024: the trunk's
    assert [c["source"] for c in configs] == [source, source, "trunk", "trunk"]  # by batch, ascending
    points = validation_configs(br, [[0, 16], [1024, 32]], 0.5, controls, tuned)
    small = next(p for p in points if p["control"] == "small")
    large = next(p for p in points if p["control"] == "large")
    assert (small["lr_from"], small["alpha"], small["warmup_fraction"]) == (TUNED, 0.5, 0.1)
    assert large["lr_from"] == "trunk" and large["warmup_fraction"] == br.warmup_fraction
    plan, t = branch_run_plan(spec, br, small), spec.training
    steps = BUDGET // 16
    assert (plan.lr.batch, plan.lr.total_steps, plan.lr.warmup_steps) == (16, steps, warmup_steps(0.1, steps))
    assert plan.lr.peak == pytest.approx(scaled_lr(t.base_lr, 16, t.base_batch, 0.5), rel=1e-12)
    trunk_plan = branch_run_plan(spec, br, large)
    assert (trunk_plan.lr.batch, trunk_plan.lr.peak) == (br.trunk_batch, br.trunk_peak_lr)
    # recorded before the runs (a resume): the same controls, not read again
    again = chosen_controls(spec, br, [[0, 16], [1024, 512]], alpha=0.5,
                            recorded={"controls_from": source, "control_configurations": configs})
    assert (again.tuned, again.controls) == (tuned, controls)


@pytest.mark.parametrize("rule, schedule, names", [
    ("fitted", [[0, 16], [8192, 32], [20480, 64]], {16: "small", 64: "large"}),
    ("once_per_crossing", [[0, 16], [10240, 32]], {16: "small", 32: "large"}),
    ("seesaw", [[0, 64], [30720, 128]], {64: "small", 128: "large"}),  # seesaw_start: tuned starts at B*
])
def test_the_dense_frontier_is_the_same_set_for_every_rule(rule, schedule, names):
    # issue 60, item 3: batches √2 apart around B* = 64 (the lowest tuned loss), from min(B*/2, trunk 16) = 16 to
    # 2·max(B*, largest branch 128) = 256, rounded among the divisors of the cadence 5120 = 5·1024 (22.6 → 20,
    # 45.3 → 40, 90.5 → 80, 181 → 160): whatever the rule, the same batches; only the names follow the schedule
    spec = load_spec("search_spaces/markov_lm.yaml", ["search.method=branch", "branch.frontier=dense",
                                                      "branch.trunk_batch_size=16", "branch.batch_sizes=[32,64,128]",
                                                      f"branch.schedule_rule={rule}"])
    br = resolve_branch_settings(spec, spec.training.budget_samples)
    best = {16: {"excess_loss": 0.30}, 32: {"excess_loss": 0.25}, 64: {"excess_loss": 0.21},
            128: {"excess_loss": 0.24}}
    tuned = TunedControls("/x/s", best, "excess_loss", "min")
    controls = validation_controls(spec, br, schedule, tuned)
    assert [b for _, b in controls] == frontier_batches(spec, br, tuned) == [16, 20, 32, 40, 64, 80, 128, 160, 256]
    assert {b: n for n, b in controls if n != "frontier"} == names
    # ranked by the metric that chose them, not the spec's (excess_loss): a named stage records eval_loss
    by_eval_loss = TunedControls("/x/s", {b: {"eval_loss": v["excess_loss"] + 2.0} for b, v in best.items()},
                                 "eval_loss", "min")
    assert frontier_batches(spec, br, by_eval_loss) == [16, 20, 32, 40, 64, 80, 128, 160, 256]
    # without a tuned batch the ladder is centred on the trunk's: 8…256 (2·128), the branch batches on it
    assert frontier_batches(spec, br, TunedControls("none", {}, "excess_loss", "min")) == \
        [8, 10, 16, 20, 32, 40, 64, 80, 128, 160, 256]


def test_the_dense_frontier_s_controls_are_recorded_and_train_on_whole_reports():
    # A resume trains what was recorded (its controls named in the record), and a control at a batch between
    # powers of two (20, 40, 80, 160: divisors of the cadence 5120) lands on every report of the budget
    from cbs_ray.methods.branch.control_configurations import control_configurations
    from cbs_ray.methods.branch.search import validation_plans

    spec = load_spec("search_spaces/markov_lm.yaml", ["search.method=branch", "branch.frontier=dense",
                                                      "branch.trunk_batch_size=16", "branch.batch_sizes=[32,64,128]",
                                                      "branch.validation_seeds=2"])
    br = resolve_branch_settings(spec, spec.training.budget_samples)
    best = {b: {"alpha": 0.5, "warmup_fraction": 0.05, "excess_loss": loss}
            for b, loss in ((16, 0.3), (32, 0.25), (64, 0.21), (128, 0.24))}
    schedule = [[0, 16], [10240, 32]]
    controls = validation_controls(spec, br, schedule, TunedControls("/x/s", best, "excess_loss", "min"))
    configs = control_configurations(controls, best, alpha=0.5, warmup_fraction=0.05, source="/x/s",
                                     base_batch=spec.training.base_batch)
    recorded = {"controls_from": "/x/s", "control_configurations": configs, "controls": [list(c) for c in controls]}
    again = chosen_controls(spec, br, [[0, 16], [4096, 64]], alpha=0.5, recorded=recorded)  # another schedule: ignored
    assert again.controls == controls and sorted(again.tuned) == [16, 20, 32, 40, 64, 80, 128, 160, 256]
    plans = validation_plans(spec, br, schedule, 0.5, recorded=recorded)
    assert len(plans.runs) == 2 * (1 + 9)  # the schedule and 9 fixed batches on 2 seeds
    fixed = [plan for _, plan in plans.runs if plan.hooks.control != "schedule"]
    assert all(plan.total_steps == br.budget_samples // plan.batch_schedule[0][1] for plan in fixed)  # no ValueError
    forty = next(plan for plan in fixed if plan.batch_schedule == ((0, 40),))
    assert (forty.hooks.control, forty.total_steps, forty.lr.batch) == ("frontier", 40960 // 40, 40)


def test_another_branch_search_s_controls_stage_can_be_named(storage, tmp_path):
    # A stage keeps no metadata of its own: `<owner>-controls` is read with its owner's budget and metric, where the
    # owner's stage record names it; the same folder without such an owner is refused as before.
    import json
    import shutil

    owner, stage = tmp_path / "own-branch-20260101-000000", tmp_path / "own-branch-20260101-000000-controls"
    shutil.copytree(storage / SCRATCH, stage)
    (stage / "cbs_spec.json").unlink()
    owner.mkdir()
    meta = json.loads((storage / make_golden.NAMES["branch"] / "cbs_spec.json").read_text())
    scratch_meta = json.loads((storage / SCRATCH / "cbs_spec.json").read_text())
    meta.update(metric=scratch_meta["metric"], mode=scratch_meta["mode"], budget_samples=BUDGET,
                stages=[{"name": "search", "experiment": str(owner)}, {"name": "controls", "experiment": str(stage)}])
    (owner / "cbs_spec.json").write_text(json.dumps(meta))
    path, best = tuned_controls(_spec(storage, str(stage)), BUDGET)[:2]
    assert path == str(stage) and sorted(best) == [16, 32, 64, 128, 256]
    # B* is ranked by the owner's metric (accuracy, max), even where this spec ranks by another (eval_loss): the
    # validation's `seesaw_start: tuned` read none on a named stage and started from the first CBS instead
    tuned = tuned_controls(_spec(storage, str(stage), "golden-scratch", "search.metric=eval_loss",
                                 "search.mode=min"), BUDGET)
    assert (tuned.metric, tuned.mode) == ("accuracy", "max")
    assert tuned.best_batch() == max(sorted(best), key=lambda b: best[b]["accuracy"]) is not None
    with pytest.raises(SpecError, match="ran 8192 samples per trial|trained"):
        tuned_controls(_spec(storage, str(stage)), 8192)  # the owner's budget is the stage's
    (owner / "cbs_spec.json").write_text(json.dumps({**meta, "stages": meta["stages"][:1]}))
    with pytest.raises(SpecError, match="no cbs_spec.json|not a cbs-ray experiment"):
        tuned_controls(_spec(storage, str(stage)), BUDGET)
