"""A history that lacks a column a reader needs is an error naming the column, not a KeyError deep in pandas
nor a silent default; the columns some trials leave out stay optional. Hand-built histories, no Ray."""

import pandas as pd
import pytest

from cbs_ray.analysis.tables import noise_scale_table, trial_table
from cbs_ray.methods.branch.reading_points import critical_batch_over_training
from cbs_ray.methods.branch.reading_schedule import samples_trained, validate_schedule
from cbs_ray.methods.scratch.batch_table import per_batch_table
from cbs_ray.methods.scratch.reading import summarize
from cbs_ray.records.columns import OPTIONAL, Column, MissingColumnError

BUDGET = 2048


def scratch_history() -> pd.DataFrame:
    """Two trials at two batch sizes, two reports each: only the columns every report carries."""
    return pd.DataFrame([{Column.trial_id: f"t{b}", Column.batch_size: b, Column.alpha: 0.5,
                          Column.warmup_fraction: 0.1, Column.peak_lr: 1e-3, Column.samples_seen: s,
                          Column.accuracy: 0.5 + s / 8192 - b / 1024, Column.wall_time_s: s / b,
                          Column.samples_per_s: float(b), Column.diverged: False}
                         for b in (16, 32) for s in (1024, BUDGET)])


def branch_history() -> pd.DataFrame:
    trunk = [{Column.role: "trunk", Column.start_samples: 0, Column.samples_seen: s, Column.batch_size: 8,
              Column.alpha: 0.5, Column.eval_loss: loss, Column.steps: s // 8}
             for s, loss in ((1024, 3.0), (2048, 2.5))]
    branch = [{Column.role: "branch", Column.start_samples: 1024, Column.samples_seen: 2048, Column.batch_size: 16,
               Column.alpha: 0.5, Column.eval_loss: 2.51, Column.steps: 64}]
    return pd.DataFrame(trunk + branch)


@pytest.mark.parametrize("column", [Column.trial_id, Column.samples_seen, Column.batch_size, Column.alpha,
                                    Column.warmup_fraction, Column.peak_lr, Column.accuracy])
def test_the_trial_table_names_a_required_column_the_history_lacks(column):
    history = scratch_history().drop(columns=[column])
    with pytest.raises(MissingColumnError, match=f"^trial_table: the history has no column '{column}'") as e:
        trial_table(history, metric=Column.accuracy, budget_samples=BUDGET)
    assert e.value.missing == [column]
    with pytest.raises(MissingColumnError, match=f"'{column}'"):  # the summary reads through it
        summarize(history, metric=Column.accuracy, mode="max", budget_samples=BUDGET)


def test_the_message_says_which_of_several_are_missing_and_what_they_are():
    history = scratch_history().drop(columns=[Column.samples_seen, Column.accuracy])
    with pytest.raises(MissingColumnError) as e:
        trial_table(history, metric=Column.accuracy, budget_samples=BUDGET)
    assert str(e.value) == ("trial_table: the history has no columns 'samples_seen' (TrialReport.samples_seen), "
                            "'accuracy' (an evaluation metric)")


def test_a_metric_the_reports_do_not_carry_is_named():
    with pytest.raises(MissingColumnError, match="no column 'bleu'"):
        summarize(scratch_history(), metric="bleu", mode="max", budget_samples=BUDGET)


def test_the_per_batch_table_and_the_noise_table_name_what_they_lack():
    trials = trial_table(scratch_history(), metric=Column.accuracy, budget_samples=BUDGET)
    with pytest.raises(MissingColumnError, match="^per_batch_table: the history has no column 'status'"):
        per_batch_table(trials.drop(columns=[Column.status]), metric=Column.accuracy, mode="max")
    noisy = scratch_history().assign(**{Column.b_simple: 4.0, Column.grad_sq: 1.0})  # tr Σ never reported
    with pytest.raises(MissingColumnError, match="^noise_scale_table: .*'trace_sigma'"):
        noise_scale_table(noisy)


def test_optional_columns_stay_optional():
    # None of the fields a report may leave out is needed: a history without any of them is read, with the
    # documented defaults (no restarts, no noise scale, no node).
    history = scratch_history()
    assert not set(OPTIONAL) - {Column.samples_per_s} & set(history)
    trials = trial_table(history, metric=Column.accuracy, budget_samples=BUDGET)
    assert trials[Column.restarts].eq(0).all() and Column.node_id not in trials
    assert trials[Column.status].eq("completed").all()
    assert noise_scale_table(history)[1]["note"] == "not reported"
    summary = summarize(history, metric=Column.accuracy, mode="max", budget_samples=BUDGET)
    assert summary.critical_batch.turning_point.batch_size == 16
    # A from-scratch history read as a branch search: no role column, so no branch and no trunk.
    assert critical_batch_over_training(history, trunk_batch=16, window_samples=1024, tolerance=0.01) == []


@pytest.mark.parametrize("column", [Column.start_samples, Column.samples_seen, Column.batch_size, Column.eval_loss])
def test_cbs_over_training_names_a_required_column_the_history_lacks(column):
    kwargs = dict(trunk_batch=8, window_samples=1024, tolerance=0.01)
    (point,) = critical_batch_over_training(branch_history(), **kwargs)
    assert point.batch_size == 16 and point.bound == "lower"  # 2.51 recovers the trunk's 2.5 within 1 %
    with pytest.raises(MissingColumnError, match=f"^critical_batch_over_training: .*'{column}'"):
        critical_batch_over_training(branch_history().drop(columns=[column]), **kwargs)


def test_the_schedule_validation_and_the_cost_name_what_they_lack():
    schedule = pd.DataFrame([{Column.role: "schedule", Column.start_samples: 0, Column.samples_seen: 2048,
                              Column.batch_size: 16, Column.eval_loss: 2.5, Column.steps: 100}])
    history = pd.concat([branch_history(), schedule], ignore_index=True)
    assert validate_schedule(history).control("schedule").steps == 100
    with pytest.raises(MissingColumnError, match="^validate_schedule: the history has no column 'steps'"):
        validate_schedule(history.drop(columns=[Column.steps]))
    assert samples_trained(history) == {"trunk": 2048, "branch": 1024, "schedule": 2048}
    with pytest.raises(MissingColumnError, match="^samples_trained: .*'samples_seen'"):
        samples_trained(history.drop(columns=[Column.samples_seen]))
