"""``--dry-run --estimate-time`` (issue 59): the search's wall time from steps measured on the driver. The arithmetic on
hand-set step times with the answer beside them; one measurement of the markov space's tiny model (seconds)."""

import pytest

from cbs_ray.spec.load import load_spec
from cbs_ray.tune.time_estimate import (
    RAY_START_S,
    TRIAL_START_S,
    PlannedRun,
    PlannedStage,
    StepTimes,
    planned_batches,
    run_seconds,
    scratch_stages,
    search_seconds,
)


def test_the_trials_the_from_scratch_search_lays_out():
    spec = load_spec(None, [])  # TPE, 18 trials balanced over 16…512
    assert planned_batches(spec) == [16, 32, 64, 128, 256, 512] * 3
    grid = load_spec("search_spaces/markov_lm.yaml", [])  # a grid of one point per batch, 4…512
    assert planned_batches(grid) == [4, 8, 16, 32, 64, 128, 256, 512]
    repeats = load_spec("search_spaces/markov_lm.yaml", ["search.repeats=2"])
    assert planned_batches(repeats) == [4, 8, 16, 32, 64, 128, 256, 512] * 2
    assert planned_batches(load_spec(None, ["search.strategy=bisect"])) is None


def test_a_trial_is_its_micro_steps_its_evaluations_and_its_set_up():
    """markov: D = 40 960 samples, micro-batch 32, evaluations every 5120 (8 reports) on its 1024 examples."""
    spec = load_spec("search_spaces/markov_lm.yaml", ["resources.max_concurrent_trials=2"])
    times = StepTimes({4: 0.01, 8: 0.01, 16: 0.02, 32: 0.02}, eval_s=0.1, eval_batch=256, setup_s=1.0)
    stages = scratch_stages(spec, 40960)
    assert [s.name for s in stages] == ["search"] and len(stages[0].runs) == 8
    each = {r.label: run_seconds(spec, r, 1024, times) for r in stages[0].runs}
    # B=4: 40960 / 4 = 10 240 micro-steps × 10 ms = 102.4 s; 8 reports × 4 evaluation batches × 0.1 s = 3.2 s; + 1 s
    # of set-up and the run's start on Ray
    assert each["B=4"] == pytest.approx(102.4 + 3.2 + 1.0 + TRIAL_START_S)
    assert each["B=256"] == pytest.approx(40960 / 32 * 0.02 + 3.2 + 1.0 + TRIAL_START_S)  # micro 32, 8 accumulations
    assert search_seconds(spec, stages, 1024, times) == pytest.approx((RAY_START_S + sum(each.values()) / 2,) * 2)
    repeats = scratch_stages(load_spec("search_spaces/markov_lm.yaml", ["search.repeats=2"]), 40960)
    assert [(s.name, len(s.runs)) for s in repeats] == [("search", 8), ("repeats", 8)]  # one after the other


def test_a_stage_is_never_shorter_than_its_longest_run_and_a_stopped_run_is_a_range():
    spec = load_spec("search_spaces/markov_lm.yaml", ["resources.max_concurrent_trials=4"])
    times = StepTimes({8: 0.01, 16: 0.01}, eval_s=0.5, eval_batch=1024, setup_s=0.0)
    T = TRIAL_START_S  # every run's start on Ray, beside what it trains and evaluates
    # B=8 to 1024 samples (128 steps × 10 ms = 1.28 s) with two evaluations of 2 forwards (the average of its
    # iterates beside the raw model): 2 × 2 × 0.5 = 2 s
    long = PlannedRun("B=8", ((0, 8),), 0, 1024, (512, 1024), forwards=2)
    assert run_seconds(spec, long, 1024, times) == pytest.approx(1.28 + 2.0 + T)
    # B=16 stopped by a target between 512 and 2048 samples: 32 steps and one evaluation, to 128 and four
    stopped = PlannedRun("B=16", ((0, 16),), 0, 2048, (512, 1024, 1536, 2048), earliest_stop=512)
    assert run_seconds(spec, stopped, 1024, times, 512) == pytest.approx(0.32 + 0.5 + T)
    assert run_seconds(spec, stopped, 1024, times) == pytest.approx(1.28 + 2.0 + T)
    # a schedule: 8 to 512 samples, then 16 to 1024 (a fixed micro-batch: the first batch's, 8)
    grows = PlannedRun("s", ((0, 8), (512, 16)), 0, 1024, (1024,), fixes_micro_batch=True)
    assert run_seconds(spec, grows, 1024, times) == pytest.approx(1.28 + 0.5 + T)
    # a branch from 512 to 768: 16 steps at 16 (its micro-batch 16 × 1 worker), one evaluation
    branch = PlannedRun("branch B=16", ((512, 16),), 512, 768, (768,))
    assert run_seconds(spec, branch, 1024, times) == pytest.approx(0.16 + 0.5 + T)
    low, high = search_seconds(spec, [PlannedStage("a", (long, stopped)), PlannedStage("b", (branch,))], 1024, times)
    # 4 at a time: each stage is its longest run; the stages one after the other
    assert low == pytest.approx(RAY_START_S + 3.28 + 0.66 + 2 * T) and high == pytest.approx(low)
    low, high = search_seconds(spec, [PlannedStage("a", (stopped,))], 1024, times)
    assert (low, high) == pytest.approx((RAY_START_S + 0.82 + T, RAY_START_S + 3.28 + T))


def test_the_ladder_and_branch_mode_lay_out_their_runs():
    from cbs_ray.methods.branch.search import METHOD as BRANCH
    from cbs_ray.methods.ladder.search import METHOD as LADDER
    from cbs_ray.tune.prepare import prepare_for_outline

    small = ["training.budget_samples=4096", "training.eval_every_samples=1024", "search.batch_sizes=[8,16,32,64]",
             "asha.grace_period_samples=1024", "ladder.min_steps=4", "ladder.first_rung=0.125", "ladder.seeds=2"]
    spec = load_spec("search_spaces/markov_lm.yaml", small + ["search.method=ladder"])
    (ladder,) = LADDER.planned_stages(spec, prepare_for_outline(spec))
    # 4 batches x 2 seeds; the smallest to the fraction (2048), the others from there to the cap (4 x 2048)
    assert [(r.label, r.stop, r.earliest_stop) for r in ladder.runs] == [
        ("B=8", 2048, None), ("B=8", 2048, None)] + [(f"B={b}", 8192, 2048) for b in (16, 32, 64) for _ in "ab"]
    assert all(r.forwards == 2 for r in ladder.runs)  # ladder.reading ewa: the average evaluated beside the model
    spec = load_spec("search_spaces/markov_lm.yaml", small + ["search.method=branch", "branch.checkpoints=[0.5]", "branch.window=0.25",
                                                               "branch.validate_schedule=true"])
    trunk, schedule = BRANCH.planned_stages(spec, prepare_for_outline(spec))
    assert [(r.label, r.start, r.stop) for r in trunk.runs] == [("trunk B=8", 0, 4096)] + [
        (f"branch B={b}", 2048, 2048 + 1024) for b in (16, 32, 64)]  # a window of a quarter of the budget
    assert len(schedule.runs) == 5 * 5 and {r.stop for r in schedule.runs} == {4096}  # 1 + 4 controls, 5 seeds


@pytest.mark.slow  # the markov space prepared and its model timed: ~15 s on 2 cores
def test_the_estimate_is_printed_after_the_plan(capsys):
    from cbs_ray.cli import search_main

    assert search_main(["--space", "search_spaces/markov_lm.yaml", "--dry-run", "--estimate-time",
                        "--set", "training.budget_samples=4096", "--set", "training.eval_every_samples=1024",
                        "--set", "search.batch_sizes=[8,16]", "--set", "asha.grace_period_samples=1024"]) == 0
    out = capsys.readouterr().out.splitlines()
    line = next(x for x in out if x.startswith("time estimate: "))
    assert "2 runs in 1 stage(s), 2 at a time, from a step measured here" in line or "2 runs in 1 stage(s), 1 at" in line
    assert out[out.index(line) + 1].startswith("  search: 2 runs, ")


def test_the_estimate_is_asked_for_with_a_dry_run_only(capsys):
    from cbs_ray.cli import search_main

    assert search_main(["--space", "search_spaces/markov_lm.yaml", "--estimate-time"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --estimate-time: applies to --dry-run (the search itself "
                                               "reports its time)")


def test_the_dry_run_estimates_by_default_and_leaves_it_out_when_asked(capsys):
    """The default space's dry run: its 18 trials timed (a fraction of a second); ``--no-estimate-time``: none."""
    from cbs_ray.cli import search_main

    assert search_main(["--dry-run"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("time estimate: "))
    assert "at most: 18 runs in 1 stage(s)" in line  # TPE with ASHA: every trial counted to the full budget
    assert search_main(["--dry-run", "--no-estimate-time"]) == 0
    assert "time estimate" not in capsys.readouterr().out
