"""The decision's rules (``cbs_ray.analysis.decision``, what every method's writes; each method's in its folder:
``cbs_ray.methods.scratch.decision``, ``.branch.decision``, ``.ladder.decision``) on
hand-built readings with the known answer beside them: one case per way the readings can stand (resolved, an upper bound, a lower bound, readings apart, no noise
estimate, nothing determined; a schedule validated, inferior or not validated; the ladder's prediction, refused, or
contradicted by its measurement at the budget). No Ray, no pandas."""

import json

import pytest

from cbs_ray.analysis.decision import (
    CONFIDENCE,
    DISAGREE,
    LOWER_BOUND,
    REFUSED,
    RESOLVED,
    UNRESOLVED,
    UPPER_BOUND,
    YOUR_SPACE,
    Decision,
    Evidence,
    batch_grid,
    disagreeing,
    next_search_base,
    search_command,
)
from cbs_ray.methods.branch.decision import TunedFixedBatch, decide_branch
from cbs_ray.methods.ladder.decision import decide_ladder
from cbs_ray.methods.scratch.decision import decide_scratch

BUDGET = 7168


def scratch(turning, *checks, resolved=True, next_range=None, **kw):
    return decide_scratch(turning, resolved=resolved, cross_checks=list(checks), budget_samples=BUDGET,
                          lr=kw.pop("lr", 0.00232), warmup_samples=kw.pop("warmup", 128), next_batch_range=next_range,
                          **kw)


def test_a_resolved_turning_point_with_agreeing_cross_checks_is_the_decision():
    d = scratch(Evidence("turning point", 128, text="128"), Evidence("tradeoff B_crit", 175, interval=(132, 215),
                                                                    text="tradeoff B_crit 175"),
                Evidence("20% rule", 64, text="20% rule 64"), Evidence("B_simple", 250, text="B_simple 250"))
    assert (d.batch_size, d.lr, d.warmup_samples, d.for_budget_samples, d.confidence) == (128, 0.00232, 128, BUDGET,
                                                                                          RESOLVED)
    assert d.disagreements == [] and d.next_step is None and d.schedule is None
    assert d.text == "Decision: train at batch 128, lr 0.00232, warmup 128 samples, for 7168 samples (resolved)"
    assert "turning point" in d.because


def test_the_issue_s_four_numbers_give_an_upper_bound_with_its_next_search():
    """The held-out run of issue 59: "≤ 8", the tradeoff 54, the 20 % rule 16, B_simple 137 (batches 8–64)."""
    d = scratch(Evidence("turning point", 8, "upper", text="≤ 8"),
                Evidence("tradeoff B_crit", 54, text="tradeoff B_crit 54"),
                Evidence("20% rule", 16, text="20% rule 16"), Evidence("B_simple", 137, text="B_simple 137"),
                resolved=None, next_range=[1, 16], base=(YOUR_SPACE, ()))
    assert d.confidence == UPPER_BOUND and d.batch_size == 8
    assert d.next_step == "cbs-ray search --space <your space> --set search.batch_sizes=[1,2,4,8,16]"
    assert [e.reading for e in d.disagreements] == ["tradeoff B_crit", "B_simple"]  # 16 is one grid step from ≤ 8
    assert d.text.startswith("Decision: train at batch 8,") and "upper bound" in d.text and d.next_step in d.text
    assert "smallest batch trained" in d.because


def test_an_upper_bound_at_the_workers_per_trial_has_no_smaller_batch_to_search():
    d = scratch(Evidence("turning point", 2, "upper", text="≤ 2"), resolved=True, next_range=None)
    assert d.confidence == UPPER_BOUND and d.next_step is None and "workers per trial" in d.because


def test_a_lower_bound_searches_past_it_keeping_the_budget():
    base = (None, ("training.budget_samples=65536",))
    d = scratch(Evidence("turning point", 256, "lower", text="≥ 256"), Evidence("20% rule", 32, text="20% rule 32"),
                next_range=[128, 2048], base=base)
    assert d.confidence == LOWER_BOUND and d.batch_size == 256
    assert d.next_step == ("cbs-ray search --set training.budget_samples=65536 "
                           "--set search.batch_sizes=[128,256,512,1024,2048]")
    assert [e.batch_size for e in d.disagreements] == [32]


def test_readings_apart_beyond_their_noise_are_named_and_the_turning_point_followed():
    d = scratch(Evidence("turning point", 128, interval=(64, 128), text="128"),
                Evidence("tradeoff B_crit", 600, interval=(400, 900), text="tradeoff B_crit 600"),
                Evidence("20% rule", 16, text="20% rule 16"))
    assert d.confidence == DISAGREE and d.batch_size == 128
    assert [e.reading for e in d.disagreements] == ["tradeoff B_crit", "20% rule"]
    assert "followed the turning point" in d.because and "tradeoff B_crit 600" in d.because
    assert "differs: tradeoff B_crit 600, 20% rule 16" in d.text and d.next_step is None
    # markov_lm.yaml's run (issue 59): the turning point 16 without a noise estimate, the tradeoff 189 apart
    unsure = scratch(Evidence("turning point", 16, text="16"),
                     Evidence("tradeoff B_crit", 189, text="tradeoff B_crit 189"), resolved=None)
    assert unsure.confidence == DISAGREE and unsure.next_step == "cbs-ray search --set search.repeats=2"


def test_an_interval_that_reaches_within_a_grid_step_is_not_a_disagreement():
    """300 is more than a grid step from 128, but its interval reaches down to 200: within its noise."""
    point = Evidence("turning point", 128)
    assert disagreeing(point, [Evidence("tradeoff B_crit", 300, interval=(200, 500))]) == []
    assert len(disagreeing(point, [Evidence("tradeoff B_crit", 300, interval=(290, 500))])) == 1
    assert disagreeing(point, [Evidence("B_simple", None)]) == []  # no value: no evidence either way


def test_no_noise_estimate_is_unresolved_with_repeats_as_the_next_step():
    d = scratch(Evidence("turning point", 64, text="64"), resolved=None)
    assert d.confidence == UNRESOLVED and d.next_step == "cbs-ray search --set search.repeats=2"
    assert "no noise estimate" in d.because


def test_no_turning_point_is_refused_and_names_no_batch():
    d = scratch(Evidence("turning point", None), Evidence("tradeoff B_crit", 54), not_determined="no batch completed")
    assert d.confidence == REFUSED and d.batch_size is None and d.lr is None
    assert d.text.startswith("Decision: none (refused: no batch completed")


def test_a_validated_schedule_is_the_decision_with_the_trunk_s_lr_and_warmup():
    d = decide_branch([[0, 16], [1024, 32], [2048, 128]], trunk_batch=16, trunk_lr=1e-3, trunk_warmup_samples=816,
                      budget_samples=8192, alpha=0.5, validated=True, non_inferior=True, below_frontier=True,
                      trend_holds=True)
    assert (d.batch_size, d.lr, d.warmup_samples, d.confidence) == (16, 1e-3, 816, RESOLVED)
    assert d.schedule == [[0, 16], [1024, 32], [2048, 128]]
    assert d.text.startswith("Decision: train with the batch schedule 16 from 0, then 32 from 1024, then 128 from "
                             "2048 samples, lr 0.001 at batch 16 (× 1.41 per doubling)")


def test_a_schedule_inferior_to_the_small_batch_falls_back_to_the_trunk_s_fixed_batch():
    d = decide_branch([[0, 16], [1024, 64]], trunk_batch=16, trunk_lr=1e-3, trunk_warmup_samples=None,
                      budget_samples=8192, alpha=0.5, validated=True, non_inferior=False, below_frontier=True,
                      trend_holds=True)
    assert (d.batch_size, d.schedule, d.confidence) == (16, None, DISAGREE)
    assert d.disagreements[0].reading == "schedule"


def test_a_schedule_inferior_to_the_best_tuned_fixed_batch_falls_back_to_that_batch_at_its_configuration():
    best = TunedFixedBatch(batch_size=32, lr=2.5e-3, warmup_samples=640, schedule_non_inferior=False)
    d = decide_branch([[0, 16], [1024, 64]], trunk_batch=16, trunk_lr=1e-3, trunk_warmup_samples=816,
                      budget_samples=8192, alpha=0.5, validated=True, non_inferior=True, below_frontier=True,
                      trend_holds=True, best_tuned=best)
    assert (d.batch_size, d.lr, d.warmup_samples, d.schedule, d.confidence) == (32, 2.5e-3, 640, None, DISAGREE)
    assert "best tuned fixed batch 32" in d.because and d.disagreements[0].reading == "schedule"
    assert d.text.startswith("Decision: train at batch 32, lr 0.0025, warmup 640 samples, for 8192 samples")


def test_inferior_to_the_small_batch_with_tuned_controls_follows_the_best_tuned_batch_not_the_trunk_s():
    best = TunedFixedBatch(batch_size=64, lr=4e-3, warmup_samples=None, schedule_non_inferior=None)
    d = decide_branch([[0, 16], [1024, 64]], trunk_batch=16, trunk_lr=1e-3, trunk_warmup_samples=None,
                      budget_samples=8192, alpha=0.5, validated=True, non_inferior=False, below_frontier=True,
                      trend_holds=True, best_tuned=best)
    assert (d.batch_size, d.lr, d.confidence) == (64, 4e-3, DISAGREE)


def test_a_schedule_non_inferior_to_the_best_tuned_batch_stays_the_decision_and_says_so():
    best = TunedFixedBatch(batch_size=32, lr=2.5e-3, warmup_samples=640, schedule_non_inferior=True)
    d = decide_branch([[0, 16], [1024, 32], [2048, 128]], trunk_batch=16, trunk_lr=1e-3, trunk_warmup_samples=816,
                      budget_samples=8192, alpha=0.5, validated=True, non_inferior=True, below_frontier=True,
                      trend_holds=True, best_tuned=best)
    assert (d.batch_size, d.schedule, d.confidence) == (16, [[0, 16], [1024, 32], [2048, 128]], RESOLVED)
    assert "non-inferior to the best tuned fixed batch 32" in d.because


def test_a_schedule_not_validated_is_unresolved_and_proposes_the_validation():
    d = decide_branch([[0, 32], [2048, 64]], trunk_batch=16, trunk_lr=1e-3, trunk_warmup_samples=None,
                      budget_samples=8192, alpha=1.0, validated=False, non_inferior=None, below_frontier=None,
                      trend_holds=None)
    assert d.confidence == UNRESOLVED and d.batch_size == 32 and d.lr == pytest.approx(2e-3)  # LR × 2 at alpha 1
    assert d.next_step == "cbs-ray search --set search.method=branch --validate-schedule"


def test_no_checkpoint_read_refuses():
    d = decide_branch([], trunk_batch=16, trunk_lr=None, trunk_warmup_samples=None, budget_samples=8192, alpha=None,
                      validated=False, non_inferior=None, below_frontier=None, trend_holds=None)
    assert d.confidence == REFUSED and d.batch_size is None


def ladder(**kw):
    args = dict(batch_size=128, lr=0.00566, warmup_samples=768, budget_samples=8192, b_crit=182.0,
                interval_90=[136.0, 243.0], refusal=None, alpha=0.5)
    return decide_ladder(**{**args, **kw})


def test_the_ladder_s_prediction_confirmed_by_its_measurement_is_resolved():
    d = ladder(measured=179.0, measured_ci=[170.0, 190.0])
    assert (d.batch_size, d.lr, d.warmup_samples, d.confidence) == (128, 0.00566, 768, RESOLVED)
    assert d.disagreements == [] and "measured at the budget (179)" in d.because


def test_the_ladder_s_prediction_alone_is_unresolved_until_validated():
    d = ladder()
    assert d.confidence == UNRESOLVED and d.batch_size == 128
    assert d.next_step == "cbs-ray search --set search.method=ladder --validate-prediction"


def test_the_ladder_refused_is_a_decision_only_with_a_search_at_the_budget():
    d = ladder(batch_size=None, b_crit=None, interval_90=None, refusal="fewer than 3 rungs")
    assert d.confidence == REFUSED and d.batch_size is None
    assert d.next_step == "cbs-ray search --set search.method=scratch"
    assert d.text == ("Decision: none (refused: fewer than 3 rungs; next: cbs-ray search --set "
                      "search.method=scratch)")


def test_a_measurement_at_the_budget_beyond_the_interval_is_followed_instead_of_the_prediction():
    """Predicted 182 [136, 243] (batch 128); measured 40 [35, 45]: more than a grid step below the interval."""
    d = ladder(measured=40.0, measured_ci=[35.0, 45.0])
    assert d.confidence == DISAGREE and d.batch_size == 32  # the largest power of two ≤ 40
    assert d.lr == pytest.approx(0.00566 * (32 / 128) ** 0.5)
    assert [e.reading for e in d.disagreements] == ["prediction"]
    assert "followed B_crit measured at the budget" in d.because


def test_b_simple_s_prediction_beyond_the_interval_is_named():
    d = ladder(measured=179.0, others=[Evidence("B_simple's prediction", 2000.0, text="B_simple's prediction 2e+03")])
    assert d.confidence == DISAGREE and d.batch_size == 128
    assert [e.reading for e in d.disagreements] == ["B_simple's prediction"]


def test_the_decision_reads_back_from_its_json():
    d = scratch(Evidence("turning point", 128, text="128"), Evidence("20% rule", 16, text="20% rule 16"))
    back = Decision.from_dict(json.loads(json.dumps(d.to_dict())))
    assert back.to_dict() == d.to_dict() and back.confidence in CONFIDENCE


def test_the_next_command_keeps_the_search_s_own_values():
    from cbs_ray.spec.load import load_spec, spec_to_dict

    spec = json.loads(json.dumps(spec_to_dict(load_spec(None, ["training.budget_samples=8192",
                                                               "search.batch_sizes=[8,16,32]", "search.seed=7"]))))
    default = json.loads(json.dumps(spec_to_dict(load_spec(None, []))))
    base = next_search_base(spec, default)
    assert base == (None, ("training.budget_samples=8192", "search.batch_sizes=[8,16,32]"))  # not the sampler's seed
    assert search_command(base, "search.repeats=2") == ("cbs-ray search --set training.budget_samples=8192 "
                                                        "--set search.batch_sizes=[8,16,32] --set search.repeats=2")
    # the grid is what a bound's next step replaces
    assert search_command(base, "search.batch_sizes=[2,4,8]") == ("cbs-ray search --set training.budget_samples=8192 "
                                                                  "--set search.batch_sizes=[2,4,8]")
    assert search_command(base, "training.budget_samples=4096") == ("cbs-ray search --set search.batch_sizes=[8,16,32] "
                                                                    "--set training.budget_samples=4096")
    assert next_search_base(None, default) == (None, ())
    assert batch_grid(3, 16) == [3, 6, 12, 16] and batch_grid(128, 2048) == [128, 256, 512, 1024, 2048]


def test_a_search_on_another_space_keeps_its_budget_and_grid_in_the_next_command():
    """A model and data far from the default's (a space file: ``YOUR_SPACE``) at a budget of its own (``cbs-ray
    plan``'s D): the next step names the space and still carries the budget, the grid and the workers."""
    from cbs_ray.spec.load import load_spec, spec_to_dict

    sets = ["training.budget_samples=2048", "search.batch_sizes=[8,16,32,64]", "resources.workers_per_trial=2",
            "search.method=ladder", "ladder.fraction=0.5", "ladder.first_rung=0.0625", "ladder.min_steps=8",
            "asha.grace_period_samples=2048"]
    spec = json.loads(json.dumps(spec_to_dict(load_spec(None, sets))))
    spec = {**spec, "model": {**spec["model"], "name": "gpt2", "from_pretrained": True, "num_layers": 12,
                              "hidden": 768}}
    default = json.loads(json.dumps(spec_to_dict(load_spec(None, []))))
    base = next_search_base(spec, default)
    assert base[0] == YOUR_SPACE and "training.budget_samples=2048" in base[1]
    refused = search_command(base, "search.method=scratch")  # the ladder's refusal: a search at D from scratch
    assert refused == ("cbs-ray search --space <your space> --set training.budget_samples=2048 "
                       "--set search.batch_sizes=[8,16,32,64] --set resources.workers_per_trial=2 "
                       "--set asha.grace_period_samples=2048 --set search.method=scratch")  # ASHA's, not the ladder's
    validate = search_command(base, flags=["--validate-prediction"])  # the ladder again: its own section
    assert validate == ("cbs-ray search --space <your space> --set training.budget_samples=2048 "
                        "--set search.batch_sizes=[8,16,32,64] --set search.method=ladder "
                        "--set resources.workers_per_trial=2 --set asha.grace_period_samples=2048 "
                        "--set ladder.fraction=0.5 --set ladder.min_steps=8 --set ladder.first_rung=0.0625 "
                        "--validate-prediction")
    refusal = decide_ladder(batch_size=None, lr=None, warmup_samples=None, budget_samples=2048, b_crit=None,
                            interval_90=None, refusal="the rungs do not rise", alpha=0.5, base=base)
    assert refusal.confidence == REFUSED and refusal.next_step == refused and refused in refusal.text


@pytest.mark.parametrize("method", ["scratch", "branch", "ladder"])
def test_the_first_line_printed_and_of_report_md_is_summary_json_s_decision(method):
    """On the golden experiments (``tests/golden``): what the report command printed and wrote."""
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "golden" / "expected" / method
    decision = json.loads((folder / "summary.json").read_text())["decision"]
    assert (folder / "stdout.txt").read_text().splitlines()[0] == decision["text"]
    assert (folder / "report.md").read_text().splitlines()[0] == decision["text"]
    assert decision["confidence"] in CONFIDENCE
    # the turning point, the schedule's start, the ladder's recommended batch (the re-posed prediction's: the largest
    # power of two at or below its interval's lower end, 64 on the golden ladder)
    answer = {"scratch": 256, "branch": 16, "ladder": 64}[method]
    assert decision["batch_size"] == answer


@pytest.mark.parametrize("schedule, base, controls", [
    ([[0, 16]], (None, ()), "--set branch.controls_from=scratch "),  # constant at the trunk's batch: tuned controls
    ([[0, 16], [1024, 32]], (None, ()), ""),  # it grows: plain --validate-schedule validates it
    ([[0, 16]], (None, ("branch.controls_from=/runs/x",)), ""),  # the experiment named its own tuned controls
])
def test_an_unvalidated_schedule_s_next_step_is_one_that_validates_it(schedule, base, controls):
    d = decide_branch(schedule, trunk_batch=16, trunk_lr=1e-3, trunk_warmup_samples=None, budget_samples=8192,
                      alpha=0.5, validated=False, non_inferior=None, below_frontier=None, trend_holds=True, base=base)
    assert d.next_step is not None and d.next_step.endswith(f"--set search.method=branch {controls}--validate-schedule")
