"""``branch.controls_from`` (issue 50, item 4): the from-scratch search the schedule validation's controls take
their configuration from is found and read without Ray (the golden stored experiments), a wrong one is one line
and exit 2 before anything trains, and a tuned control trains on its own LR schedule (known answers)."""

import sys
from pathlib import Path

import pytest

from cbs_ray.cli import main
from cbs_ray.maths.lr_schedule import scaled_lr, warmup_steps
from cbs_ray.methods.branch.fair_controls import chosen_controls, tuned_controls
from cbs_ray.methods.branch.runs import TUNED, branch_run_plan, validation_configs
from cbs_ray.spec.branch_section import resolve_branching
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


def _spec(storage, value, name="golden-scratch"):
    return load_spec(None, [f"storage_path={storage}", f"name={name}", f"branch.controls_from={value}"])


def test_a_named_search_gives_each_batch_its_best_configuration(storage):
    path, best = tuned_controls(_spec(storage, SCRATCH), BUDGET)
    assert path == str(storage / SCRATCH)
    # tests/helpers/report.history: one trial per batch, alpha 0.5, warmup 0.1, all completed
    assert sorted(best) == [16, 32, 64, 128, 256]
    assert (best[16]["alpha"], best[16]["warmup_fraction"]) == (0.5, 0.1)
    assert tuned_controls(_spec(storage, str(storage / SCRATCH)), BUDGET)[0] == path  # a path works too


def test_scratch_finds_the_newest_search_of_the_spec_s_name_else_the_trunk_s(storage, capsys):
    assert tuned_controls(_spec(storage, "scratch"), BUDGET)[0] == str(storage / SCRATCH)
    assert tuned_controls(_spec(storage, "scratch", name="another"), BUDGET) == ("none", {})
    assert "no from-scratch search of another" in capsys.readouterr().out
    assert tuned_controls(_spec(storage, "scratch"), BUDGET // 2) == ("none", {})  # another budget: not it
    assert tuned_controls(_spec(storage, "none"), BUDGET) == ("none", {})


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
    br = resolve_branching(spec, BUDGET)
    controls = [("small", 16), ("large", 512)]
    source, configs, tuned = chosen_controls(spec, BUDGET, controls, alpha=0.5, warmup_fraction=br.warmup_fraction)
    assert source == str(storage / SCRATCH) and tuned == {16: (0.5, 0.1)}  # no B=512 in the search: the trunk's
    assert [c["source"] for c in configs] == [source, "trunk"]
    points = validation_configs(br, [[0, 16], [1024, 32]], 0.5, controls, tuned)
    small = next(p for p in points if p["control"] == "small")
    large = next(p for p in points if p["control"] == "large")
    assert (small["lr_from"], small["alpha"], small["warmup_fraction"]) == (TUNED, 0.5, 0.1)
    assert large["lr_from"] == "trunk" and large["warmup_fraction"] == br.warmup_fraction
    plan, t = branch_run_plan(spec, br, small), spec.training
    steps = BUDGET // 16
    assert (plan.lr_batch, plan.lr_total_steps, plan.lr_warmup_steps) == (16, steps, warmup_steps(0.1, steps))
    assert plan.lr_peak == pytest.approx(scaled_lr(t.base_lr, 16, t.base_batch, 0.5), rel=1e-12)
    trunk_plan = branch_run_plan(spec, br, large)
    assert (trunk_plan.lr_batch, trunk_plan.lr_peak) == (br.trunk_batch, br.trunk_peak_lr)
    # recorded before the runs (a resume): the same controls, not read again
    assert chosen_controls(spec, BUDGET, controls, alpha=0.5, warmup_fraction=0.0,
                         recorded={"controls_from": source, "control_configurations": configs})[2] == tuned
