"""A fair frontier (issue 50, item 4): each fixed-batch control's configuration from a from-scratch search's best
at that batch, on hand-built inputs with the answers beside them."""

import pandas as pd

from cbs_ray.analysis.control_configs import (
    TRUNK,
    best_configurations,
    budget_problem,
    configurations_line,
    configurations_run,
    control_configurations,
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
