"""A fair frontier (issue 50, item 4): each fixed-batch control's configuration from a from-scratch search's best
at that batch, on hand-built inputs with the answers beside them."""

import math

import pandas as pd
import pytest

from cbs_ray.maths.lr_schedule import scaled_lr
from cbs_ray.methods.branch.control_configurations import (
    TRUNK,
    best_configurations,
    budget_problem,
    configurations_line,
    configurations_run,
    control_configurations,
    interpolated_configuration,
)


def _run(tid, batch, alpha, warmup, loss, *, reports=(512, 1024), repeat=False):
    return [{"trial_id": tid, "batch_size": batch, "alpha": alpha, "warmup_fraction": warmup, "peak_lr": 1e-3,
             "samples_seen": s, "eval_loss": loss if s == reports[-1] else loss + 1.0, "wall_time_s": s / 100.0,
             "samples_per_s": 100.0, "diverged": False, "repeat": repeat} for s in reports]


def test_each_batch_s_best_completed_trial_gives_its_configuration():
    history = pd.DataFrame(
        _run("a", 16, 0.5, 0.1, 5.60) + _run("b", 16, 0.75, 0.05, 5.55)  # B=16: b is the best
        + _run("c", 16, 1.0, 0.0, 5.00, reports=(512,))  # better, but stopped at 512 of 1024: not a configuration
        + _run("r", 16, 0.75, 0.05, 5.50, repeat=True)  # a repeat of b: no configuration of its own
        + _run("d", 32, 0.625, 0.2, 5.70)  # B=32: the only one
        + _run("e", 64, 0.5, 0.1, 5.9, reports=(512,)))  # B=64 never completed: absent
    best = best_configurations(history, metric="eval_loss", mode="min", budget_samples=1024)
    assert sorted(best) == [16, 32]
    assert (best[16]["alpha"], best[16]["warmup_fraction"], best[16]["trial_id"]) == (0.75, 0.05, "b")
    assert (best[32]["alpha"], best[32]["warmup_fraction"]) == (0.625, 0.2)
    # mode max picks the other end
    assert best_configurations(history, metric="eval_loss", mode="max", budget_samples=1024)[16]["trial_id"] == "a"
    assert best_configurations(pd.DataFrame(), metric="eval_loss", mode="min", budget_samples=1024) == {}


def test_each_control_takes_the_search_s_best_where_it_has_one_else_the_trunk_s():
    best = {16: {"alpha": 0.75, "warmup_fraction": 0.05}, 32: {"alpha": 0.625, "warmup_fraction": 0.2}}
    controls = [("small", 16), ("large", 64), ("iso_steps", 32), ("above", 16)]
    configs = control_configurations(controls, best, alpha=0.5, warmup_fraction=0.04, source="/x/scratch-1")
    assert configs == [
        {"batch_size": 16, "alpha": 0.75, "warmup_fraction": 0.05, "source": "/x/scratch-1"},
        {"batch_size": 32, "alpha": 0.625, "warmup_fraction": 0.2, "source": "/x/scratch-1"},
        {"batch_size": 64, "alpha": 0.5, "warmup_fraction": 0.04, "source": TRUNK}]
    assert configurations_line(configs) == ("B=16 alpha 0.75, warmup 0.05 (from /x/scratch-1); B=32 alpha 0.625, "
                                            "warmup 0.2 (from /x/scratch-1); B=64 alpha 0.5, warmup 0.04 (the "
                                            "trunk's)")


BEST = {16: {"alpha": 0.5, "warmup_fraction": 0.1}, 64: {"alpha": 0.75, "warmup_fraction": 0.3}}
"""Two tuned batches 4x apart (the dense frontier's batches between them were not searched)."""


def test_an_untuned_batch_between_two_tuned_ones_takes_their_lr_geometrically_and_warmup_linearly():
    # B=32 is halfway between 16 and 64 in log B (w = 0.5). At base_batch 8 their LRs are base·2^0.5 and
    # base·8^0.75 = base·2^2.25; the geometric mean base·2^1.375 = base·(32/8)^alpha gives alpha = 1.375/2.
    alpha, warmup, between = interpolated_configuration(32, BEST, base_batch=8)
    assert (alpha, warmup, between) == (pytest.approx(0.6875, abs=1e-12), pytest.approx(0.2, abs=1e-12), [16, 64])
    lr = scaled_lr(1.0, 32, 8, alpha)
    assert lr == pytest.approx(math.sqrt(scaled_lr(1.0, 16, 8, 0.5) * scaled_lr(1.0, 64, 8, 0.75)), rel=1e-12)
    # B=24: w = log(1.5)/log(4); the warmup 0.1 + w·0.2
    w = math.log(1.5) / math.log(4)
    assert interpolated_configuration(24, BEST, base_batch=8)[1] == pytest.approx(0.1 + 0.2 * w, abs=1e-12)


def test_outside_the_tuned_batches_the_nearest_end_s_configuration_and_at_base_batch_the_alphas_mean():
    assert interpolated_configuration(128, BEST, base_batch=8) == (0.75, 0.3, [64])
    assert interpolated_configuration(8, BEST, base_batch=8) == (0.5, 0.1, [16])
    # at base_batch every alpha gives base_lr: the alphas are interpolated themselves
    assert interpolated_configuration(32, BEST, base_batch=32)[0] == pytest.approx(0.625, abs=1e-12)


def test_the_dense_frontier_interpolates_where_the_search_did_not_train_and_says_so():
    controls = [("small", 16), ("frontier", 32), ("large", 64), ("frontier", 128)]
    configs = control_configurations(controls, BEST, alpha=0.5, warmup_fraction=0.04, source="/x/s", base_batch=8)
    assert [c["source"] for c in configs] == ["/x/s"] * 4  # none at the trunk's: every batch near a tuned one
    assert [c.get("interpolated_from") for c in configs] == [None, [16, 64], None, [64]]
    assert configs[1]["alpha"] == pytest.approx(0.6875, abs=1e-12)
    line = configurations_line(configs)
    assert "B=32 alpha 0.6875, warmup 0.2 (interpolated between B=16 and B=64 of /x/s)" in line
    assert "B=128 alpha 0.75, warmup 0.3 (B=64's of /x/s)" in line
    # without base_batch (the grid), an untrained batch is the trunk's, as before
    assert control_configurations(controls, BEST, alpha=0.5, warmup_fraction=0.04, source="/x/s")[1]["source"] == TRUNK


def test_what_the_controls_trained_is_read_back_recorded_or_from_their_runs():
    recorded = [{"batch_size": 16, "alpha": 0.75, "warmup_fraction": 0.05, "source": "/x/s"}]
    assert configurations_run(pd.DataFrame(), recorded) == recorded
    rows = pd.DataFrame([
        {"role": "schedule", "control": "schedule", "batch_size": 8, "alpha": 0.5, "samples_seen": 64},
        {"role": "schedule", "control": "small", "batch_size": 8, "alpha": 0.5, "samples_seen": 64},
        {"role": "schedule", "control": "large", "batch_size": 32, "alpha": 0.5, "samples_seen": 64},
        {"role": "trunk", "control": None, "batch_size": 8, "alpha": 0.5, "samples_seen": 64}])
    assert configurations_run(rows, trunk_warmup=0.1) == [
        {"batch_size": 8, "alpha": 0.5, "warmup_fraction": 0.1, "source": TRUNK},
        {"batch_size": 32, "alpha": 0.5, "warmup_fraction": 0.1, "source": TRUNK}]
    assert configurations_run(rows[rows["role"] == "trunk"]) is None


def test_a_search_at_another_budget_cannot_set_the_controls():
    assert budget_problem(4096, 4096, where="s") is None
    said = budget_problem(2048, 4096, where="s")
    assert said.startswith("branch.controls_from: s trained 2048 samples per trial, this branch search 4096")
    assert budget_problem(None, 4096, where="s") is not None
