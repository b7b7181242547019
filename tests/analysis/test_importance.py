"""Parameter importance (PED-ANOVA through Optuna) on hand-built per-trial tables, the answer beside each."""

import warnings

import optuna
import pandas as pd
import pytest

from cbs_ray.maths.importance import EVALUATOR, MIN_TRIALS, MIN_TRIALS_PER_BATCH, param_importance, read_importance
from cbs_ray.methods.scratch.reading import summarize

ALPHAS, WARMUPS, BATCHES = (0.5, 0.625, 0.75), (0.0, 0.1, 0.2), (16, 32, 64, 128)


def grid(accuracy, *, batches=BATCHES, alphas=ALPHAS, warmups=WARMUPS, status="completed") -> pd.DataFrame:
    """A per-trial table as ``summary.trial_table`` writes it: every batch × alpha × warmup, each trial's
    final accuracy ``accuracy(batch, alpha, warmup)``."""
    return pd.DataFrame([{"trial_id": f"{status[0]}{b}-{a}-{w}", "batch_size": b, "alpha": a, "warmup_fraction": w,
                          "peak_lr": 1e-3 * (b / 16) ** a, "samples_seen": 4096, "accuracy": accuracy(b, a, w),
                          "repeat": False, "status": status}
                         for b in batches for a in alphas for w in warmups])


def largest(params: dict) -> str:
    return max(params, key=params.get)


def test_only_alpha_matters_overall_and_at_every_batch_size():
    # Accuracy rises with alpha and nothing else: the top quarter is all alpha 0.75.
    overall, per_batch = param_importance(grid(lambda b, a, w: 0.5 + a / 4), metric="accuracy", mode="max")
    assert overall.trials == 36 and overall.note == ""
    assert largest(overall.params) == "alpha" and overall.params["alpha"] > 0.8
    assert sum(overall.params.values()) == pytest.approx(1.0)
    assert [r.batch_size for r in per_batch] == list(BATCHES)
    for r in per_batch:
        assert r.trials == 9 and set(r.params) == {"alpha", "warmup_fraction"}  # the batch size is fixed there
        assert r.params["alpha"] > 0.8


def test_only_the_batch_size_matters_for_a_loss_that_grows_with_it():
    # eval_loss (min) grows with log2 B only: the top quarter is B=16; within a batch size nothing matters.
    table = grid(lambda b, a, w: 0.0).assign(eval_loss=lambda d: d["batch_size"].map({16: 1.0, 32: 1.2, 64: 1.4,
                                                                                      128: 1.6}))
    overall, per_batch = param_importance(table, metric="eval_loss", mode="min")
    assert largest(overall.params) == "batch_size" and overall.params["batch_size"] > 0.8
    assert all(r.params is None and "ties" in r.note for r in per_batch)


def test_the_mode_picks_which_end_is_the_top_quarter():
    # B=16's 9 trials all reach 0.9: the best quarter (max) is exactly them, so the batch size matters. The
    # other batch sizes' accuracy follows alpha: the worst quarter (min) is exactly their 9 trials at alpha 0.5.
    table = grid(lambda b, a, w: 0.9 if b == 16 else a / 2)
    best, _ = param_importance(table, metric="accuracy", mode="max")
    worst, _ = param_importance(table, metric="accuracy", mode="min")
    assert largest(best.params) == "batch_size" and largest(worst.params) == "alpha"


def test_warmup_matters_where_it_does():
    overall, _ = param_importance(grid(lambda b, a, w: 0.8 - abs(w - 0.1)), metric="accuracy", mode="max")
    assert largest(overall.params) == "warmup_fraction"


def test_too_few_completed_trials_give_the_note_and_no_params():
    # 7 completed overall (< 8); per batch size 5 of B=16 (< 6) and 2 of B=32.
    table = pd.concat([grid(lambda b, a, w: a, batches=(16,), warmups=(0.0,)),
                       grid(lambda b, a, w: a, batches=(16,), alphas=(0.5, 0.75), warmups=(0.2,)),
                       grid(lambda b, a, w: a, batches=(32,), alphas=(0.5, 0.75), warmups=(0.0,))])
    assert len(table) == 7
    overall, per_batch = param_importance(table, metric="accuracy", mode="max")
    assert (overall.trials, overall.params, overall.note) == (7, None, f"too few trials (7 < {MIN_TRIALS})")
    assert [(r.batch_size, r.trials, r.params, r.note) for r in per_batch] == [
        (16, 5, None, f"too few trials (5 < {MIN_TRIALS_PER_BATCH})"),
        (32, 2, None, f"too few trials (2 < {MIN_TRIALS_PER_BATCH})")]


def test_stopped_diverged_failed_and_repeat_trials_are_not_counted():
    completed = grid(lambda b, a, w: 0.5 + a / 4, batches=(16, 32))
    # Were these counted, warmup would decide the top quarter (and the counts would be 18 + 36 + ...).
    others = pd.concat([grid(lambda b, a, w: 0.95 + w / 10, batches=(16, 32), status=s)
                        for s in ("stopped", "diverged", "failed")])
    repeats = grid(lambda b, a, w: 0.95 + w / 10, batches=(16, 32)).assign(
        trial_id=lambda d: "r" + d["trial_id"], repeat=True)
    nan_metric = grid(lambda b, a, w: float("nan"), batches=(16, 32)).assign(trial_id=lambda d: "n" + d["trial_id"])
    mixed = pd.concat([completed, others, repeats, nan_metric], ignore_index=True)
    assert param_importance(mixed, metric="accuracy", mode="max") == \
        param_importance(completed, metric="accuracy", mode="max")
    overall, per_batch = param_importance(mixed, metric="accuracy", mode="max")
    assert overall.trials == 18 and [r.trials for r in per_batch] == [9, 9]
    assert largest(overall.params) == "alpha"


def test_the_same_trials_give_the_same_reading_in_any_order():
    table = grid(lambda b, a, w: 0.5 + a / 4 + w / 3 - b / 1000)
    first = param_importance(table, metric="accuracy", mode="max")
    assert param_importance(table, metric="accuracy", mode="max") == first
    assert param_importance(table.sample(frac=1.0, random_state=3), metric="accuracy", mode="max") == first


def test_a_parameter_that_did_not_vary_is_none_not_zero():
    reading = read_importance(grid(lambda b, a, w: a, batches=(16, 32, 64), warmups=(0.1,)), metric="accuracy",
                              mode="max")
    assert reading.params["warmup_fraction"] is None and reading.note == "warmup_fraction did not vary"
    assert largest({k: v for k, v in reading.params.items() if v is not None}) == "alpha"
    nothing = read_importance(grid(lambda b, a, w: a, batches=(16,), alphas=(0.5,), warmups=(0.1,) * 6),
                              metric="accuracy", mode="max", params=("alpha", "warmup_fraction"), min_trials=6)
    assert (nothing.params, nothing.note) == (None, "alpha and warmup_fraction did not vary")


def test_optuna_stays_quiet_and_its_log_level_is_kept():
    optuna.logging.set_verbosity(optuna.logging.INFO)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            param_importance(grid(lambda b, a, w: a), metric="accuracy", mode="max")
        assert caught == [] and optuna.logging.get_verbosity() == optuna.logging.INFO
    finally:
        optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_summarize_reads_importance_from_completed_trials_only():
    # One report per trial at the budget (completed), plus an ASHA-stopped trial at half of it.
    table = grid(lambda b, a, w: 0.5 + a / 4, batches=(16, 32))
    history = pd.concat([table.drop(columns=["status", "repeat"]),
                         table.head(1).assign(trial_id="stopped", samples_seen=2048, accuracy=0.99)])
    history = history.assign(wall_time_s=1.0, samples_per_s=100.0, diverged=False)
    imp = summarize(history, metric="accuracy", mode="max", budget_samples=4096).importance
    assert imp.evaluator == EVALUATOR == "PedAnovaImportanceEvaluator"
    assert imp.overall.trials == 18 and largest(imp.overall.params) == "alpha"
    out = imp.to_dict()
    assert set(out["overall"]) == {"trials", "params", "note"}
    assert [r["batch_size"] for r in out["per_batch_size"]] == [16, 32]
