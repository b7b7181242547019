"""Branch mode (search.method: branch) from the outside: its bad input is one line and exit code 2 before Ray
starts; what it costs and which alpha the schedule run follows, on hand-built inputs; and end to end on a
real local Ray (marked e2e): the trunk and branches as Tune trials, summary.json's keys, the schedule run."""


import pandas as pd
import pytest

from cbs_ray.spec.branch_section import resolve_branching
from cbs_ray.tune.branch import branch_search_samples, schedule_alpha, scratch_search_samples
from cbs_ray.search import main
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec

LM = "search_spaces/tiny_causal_lm.yaml"
BRANCH = ["search.method=branch"]


def _sets(overrides):
    return [a for o in overrides for a in ("--set", o)]


# The four bad inputs (and the rules around them), each one line naming its key, exit code 2.
BAD = [
    (["branch.window=0.75", "branch.checkpoints=[0.5]"],
     "branch.window: 6144 samples from the checkpoint at 4096 run past the budget (8192); only 4096 remain"),
    (["branch.trunk_batch_size=32", "branch.batch_sizes=[16, 64]"],
     "branch.batch_sizes: a branch's batch must be larger than the trunk's (branch.trunk_batch_size 32), got 16"),
    (["branch.trunk_batch_size=64", "branch.batch_sizes=null"],
     "branch.batch_sizes: no batch size larger than the trunk's (64) to branch at"),
    (["branch.checkpoints=[0.25, 1.5]"], "branch.checkpoints: a fraction of the budget must be in (0, 1), got 1.5"),
    (["branch.checkpoints=[0.0]"], "branch.checkpoints: a fraction of the budget must be in (0, 1), got 0.0"),
    (["branch.window=1.0"], "branch.window: a fraction of the budget must be in (0, 1), got 1.0"),
    (["branch.checkpoints=[0]"], "branch.checkpoints: must be a positive number of samples, got 0"),
    (["branch.trunk_batch_size=12"], "branch.trunk_batch_size: batch size must be a power of two, got 12"),
    (["branch.batch_sizes=[16, 4096]"],
     "training.eval_every_samples: must be a multiple of the largest branch batch 4096, got 2048"),
    (["search.batch_sizes=[16, 32]", "branch.trunk_batch_size=8", "resources.workers_per_trial=16"],
     "branch.trunk_batch_size: 8 does not split over resources.workers_per_trial=16 workers"),
    (["branch.alphas=[]"], "branch.alphas: expected a non-empty list of numbers"),
    (["search.batch_sizes=auto"], "search.batch_sizes: auto is not available with search.method branch"),
    (["search.strategy=tpe", "search.study_storage=sqlite:///x.db"],
     "search.study_storage: search.method branch trains a fixed grid"),
    (["tracking.tensorboard=true"], "tracking: not available with search.method branch yet"),
    (["storage_path=s3://bucket/runs"], "storage_path: search.method branch writes the trunk's checkpoints"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[b[1].split(":")[0] + str(i) for i, b in enumerate(BAD)])
def test_bad_branch_spec_is_one_line_and_exit_2_before_ray(overrides, message, capsys):
    import ray

    assert main(["--space", LM, "--dry-run", *_sets(BRANCH + overrides)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err
    # The same without --dry-run: the error comes before Ray starts.
    assert main(["--space", LM, *_sets(BRANCH + overrides)]) == 2
    assert message in capsys.readouterr().err
    assert not ray.is_initialized()


def test_token_budget_for_a_classification_task_is_one_line_and_exit_2(capsys):
    # The fourth bad input; the rule is the token budget's (training.budget_tokens, causal-lm only).
    assert main(["--dry-run", *_sets(BRANCH + ["training.budget_samples=null", "training.budget_tokens=65536"])]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: training.budget_tokens: ") and "unknown key" not in err and "\n" not in err


def test_window_past_the_budget_once_the_budget_resolves_from_epochs(capsys):
    # The budget in epochs is known only once the data are: 0.5 epochs of 16384 sentences = 8192 samples,
    # whose last checkpoint (6144) leaves 2048 samples, less than the 4096-sample window.
    overrides = BRANCH + ["training.budget_samples=null", "training.budget_epochs=0.5",
                          "data.builtin_train_examples=16384", "branch.checkpoints=[6144]", "branch.window=4096"]
    load_spec(LM, overrides)  # valid as far as the spec alone can tell
    assert main(["--space", LM, *_sets(overrides)]) == 2
    assert "branch.window: 4096 samples from the checkpoint at 6144 run past the budget (8192); only 2048 remain" \
        in capsys.readouterr().err


def test_validate_schedule_needs_branch_mode(capsys):
    assert main(["--space", LM, "--dry-run", "--validate-schedule"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: branch.validate_schedule: validates the schedule a branch search recommends; set "
                   "search.method=branch (--validate-schedule)")
    assert main(["--resume", "/tmp", "--validate-schedule"]) == 2
    assert "drop --validate-schedule" in capsys.readouterr().err


def test_a_branch_section_is_ignored_by_the_scratch_method():
    spec = load_spec(LM, ["branch.checkpoints=[0.5]", "branch.batch_sizes=[4096]"])
    assert spec.search.method == "scratch"


def test_dry_run_prints_the_branch_plan_and_its_cost(capsys):
    assert main(["--space", LM, "--dry-run", "--validate-schedule", *_sets(BRANCH)]) == 0
    out = capsys.readouterr().out
    # tiny_causal_lm.yaml: budget 8192, trunk B=8 (the smallest batch), branches at 16..256, alphas [0.5, 1.0];
    # default checkpoints 1/8, 1/4, 1/2 of the budget, window 1/8: 3 x 5 x 2 = 30 branches of 1024 samples.
    assert "trunk: B=8" in out
    assert "checkpoints at 1024, 2048, 4096 samples; window 1024 samples" in out
    assert "branches: B in [16, 32, 64, 128, 256] x alpha in [0.5, 1.0] from each checkpoint = 30 trials" in out
    # 8192 (trunk) + 30 x 1024 + 8192 (schedule run) = 47104; from scratch: 8192 x (1 + 5 x 2) = 90112.
    assert "samples trained: 47104 (trunk 8192 + branches 30720 + schedule run 8192)" in out
    assert "90112 (0.52 of it)" in out


def test_samples_of_branch_and_scratch_searches():
    br = resolve_branching(load_spec(LM, BRANCH + ["branch.batch_sizes=null"]), 8192)  # 16, 32, 64
    assert branch_search_samples(br) == 8192 + 3 * 3 * 2 * 1024 == 26624
    assert branch_search_samples(br, validate_schedule=True) == 26624 + 8192
    assert scratch_search_samples(br) == 8192 * (1 + 3 * 2) == 57344


def _report(role, samples, loss, *, start=0, batch=8, alpha=0.75):
    return {"role": role, "samples_seen": samples, "start_samples": start, "batch_size": batch, "alpha": alpha,
            "eval_loss": loss}


def test_schedule_alpha_is_the_one_that_won_most_passing_branches():
    br = resolve_branching(load_spec(LM, BRANCH + ["branch.checkpoints=[1024, 2048]", "branch.tolerance=0.01"]), 8192)
    assert (br.window_samples, br.tolerance, br.trunk_alpha) == (1024, 0.01, 0.75)
    rows = [_report("trunk", 2048, 3.00), _report("trunk", 3072, 2.50)]
    # From 1024 (trunk 3.00 at 2048; passing means <= 3.03): B=16's best alpha 1.0 (2.98) passes; B=32's best
    # alpha 0.5 (3.02) passes; B=64's best (3.50) fails, so its alpha 1.0 does not count.
    rows += [_report("branch", 2048, loss, start=1024, batch=b, alpha=a) for b, a, loss in [
        (16, 0.5, 3.01), (16, 1.0, 2.98), (32, 0.5, 3.02), (32, 1.0, 3.10), (64, 0.5, 3.60), (64, 1.0, 3.50)]]
    # From 2048 (trunk 2.50 at 3072; passing <= 2.525): B=16's best alpha 1.0 (2.49) passes.
    rows += [_report("branch", 3072, loss, start=2048, batch=b, alpha=a) for b, a, loss in [
        (16, 0.5, 2.60), (16, 1.0, 2.49), (32, 1.0, 2.90), (64, 1.0, 3.0)]]
    # A branch's report inside its window does not count (only the window's end does).
    rows += [_report("branch", 1536, 1.0, start=1024, batch=64, alpha=0.5)]
    assert schedule_alpha(pd.DataFrame(rows), br) == 1.0  # alpha 1.0 won twice, 0.5 once


def test_schedule_alpha_on_a_tie_and_when_nothing_passes():
    br = resolve_branching(load_spec(LM, BRANCH + ["branch.checkpoints=[1024]", "branch.tolerance=0.01"]), 8192)
    tie = [_report("trunk", 2048, 3.0), _report("branch", 2048, 2.9, start=1024, batch=16, alpha=1.0),
           _report("branch", 2048, 2.9, start=1024, batch=32, alpha=0.5)]
    assert schedule_alpha(pd.DataFrame(tie), br) == 0.5  # one win each: the gentler LR
    fail = [_report("trunk", 2048, 3.0), _report("branch", 2048, 3.2, start=1024, batch=16, alpha=1.0)]
    assert schedule_alpha(pd.DataFrame(fail), br) == 0.75  # none passed: the trunk's alpha
    assert schedule_alpha(pd.DataFrame(), br) == 0.75


def test_trial_names_say_role_batch_and_checkpoint():
    from types import SimpleNamespace

    from cbs_ray.tune.runner import _trial_name

    def name(config):
        return _trial_name(SimpleNamespace(config=config, trial_id="abc_00001"))

    assert name({"log2_batch": 4}) == "B16_abc_00001"
    assert name({"role": "trunk", "log2_batch": 3}) == "trunk_B8_abc_00001"
    assert name({"role": "branch", "log2_batch": 6, "start_samples": 2048, "alpha": 0.5}) == \
        "branch_B64_from2048_a0.5_abc_00001"
    assert name({"role": "schedule", "log2_batch": 3}) == "schedule_B8_abc_00001"


def test_probe_of_a_branch_spec_is_a_plain_trial():
    from cbs_ray.tune.probe import probe_spec

    probe = probe_spec(load_spec(LM, BRANCH + ["branch.validate_schedule=true"]))
    assert probe.search.method == "scratch" and not probe.branch.validate_schedule


def test_run_search_refuses_objects_in_branch_mode():
    from cbs_ray.tune.branch import check_no_objects

    with pytest.raises(SpecError, match="^search.method: branch runs on the spec's model and data"):
        check_no_objects(object())
    check_no_objects(None)
