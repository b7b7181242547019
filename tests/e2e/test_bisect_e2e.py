"""The bisect strategy on a real local Ray: one Tune experiment whose searcher walks the grid (slow tier)."""

import json

import pytest

from cbs_ray.spec.load import load_spec
from cbs_ray.tune.api import run_search

pytestmark = pytest.mark.slow


def test_bisect_trains_each_batch_once_at_one_alpha_and_reads_the_turning_point(tmp_path, shared_ray):
    spec = load_spec(None, ["search.strategy=bisect", "search.batch_sizes=[16, 32, 64, 128]",
                            "search.alpha_range=[0.5, 0.75]", "search.grid_points=2",
                            "data.builtin_train_examples=2048", "data.builtin_eval_examples=2048",
                            "training.budget_samples=1024", "training.eval_every_samples=256",
                            "asha.grace_period_samples=256", "training.eval_subset_examples=512",
                            f"storage_path={tmp_path / 'rr'}"])
    result = run_search(spec, output_dir=str(tmp_path / "out"))
    trials = result.trials
    # alpha at B=64 (the grid's upper middle) among 2 candidates, then B=16, 128 and whatever the walk needs
    at_64 = trials[trials["batch_size"] == 64]
    assert sorted(at_64["alpha"].tolist()) == [0.5, 0.75]
    # synchronous halving: both paused at the first rung (256) until both had reported; the prior (0.5, resumed
    # from its checkpoint) trained the full budget, the other stopped there or (leading by > the tolerance) went on
    at_64_history = result.history[result.history["batch_size"] == 64]
    reached = at_64_history.groupby("alpha")["samples_seen"].max()
    assert reached[0.5] == 1024 and reached[0.75] in (256, 1024)
    others = trials[trials["batch_size"] != 64]
    assert others.groupby("batch_size").size().max() == 1  # every other batch once
    assert {16, 128} <= set(others["batch_size"])
    alpha = set(others.loc[others["batch_size"] != 16, "alpha"])
    assert len(alpha) <= 1  # one alpha for every batch after the choice
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["answer"]["batch_size"] in {16, 32, 64, 128}
    # the intermediate reports evaluated 512 examples, the last all 2048
    history = result.history
    last = history.groupby("trial_id")["samples_seen"].transform("max") == history["samples_seen"]
    completed = history["samples_seen"] == 1024
    assert set(history.loc[completed & last, "eval_examples"]) == {2048}
    assert set(history.loc[~last, "eval_examples"]) == {512}
