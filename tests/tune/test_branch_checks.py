"""Bad branch-mode input fails in one line before Ray, in --dry-run as in the run (issue 29 rows 2 and 3)."""

import pytest

from cbs_ray.search import main

LM = ["--space", "search_spaces/tiny_causal_lm.yaml", "--set", "search.method=branch", "--dry-run"]
TOO_LARGE = ["branch.batch_sizes=[16384]", "branch.checkpoints=[16384]", "branch.window=16384",
             "training.budget_samples=32768", "training.eval_every_samples=16384", "asha.grace_period_samples=16384"]
CASES = {
    "a branch batch larger than the training set": (TOO_LARGE, "16384 is larger than the training set"),
    "a negative alpha, and one of 50": (["branch.alphas=[-3, 50]"], "branch.alphas: each must be in [0, 1]"),
    "an alpha twice": (["branch.alphas=[0.5, 0.5]"], "lists an alpha twice"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_branch_input_is_one_line_and_exit_2(case, capsys):
    overrides, says = CASES[case]
    assert main(LM + [a for o in overrides for a in ("--set", o)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err
