"""The ladder's summary (``search.method: ladder``): B_crit at every rung of the cheap runs, the power law in D,
the prediction for the full budget and, with ``ladder.validate``, the prediction against B_crit measured at
the full budget. Pure pandas; the maths is ``maths.ladder``; ``summary.json`` is ``LadderSummary.to_json``.

**What a rung is.** Every batch B (``search.batch_sizes``) trains ``ladder.seeds`` runs at a constant LR to a
fraction of the full budget D, evaluating at a geometric cadence (``methods.ladder.settings``). At each evaluation
D_j of the smallest batch (the reference), its seed-mean loss is the target; S(B) is the optimizer steps each
batch's seed-mean curve needs to reach it (interpolated between evaluations); S(B) = S_min + E_min/B
(McCandlish et al. 2018) gives B_crit(D_j) with a bootstrap interval, the 20 % rule its batch (Zhang et al.
2025). ``maths.ladder.fit_ladder`` fits log B_crit against log D_j and predicts B_crit(D) with a 90 %
interval, or refuses (fewer than 3 rungs, a poor fit, an exponent whose interval includes 0).

**Validation.** With ``ladder.validate`` the runs go on to 2·D under the same protocol (the ladder reads only
their evaluations up to the fraction, which are the ladder's runs exactly: ``methods.ladder.settings``); the rung at
D, the smallest batch's loss there as the target, is the measurement (the larger batches need more than D
samples to reach it, hence 2·D). The prediction is judged against it and against two naive baselines: B_crit at the
largest rung (no extrapolation) and that × (D / D_rung)^γ for exponents borrowed from the literature.

Where this departs from the issue's sketch: the LR follows one alpha (``ladder.alpha``), not one searched at the
smallest rung. Branch mode's schedule for the same spec, where one exists, is carried beside the fixed batch
(``schedule``: ``methods.branch.same_spec.same_spec_schedule`` finds it), not combined with the prediction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Optional, Union

import numpy as np
import pandas as pd

from cbs_ray.analysis.decision import DEFAULT_BASE, Decision, Evidence, NextSearch
from cbs_ray.maths.ladder import (
    BORROWED_EXPONENTS,
    Rung,
    borrowed_exponent,
    closed_form_laws,
    fit_ladder,
    fit_power_law,
    log2_error,
    no_extrapolation,
    recommend_batch,
    rung_readings,
)
from cbs_ray.maths.ladder_loss import LossLadderFit, fit_through_loss
from cbs_ray.maths.lr_schedule import scaled_lr, warmup_steps
from cbs_ray.maths.prediction import LITERATURE_EXPONENTS, Prediction, RungPoint, predict_b_crit
from cbs_ray.methods.ladder.decision import decide_ladder
from cbs_ray.methods.ladder.reading_stop import ladder_cuts, samples_trained
from cbs_ray.methods.ladder.recorded import RecordedLadderSettings
from cbs_ray.methods.ladder.summary import (
    JudgedBaseline,
    LadderCost,
    LadderFit,
    LadderPrediction,
    LadderSummary,
    NoiseScale,
    PowerLawBeside,
    PredictionValidation,
    PredictorFigures,
    ReferenceLaw,
    ReferenceLaws,
    RungRecord,
    ThroughLoss,
)
from cbs_ray.records.columns import Column, require_columns

__all__ = ["LOG2_TARGET", "LadderSummary", "ladder_curves", "summarize_ladder"]

LOG2_TARGET = 0.5
"""The issue's accuracy target, fixed before any validation: |log2(predicted / measured)| ≤ 0.5."""


def ladder_curves(history: pd.DataFrame, *, up_to: Optional[int] = None, column: str = Column.eval_loss,
                  cuts: Optional[dict] = None) -> dict[int, list[list[tuple[float, float]]]]:
    """``maths.ladder.Curves`` from the history: per batch, one curve per run (trial), its (samples_seen,
    ``column``) reports up to ``up_to`` (and its batch's cut in ``cuts``: ``methods.ladder.reading_stop.ladder_cuts``);
    a diverged report's loss is NaN."""
    require_columns(history, [Column.trial_id, Column.batch_size, Column.samples_seen, column],
                    where="ladder_curves")
    curves: dict = {}
    for _, run in history.groupby(Column.trial_id, sort=True):
        run = run.sort_values(Column.samples_seen, kind="stable").drop_duplicates(Column.samples_seen, keep="last")
        if up_to is not None:
            run = run[run[Column.samples_seen] <= up_to]
        if cuts is not None:
            run = run[run[Column.samples_seen] <= cuts.get(int(run[Column.batch_size].iloc[0]), math.inf)]
        diverged = run[Column.diverged].astype(bool) if Column.diverged in run else pd.Series(False, index=run.index)
        points = [(float(s), float(v) if not d and math.isfinite(float(v)) else math.nan)
                  for s, v, d in zip(run[Column.samples_seen], pd.to_numeric(run[column], errors="coerce"), diverged)]
        if points:
            curves.setdefault(int(run[Column.batch_size].iloc[0]), []).append(points)
    return curves


def noise_scale_at(history: pd.DataFrame, samples: list) -> NoiseScale:
    """The gradient noise scale B_simple (McCandlish et al. 2018) the runs measured on the way, at each of
    ``samples``: ``by_rung`` ``[[samples_seen, median B_simple, runs]]`` over every run reporting a finite
    positive value there (the loop measures it where a batch spans more than one micro-batch or worker), and
    ``exponent``, the power law in D through them (None with fewer than 3). A diagnostic beside the rungs, not
    a reading of them: B_simple is a property of the gradient, B_crit of the steps the batches took."""
    if Column.b_simple not in history:
        return NoiseScale([], None, None)
    values = pd.to_numeric(history[Column.b_simple], errors="coerce")
    ok = history.assign(**{Column.b_simple: values})[np.isfinite(values) & values.gt(0)
                                                     & history[Column.samples_seen].isin(samples)]
    by = [[int(d), float(g[Column.b_simple].median()), int(g[Column.trial_id].nunique())]
          for d, g in ok.groupby(Column.samples_seen, sort=True)]
    constant, exponent = fit_power_law([d for d, _, _ in by], [b for _, b, _ in by]) if len(by) >= 3 else (None, None)
    return NoiseScale(by, exponent, constant)


def _reading(rec: RecordedLadderSettings) -> dict:
    """How the rungs read the curves (``ladder.curve``), from where (the first rung: twice the warmup) and, with
    ``ladder.step_count: lr_weighted``, each batch's warmup steps (S(B) counted by the LR:
    ``maths.ladder.rung_readings``'s keyword arguments)."""
    return {"curve_model": rec.curve, "fit_from": rec.rungs_from, Column.warmup_steps: rec.lr_warmups}


def _rung_record(r: Rung) -> RungRecord:
    return RungRecord(r.samples_seen, r.b_crit, list(r.b_crit_ci) if r.b_crit_ci else None, r.overhead_20pct,
                      r.target_loss, {str(b): s for b, s in r.steps_by_batch.items()}, r.reason, list(r.censored))


def _mean_curves(curves: dict) -> dict[str, list[list[float]]]:
    out = {}
    for batch, runs in sorted(curves.items()):
        by: dict[float, list[float]] = {}
        for run in runs:
            for s, v in run:
                by.setdefault(s, []).append(v)
        out[str(batch)] = [[s, float(np.mean(v))] for s, v in sorted(by.items()) if len(v) == len(runs)]
    return out


def summarize_ladder(history: pd.DataFrame, meta: Union[Mapping[str, Any], RecordedLadderSettings], *,
                     bootstrap: int = 1000, schedule: Optional[dict] = None,
                     next_search: NextSearch = DEFAULT_BASE) -> LadderSummary:
    """The ladder's summary from its history and ``meta``: the experiment's metadata (``ExperimentMeta.recorded()``,
    with ``experiment_path``) or its settings read once (``RecordedLadderSettings``). ``schedule``: branch mode's
    batch-size schedule for the same spec where one exists (``{"experiment", "batch_size_schedule", "alpha",
    "validated"}``), carried into the prediction as ``batch_size_schedule`` beside the fixed batch. The rungs read
    ``ladder.reading``'s column, each batch's runs up to where a ladder alone would have stopped them
    (``ladder_stop.ladder_cuts``). ``next_search``: what the decision's next step keeps of this search
    (``analysis.decision.next_search_base``)."""
    rec = meta if isinstance(meta, RecordedLadderSettings) else RecordedLadderSettings.from_json(meta)
    budget, stop, batches = rec.budget_samples, rec.stop_samples, list(rec.batches)
    reading = _reading(rec)
    full = ladder_curves(history, column=rec.column) if len(history) else {}
    cap = int(rec.cap * stop) // max(batches) * max(batches)
    cuts = ladder_cuts(full, reference_stop=stop, cap=cap) if full else {}
    cut = ladder_curves(history, column=rec.column, up_to=max(cap, stop), cuts=cuts) if full else {}
    rungs = [r for r in (rung_readings(cut, bootstrap=bootstrap, **reading) if full else [])
             if r.samples_seen >= reading["fit_from"] and r.samples_seen <= stop]  # not inside the warmup
    power_law = fit_ladder(rungs, budget_samples=budget, bootstrap=bootstrap)
    through = fit_through_loss(rungs, [[pt for pt in run if pt[0] <= stop] for run in cut.get(min(cut), [])] if cut
                               else [], power_law=power_law, stop_samples=stop, bootstrap=bootstrap) \
        if rec.predict == "loss" else None
    # the prediction ladder.predict chose: by default the rungs with a prior (maths.prediction); the power
    # law's own figures stay in ``ladder``
    fit = through or ladder_prediction(rungs, budget, batch_grid=(min(batches), max(batches)),
                                       rungs_from=reading["fit_from"])
    noise = noise_scale_at(history, [int(r.samples_seen) for r in rungs]) if len(history) else None
    ladder = LadderFit(
        fraction_samples=stop, rungs=[_rung_record(r) for r in rungs], exponent=power_law.exponent,
        exponent_ci=list(power_law.exponent_ci) if power_law.exponent_ci else None,
        exponent_se=power_law.exponent_se, constant=power_law.constant, fit_p_value=power_law.fit_p_value,
        rungs_used=list(power_law.rungs_used), refusal=power_law.refusal,
        overhead_exponent=power_law.overhead_exponent, curve=rec.curve, reading=rec.reading, column=rec.column,
        cap_samples=cap, step_count=rec.step_count, warmup_steps=rec.warmup_steps,
        cuts={str(b): c for b, c in sorted(cuts.items())},
        rung_span=(max(power_law.rungs_used) / min(power_law.rungs_used)) if power_law.rungs_used else None,
        noise_scale=noise, predict="loss" if through else None,
        through_loss=_through_loss_record(through) if through else None)
    prediction = _prediction(fit, power_law.overhead_20pct, rec, schedule, noise)
    ladder_samples = samples_trained(full, cuts) if full else 0
    validation = _validate(full, rungs, fit, power_law, rec, bootstrap, ladder_samples,
                           prediction.b_simple_prediction) if rec.validate else None
    whole = len(batches) * rec.seeds * budget
    cost = LadderCost(ladder_samples=ladder_samples, full_budget_samples=whole, fraction_of_full=ladder_samples / whole)
    return LadderSummary(ladder=ladder, prediction=prediction, prediction_validation=validation,
                         reference_laws=_reference_laws(rec), curves=_mean_curves(full), cost=cost,
                         batch_sizes=batches, name=rec.name, experiment_path=rec.experiment_path, metric=rec.metric,
                         decision=ladder_decision(prediction, validation, next_search))


def ladder_decision(prediction: LadderPrediction, validation: Optional[PredictionValidation],
                    next_search: NextSearch = DEFAULT_BASE) -> Decision:
    """The ladder's ``decision`` (``methods.ladder.decision.decide_ladder``): its prediction's recommended batch, LR and
    warmup; B_crit measured at the budget (``ladder.validate``) and B_simple's extrapolation as cross-checks."""
    simple = prediction.b_simple_prediction
    others = [Evidence("B_simple's prediction", simple, text=f"B_simple's prediction {simple:.3g}")] if simple else []
    return decide_ladder(
        batch_size=prediction.batch_size, lr=prediction.peak_lr, warmup_samples=prediction.warmup_samples,
        budget_samples=prediction.budget_samples, b_crit=prediction.b_crit, interval_90=prediction.interval_90,
        refusal=prediction.refusal, alpha=prediction.alpha,
        measured=validation.measured_b_crit if validation else None,
        measured_ci=validation.measured_b_crit_ci if validation else None, base=next_search, others=others)


def _prediction(fit: Union[Prediction, LossLadderFit], overhead_20pct: Optional[float], rec: RecordedLadderSettings,
                schedule: Optional[dict], noise: Optional[NoiseScale]) -> LadderPrediction:
    """The prediction at D, the batch it recommends (the interval's low end, ``maths.ladder.recommend_batch``) and
    that batch's peak LR and warmup."""
    budget = rec.budget_samples
    recommended = recommend_batch(fit.interval_90[0]) if fit.interval_90 else None
    warmup = warmup_steps(rec.warmup_fraction, budget // recommended) if recommended else None
    return LadderPrediction(
        budget_samples=budget, b_crit=fit.b_crit, interval_90=list(fit.interval_90) if fit.interval_90 else None,
        batch_size=recommended, overhead_20pct=overhead_20pct, refusal=fit.refusal,
        peak_lr=scaled_lr(rec.base_lr, recommended, rec.base_batch, rec.alpha) if recommended else None,
        warmup_steps=warmup, alpha=rec.alpha, batch_size_schedule=schedule,
        warmup_samples=recommended * warmup if recommended and warmup is not None else None,
        b_simple_prediction=_b_simple_prediction(noise, budget),
        figures=_predictor_figures(fit) if isinstance(fit, Prediction) else None)


def _reference_laws(rec: RecordedLadderSettings) -> ReferenceLaws:
    """What closed-form laws give at D in samples, where the tokens a sample are known; else none."""
    tokens = rec.tokens
    if not tokens:
        return ReferenceLaws({})
    return ReferenceLaws({name: ReferenceLaw(tokens=value, samples=value / tokens) for name, value in
                          closed_form_laws(rec.budget_samples * tokens).items()},
                         note=f"{'packed' if rec.tokens_per_sample else 'at most'} {tokens} tokens a sample; fitted "
                              f"on models and budgets far larger than this one: a reference, not a measurement")


def ladder_prediction(rungs: list, budget: int, *, batch_grid: Optional[tuple[float, float]] = None,
                      rungs_from: float = 0.0) -> Prediction:
    """``maths.prediction.predict_b_crit`` on the rungs with a finite, positive B_crit and a bounded interval (their sd
    from it); where none has one, on those with a finite B_crit. ``batch_grid`` (the smallest and the largest batch
    trained) and ``rungs_from`` (the first rung past the warmup) leave rungs out, each with its reason."""
    points = [RungPoint.from_interval(r.samples_seen, r.b_crit, *(r.b_crit_ci or (None, None))) for r in rungs
              if r.b_crit is not None and math.isfinite(r.b_crit) and r.b_crit > 0]
    bounded = [p for p in points if p.sd is not None]
    return predict_b_crit(bounded or points, budget, definition="mccandlish", batch_grid=batch_grid,
                          rungs_from=rungs_from)


def _predictor_figures(fit: Prediction) -> PredictorFigures:
    """The predictor's own figures: where its exponent came from, and which definition its prior belongs to."""
    return PredictorFigures(source=fit.source, exponent=fit.exponent, exponent_sd=fit.exponent_sd, form=fit.form,
                            anchor_samples=fit.anchor_samples, rungs_exponent=fit.rungs_exponent,
                            rungs_exponent_se=fit.rungs_exponent_se, rung_share=fit.rung_share, prior=fit.prior,
                            anchor_b_crit=fit.anchor_b_crit,
                            literature_band=list(fit.literature_band) if fit.literature_band else None,
                            warnings=list(fit.warnings), left_out=[r.to_dict() for r in fit.left_out])


def _through_loss_record(fit: LossLadderFit) -> ThroughLoss:
    """``ladder.predict: loss``'s own figures (``maths.ladder_loss``), recorded only where it was asked for (a
    summary without ``predict`` is the power law's, as every summary before the key)."""
    loss = fit.loss
    return ThroughLoss(
        constant=fit.constant, exponent=fit.exponent, exponent_ci=list(fit.exponent_ci) if fit.exponent_ci else None,
        fit_p_value=fit.fit_p_value, refusal=fit.refusal, loss_at_budget=loss.loss_at_budget if loss else None,
        loss_exponent=loss.exponent if loss else None, loss_octave_samples=list(loss.samples) if loss else None,
        loss_anchor=[loss.anchor_samples, loss.anchor_loss] if loss and loss.anchor_samples else None)


def _power_law_beside(fit, measured: Optional[float]) -> PowerLawBeside:
    """The power law's prediction where ``ladder.predict`` is ``loss``, and its error against the measurement."""
    ok = fit.b_crit is not None and measured is not None and math.isfinite(measured)
    return PowerLawBeside(
        b_crit=fit.b_crit, interval_90=list(fit.interval_90) if fit.interval_90 else None, refusal=fit.refusal,
        log2_error=log2_error(fit.b_crit, measured) if ok and measured is not None else None,
        within_interval=bool(fit.interval_90[0] <= measured <= fit.interval_90[1]) if ok else None)


def _b_simple_prediction(noise: Optional[NoiseScale], budget: int) -> Optional[float]:
    """What B_simple along the same runs would have predicted at D: its power law over the rungs, extrapolated."""
    if noise is None or noise.exponent is None or noise.constant is None:
        return None
    return float(noise.constant * budget ** noise.exponent)


def _beyond_rungs(measured_rungs: list, stop: int, budget: int) -> tuple[list[list[float]], Optional[float]]:
    """B_crit at every evaluation of the smallest batch from the fraction to D, read from the validation's runs as the
    measurement at D is (they go on past the fraction), and the exponent that the growth from the fraction to D
    implies: log(B_crit(D) / B_crit(fraction)) / log(D / fraction). Beside the rungs' power law it shows whether the
    growth the rungs saw continues to D (on the markov language the local exponent falls past the rungs,
    0.72 over them against 0.575 from the fraction to D; Merrill et al. 2025, arXiv 2505.23971, find the critical
    batch rising fast early in training, then flattening)."""
    along = [(r.samples_seen, r.b_crit) for r in measured_rungs if stop <= r.samples_seen <= budget
             and r.b_crit is not None and math.isfinite(r.b_crit) and r.b_crit > 0]
    ends = (along[0], along[-1]) if along and along[0][0] == stop and along[-1][0] == budget and stop < budget else None
    exponent = math.log(ends[1][1] / ends[0][1]) / math.log(budget / stop) if ends else None
    return [[d, b] for d, b in along], exponent


def _validate(full: dict, rungs: list, fit, power_law, rec: RecordedLadderSettings, bootstrap: int, ladder_samples: int,
              simple: Optional[float]) -> PredictionValidation:
    """The prediction against the rung at D of the full runs (each batch until it reached the smallest batch's loss
    at D, or the cap), beside the naive baselines, what B_simple would have predicted (``simple``) and the power
    law's own prediction."""
    budget = rec.budget_samples
    measured_rungs = rung_readings(full, bootstrap=bootstrap, **_reading(rec)) if full else []
    # The measurement's samples: each batch up to where it reached the smallest batch's loss at D (or the cap), not
    # what a run trained on while it waited for that target to be known.
    measurement = samples_trained(full, ladder_cuts(full, reference_stop=budget, cap=rec.run_stop or math.inf)) \
        if full else 0
    at_d = next((r for r in measured_rungs if int(r.samples_seen) == budget), None)
    measured = at_d.b_crit if at_d is not None else None
    beyond, exponent = _beyond_rungs(measured_rungs, rec.stop_samples, budget)
    out: dict[str, Any] = dict(
        measured_b_crit=measured, measured_b_crit_ci=list(at_d.b_crit_ci) if at_d and at_d.b_crit_ci else None,
        measured_overhead_20pct=at_d.overhead_20pct if at_d else None,
        measured_reason=at_d.reason if at_d and measured is None else None,
        measured_censored=list(at_d.censored) if at_d else None, measurement_samples=measurement,
        samples_ratio=ladder_samples / measurement if measurement else None, log2_target=LOG2_TARGET,
        measurement_cap_samples=rec.run_stop or None, b_crit_beyond_rungs=beyond, exponent_beyond_rungs=exponent,
        power_law_prediction=_power_law_beside(power_law, measured))  # the power law's prediction on the same runs
    baselines = {"no_extrapolation": no_extrapolation(rungs),
                 **{f"borrowed_exponent_{g:g}": borrowed_exponent(rungs, budget, g) for g in BORROWED_EXPONENTS},
                 **{f"borrowed_mccandlish_{g:.3g}": borrowed_exponent(rungs, budget, g)
                    for g, _ in LITERATURE_EXPONENTS["mccandlish"].values()}}
    if measured is None or not math.isfinite(measured):
        return PredictionValidation(**out, within_interval=None, log2_error=None,
                                    baselines={k: JudgedBaseline(v, None) for k, v in baselines.items()},
                                    beats_baselines=None, b_simple_prediction=JudgedBaseline(simple, None),
                                    target_met=None)
    errors = {k: JudgedBaseline(v, log2_error(v, measured) if v else None) for k, v in baselines.items()}
    b_simple = JudgedBaseline(simple, log2_error(simple, measured) if simple else None)
    if not fit.b_crit or fit.interval_90 is None:  # the prediction was refused: there is nothing to judge
        return PredictionValidation(**out, within_interval=None, log2_error=None, baselines=errors,
                                    beats_baselines=None, b_simple_prediction=b_simple, target_met=None)
    error = log2_error(fit.b_crit, measured)
    within = fit.interval_90[0] <= measured <= fit.interval_90[1]
    beats = all(e.log2_error is None or error < e.log2_error for e in errors.values())
    return PredictionValidation(**out, within_interval=within, log2_error=error, baselines=errors,
                                beats_baselines=beats, b_simple_prediction=b_simple,
                                target_met=bool(within and error is not None and error <= LOG2_TARGET and beats))
