"""Parameter importance: how much the batch size, alpha (the LR-scaling exponent) and the warmup fraction
mattered to the metric, over all trials and per batch size. Pure and Ray-free: the input is the per-trial
table (``analysis.tables.trial_table``); the trials go into an in-memory Optuna study and Optuna's importance
evaluator reads it.

The evaluator is PED-ANOVA (Watanabe et al. 2023, "PED-ANOVA: Efficiently Quantifying Hyperparameter
Importance in Arbitrary Subspaces", IJCAI, arXiv:2304.10255), Optuna 5's default. fANOVA (Hutter et al.
2014) needs scikit-learn's random forest, which cbs-ray does not depend on, and a forest fitted to a dozen
trials says little. PED-ANOVA has no randomness (Parzen estimators on a fixed grid), so there is no seed to
set: the same trials give the same reading, in any order.

What it measures: per parameter, how differently its values spread among the top quarter of the trials
(``TOP_QUANTILE``, by the metric) than among all of them (a Pearson divergence), as a share of the sum over
the parameters. A parameter whose best trials look like any trials did not matter here. A parameter every
trial held at one value is ``None`` ("did not vary"), not 0: the data cannot say whether it mattered.

Which trials count: search trials that completed the full budget with a finite metric. An ASHA-stopped
trial's metric is at fewer samples and not comparable; a diverged or failed trial has no metric at the
budget; a repeat reruns one configuration with another seed and would count it twice.

How many: ``MIN_TRIALS`` (8) over all trials, where batch size, alpha and warmup vary, and
``MIN_TRIALS_PER_BATCH`` (6) per batch size, where only alpha and warmup do. Either keeps at least 2
trials in the top quarter to set against the rest; below it the reading is "too few trials (n < k)".
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # optuna loads only where importance is read
    from optuna.distributions import BaseDistribution
    from optuna.importance import PedAnovaImportanceEvaluator

__all__ = ["ImportanceReading", "EVALUATOR", "PARAMS", "TOP_QUANTILE", "MIN_TRIALS", "MIN_TRIALS_PER_BATCH",
           "counted_trials", "read_importance", "param_importance"]

EVALUATOR = "PedAnovaImportanceEvaluator"
PARAMS = ("batch_size", "alpha", "warmup_fraction")  # what the search varies (search_space.tune_space)
TOP_QUANTILE = 0.25  # PED-ANOVA's gamma': the good trials are the top quarter (Optuna's 0.1 suits hundreds)
MIN_TRIALS = 8  # over all trials: 3 parameters, ≥ 2 in the top quarter
MIN_TRIALS_PER_BATCH = 6  # per batch size: alpha and warmup only, ≥ 2 in the top quarter


@dataclass(frozen=True)
class ImportanceReading:
    """One reading: over all trials, or over one batch size's (``batch_size`` set)."""

    trials: int  # completed trials it rests on (``counted_trials``)
    params: Optional[dict[str, Optional[float]]]  # parameter -> share of the importance (they sum to 1);
    # a parameter that did not vary is None; None altogether where there is no reading (``note`` says why)
    note: str  # why there is no reading, or which parameter did not vary; "" when nothing to say
    batch_size: Optional[int] = None


def counted_trials(trials: pd.DataFrame, *, metric: str) -> pd.DataFrame:
    """The trials an importance reading counts: completed, not repeats, with a finite metric."""
    if trials.empty or metric not in trials:
        return trials.iloc[:0]
    keep = (trials["status"] == "completed") & np.isfinite(pd.to_numeric(trials[metric], errors="coerce"))
    if "repeat" in trials:
        keep &= ~trials["repeat"].fillna(False).astype(bool)
    return trials[keep]


def _distribution(name: str, values: pd.Series) -> BaseDistribution:
    """Optuna's distribution for one parameter over the values seen; the batch size as its log2 (an ordered
    integer, as the search samples it) where every one is a power of two, else as a category."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if name == "batch_size":
        batches = sorted({int(b) for b in values})
        if all(b > 0 and b & (b - 1) == 0 for b in batches):
            return IntDistribution(batches[0].bit_length() - 1, batches[-1].bit_length() - 1)
        return CategoricalDistribution(batches)
    return FloatDistribution(float(values.min()), float(values.max()))


def _value(name: str, value: Any, distribution: BaseDistribution) -> float:
    from optuna.distributions import IntDistribution

    if name == "batch_size":
        return int(value).bit_length() - 1 if isinstance(distribution, IntDistribution) else int(value)
    return float(value)


def _ped_anova() -> PedAnovaImportanceEvaluator:
    from optuna.importance import PedAnovaImportanceEvaluator

    return PedAnovaImportanceEvaluator(target_quantile=TOP_QUANTILE)


def _raw_importances(rows: pd.DataFrame, names: list[str], *, metric: str, mode: str) -> dict[str, float]:
    """PED-ANOVA's unnormalised importances of ``names`` over ``rows``, Optuna's warnings and logs silenced
    (its small-sample warnings are what ``note`` says in words)."""
    import optuna

    distributions = {n: _distribution(n, rows[n]) for n in names}
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # "A new study created in memory ..."
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ExperimentalWarning, "regimes have less than 2 trials", ...
            study = optuna.create_study(direction="maximize" if mode == "max" else "minimize")
            study.add_trials([optuna.trial.create_trial(
                params={n: _value(n, row[n], distributions[n]) for n in names}, distributions=distributions,
                value=float(row[metric])) for _, row in rows.iterrows()])
            return optuna.importance.get_param_importances(study, evaluator=_ped_anova(), params=names,
                                                           normalize=False)
    finally:
        optuna.logging.set_verbosity(verbosity)


def read_importance(trials: pd.DataFrame, *, metric: str, mode: str, params: Sequence[str] = PARAMS,
                    min_trials: int = MIN_TRIALS, batch_size: Optional[int] = None) -> ImportanceReading:
    """Importance of ``params`` over the counted trials of ``trials`` (``counted_trials``), or a note saying
    why there is none: too few trials, no parameter varied, or the metric ties (the top quarter is every
    trial, so nothing tells it apart)."""
    rows = counted_trials(trials, metric=metric)
    n = len(rows)
    if n < min_trials:
        return ImportanceReading(n, None, f"too few trials ({n} < {min_trials})", batch_size)
    varied = [p for p in params if rows[p].nunique() > 1]
    fixed = [p for p in params if p not in varied]
    still = f"{' and '.join(fixed)} did not vary" if fixed else ""
    if not varied:
        return ImportanceReading(n, None, still, batch_size)
    raw = _raw_importances(rows, varied, metric=metric, mode=mode)
    total = sum(raw.values())
    if not total > 0 or not math.isfinite(total):
        return ImportanceReading(n, None, "the metric does not tell the trials apart (ties)", batch_size)
    return ImportanceReading(n, {p: (raw[p] / total if p in raw else None) for p in params}, still, batch_size)


def param_importance(trials: pd.DataFrame, *, metric: str,
                     mode: str) -> tuple[ImportanceReading, list[ImportanceReading]]:
    """Over all trials (batch size, alpha, warmup), then per batch size (alpha, warmup), one reading for
    every batch size in ``trials``, in order."""
    overall = read_importance(trials, metric=metric, mode=mode)
    batches = sorted(int(b) for b in trials["batch_size"].unique()) if "batch_size" in trials else []
    per_batch = [read_importance(trials[trials["batch_size"] == b], metric=metric, mode=mode, params=PARAMS[1:],
                                 min_trials=MIN_TRIALS_PER_BATCH, batch_size=b) for b in batches]
    return overall, per_batch
