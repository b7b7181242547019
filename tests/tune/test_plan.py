"""``cbs-ray plan`` (issue 59): the full run's budget in samples, the rule that chooses a from-scratch search at D or the
ladder, and the command's dry run and refusals. Known answers beside each input; nothing trains, no Ray."""

import math

import pytest

from cbs_ray.cli import main
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.tune.plan import LADDER, SCRATCH, choose_method, decision_line, full_budget_samples, scratch_trials

MARKOV = "search_spaces/markov_lm.yaml"  # 40 960 samples of 16 tokens = 655 360 tokens, report every 5120


@pytest.mark.parametrize("tokens, per_sample, every, samples", [
    (655_360, 16, 5120, 40_960),          # markov_lm.yaml's own budget: exactly 8 report intervals
    (700_000, 16, 5120, 40_960),          # 43 750 samples, rounded down to 8 intervals
    (6.5536e6, 16, 5120, 409_600),        # a float from the command line (--full-budget-tokens 6.5536e6)
    (81_920, 16, 5120, 5120),             # one interval exactly
])
def test_the_full_budget_in_samples(tokens, per_sample, every, samples):
    assert full_budget_samples(tokens, per_sample, every) == samples


@pytest.mark.parametrize("tokens, per_sample, says", [
    (0, 16, "finite positive"),
    (-3, 16, "finite positive"),
    (math.nan, 16, "finite positive"),
    (math.inf, 16, "finite positive"),
    (1e9, None, "no fixed number of tokens"),      # padded texts: a sample's tokens vary
    (81_919, 16, "less than one report interval"),  # 5119 samples: under one interval of 5120
])
def test_the_full_budget_refusals(tokens, per_sample, says):
    with pytest.raises(SpecError, match=says):
        full_budget_samples(tokens, per_sample, 5120)


def test_a_scratch_search_that_fits_is_the_plan():
    assert choose_method(scratch_samples=327_680, afford_samples=327_680).method == SCRATCH  # the bound included
    assert choose_method(scratch_samples=100, afford_samples=10_000).method == SCRATCH


def test_a_scratch_search_too_large_plans_the_ladder():
    choice = choose_method(scratch_samples=327_681, afford_samples=327_680)
    assert choice.method == LADDER and "327681" in choice.because and "327680" in choice.because


def test_the_scratch_search_counts_its_trials_and_repeats():
    assert scratch_trials(load_spec(MARKOV, [])) == 8                          # a grid of 8 batches x 1 point
    assert scratch_trials(load_spec(MARKOV, ["search.repeats=3"])) == 8 + 8 * 2  # 2 more runs of each batch's best
    assert scratch_trials(load_spec(MARKOV, ["search.strategy=tpe", "search.num_trials=18"])) == 18


class _Decision:
    text = "Decision: train at batch 128, lr 0.00566, warmup 2048 samples, for 40960 samples (resolved)"
    batch_size, for_budget_samples = 128, 40_960


def test_the_last_line_is_the_decision_for_the_full_run():
    assert decision_line(_Decision(), 655_360, 40_960) == (
        "Decision for the full run (655360 tokens): train at batch 128, lr 0.00566, warmup 2048 samples, for 40960 "
        "samples (resolved)")
    assert decision_line(_Decision(), 655_360, 81_920).endswith("[for 40960 samples, not D = 81920]")
    assert decision_line(None, 655_360, 40_960).endswith("none (the summary holds no decision)")


def test_the_dry_run_plans_a_scratch_search_at_the_spaces_own_budget(capsys):
    # 655 360 tokens is markov_lm.yaml's own D; the default affordable is its own search: 8 trials x 40 960
    assert main(["plan", "--space", MARKOV, "--full-budget-tokens", "655360", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "plan: the full run: 655360 tokens = D 40960 samples of 16 tokens"
    assert "a from-scratch search at D trains 327680 samples, within the 327680 affordable" in out[1]
    assert out[2].startswith("plan: runs cbs-ray search at training.budget_samples=40960: 8 trials x 40960")
    assert out[3].startswith("markov-lm: 8 batch sizes, 8 trials (grid")  # the search's own dry run follows
    assert any(line.startswith("model: 29,664 parameters; 22.1 tokens per parameter at D") for line in out)


def test_the_dry_run_plans_the_ladder_where_the_search_does_not_fit(capsys):
    argv = ["plan", "--space", MARKOV, "--full-budget-tokens", "655360", "--afford-samples", "100000", "--dry-run"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert "would train 327680 samples, more than the 100000 affordable" in out[1]
    assert out[2].startswith("plan: runs the ladder (search.method=ladder) with D = 40960: 8 batches x 2 seeds, "
                             "the smallest to 20480 samples (0.5 of D)")
    assert out[3].startswith("  warning: the ladder may train up to 1187840 samples")  # ladder.cap 4 x the fraction
    assert out[4].startswith("markov-lm: ladder, full budget D = 40960 samples")
    assert "  tokens per parameter at each rung: 1.4, 1.9, 2.8, 3.9, 5.5, 7.7, 11" in out


@pytest.mark.parametrize("argv, says", [
    (["--space", MARKOV, "--dry-run"], "required: --full-budget-tokens"),
    (["--space", MARKOV, "--full-budget-tokens", "0", "--dry-run"], "finite positive"),
    (["--space", MARKOV, "--full-budget-tokens", "-5", "--dry-run"], "finite positive"),
    (["--space", "no/such/space.yaml", "--full-budget-tokens", "1e6"], "--space: no such file"),
    (["--space", MARKOV, "--full-budget-tokens", "1e6", "--afford-samples", "0"], "--afford-samples"),
    (["--full-budget-tokens", "1e9", "--dry-run"], "no fixed number of tokens"),  # the default: padded sentences
    (["--space", MARKOV, "--full-budget-tokens", "1e6", "--set", "search.batch_sizes=auto"], "auto is not planned"),
])
def test_bad_input_is_one_line_and_exit_2(argv, says, capsys, monkeypatch):
    monkeypatch.delenv("CBS_RAY_DEBUG", raising=False)
    assert main(["plan", *argv]) == 2
    captured = capsys.readouterr()
    assert says in captured.err and len(captured.err.strip().splitlines()) == 1, captured.err[:500]
    assert captured.out == ""


def test_the_next_step_is_a_search_on_the_plans_own_space_at_d():
    """The ladder refused at D = 20480 on markov_lm.yaml (its model and data far from the default's: the recorded next
    step names ``<your space>``): the plan's next step names the space, the user's --set's, D and the step's own."""
    from cbs_ray.tune.plan import next_step_at_d, plan_sets

    sets = plan_sets(MARKOV, ["search.batch_sizes=[8, 16, 32, 64]", "ladder.min_steps=4"], LADDER, 20480)
    assert sets == ["search.batch_sizes=[8, 16, 32, 64]", "ladder.min_steps=4", "training.budget_samples=20480",
                    "search.method=ladder"]
    recorded = ("cbs-ray search --space <your space> --set training.budget_samples=20480 --set training.base_lr=0.002 "
                "--set search.batch_sizes=[8,16,32,64] --set search.method=scratch")
    assert next_step_at_d(recorded, MARKOV, sets) == (
        "cbs-ray search --space search_spaces/markov_lm.yaml --set 'search.batch_sizes=[8, 16, 32, 64]' "
        "--set ladder.min_steps=4 --set training.budget_samples=20480 --set search.method=scratch")
    # an upper bound's grid replaces the plan's; a flag stays a flag; no step, none
    bound = "cbs-ray search --space <your space> --set search.batch_sizes=[2,4,8] --set search.repeats=2"
    assert next_step_at_d(bound + " --validate-prediction", MARKOV, sets) == (
        "cbs-ray search --space search_spaces/markov_lm.yaml --set ladder.min_steps=4 "
        "--set training.budget_samples=20480 --set search.method=ladder --set 'search.batch_sizes=[2,4,8]' "
        "--set search.repeats=2 --validate-prediction")
    assert next_step_at_d(None, MARKOV, sets) is None
    # a budget in tokens the user set is unset; the default space: no --space
    tokens = plan_sets(MARKOV, ["training.budget_samples=null", "training.budget_tokens=327680"], SCRATCH, 20480)
    assert tokens[-3:] == ["training.budget_samples=20480", "training.budget_tokens=null", "search.method=scratch"]
    assert next_step_at_d("cbs-ray search --set search.repeats=2", None, ["training.budget_samples=2048"]) == (
        "cbs-ray search --set training.budget_samples=2048 --set search.repeats=2")


def test_the_decision_line_carries_the_plans_next_step():
    class Bound(_Decision):
        text = "Decision: train at batch 8, for 2048 samples (upper bound; next: cbs-ray search --space <your space>)"
        next_step = "cbs-ray search --space <your space>"
        for_budget_samples = 2048

    line = decision_line(Bound(), 16_384, 2048, "cbs-ray search --space m.yaml --set training.budget_samples=2048")
    assert line.endswith("(upper bound; next: cbs-ray search --space m.yaml --set training.budget_samples=2048)")
