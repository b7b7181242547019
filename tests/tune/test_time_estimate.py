"""``--dry-run --estimate-time`` (issue 59): the search's wall time from steps measured on the driver. The arithmetic on
hand-set step times with the answer beside them; one measurement of the markov space's tiny model (seconds)."""

import pytest

from cbs_ray.spec.load import load_spec
from cbs_ray.tune.time_estimate import RAY_START_S, StepTimes, planned_batches, search_seconds


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
    total, per_batch = search_seconds(spec, 40960, 1024, planned_batches(spec), times)
    each = dict(per_batch)
    # B=4: 40960 / 4 = 10 240 micro-steps × 10 ms = 102.4 s; 8 reports × 4 evaluation batches × 0.1 s = 3.2 s; + 1 s
    assert each[4] == pytest.approx(102.4 + 3.2 + 1.0)
    assert each[256] == pytest.approx(40960 / 32 * 0.02 + 3.2 + 1.0)  # micro 32, 8 accumulation steps
    assert total == pytest.approx(RAY_START_S + sum(each.values()) / 2)


@pytest.mark.slow  # the markov space prepared and its model timed: ~15 s on 2 cores
def test_the_estimate_is_printed_after_the_plan(capsys):
    from cbs_ray.cli import search_main

    assert search_main(["--space", "search_spaces/markov_lm.yaml", "--dry-run", "--estimate-time",
                        "--set", "training.budget_samples=4096", "--set", "training.eval_every_samples=1024",
                        "--set", "search.batch_sizes=[8,16]", "--set", "asha.grace_period_samples=1024"]) == 0
    out = capsys.readouterr().out.splitlines()
    line = next(x for x in out if x.startswith("time estimate: "))
    assert "2 trials, 2 at a time, from a step measured here" in line or "2 trials, 1 at a time" in line
    assert out[out.index(line) + 1].startswith("  per trial: B=8 ")


def test_the_estimate_is_asked_for_with_a_dry_run_only(capsys):
    from cbs_ray.cli import search_main

    assert search_main(["--space", "search_spaces/markov_lm.yaml", "--estimate-time"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --estimate-time: applies to --dry-run (the search itself "
                                               "reports its time)")
