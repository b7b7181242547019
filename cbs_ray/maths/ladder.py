"""The "ladder" critical-batch predictor: read B_crit at several data sizes from one set of runs, fit how it
grows with data, and extrapolate to the full budget.

Every candidate batch is trained once (per seed) and evaluated on a geometric cadence. Each evaluation point
D_j of the reference (smallest) batch is a rung: its loss there is a target, and the steps every batch needs
to reach it give one steps/samples tradeoff (McCandlish et al. 2018, "An Empirical Model of Large-Batch
Training", S(B) = S_min + E_min / B) and so one B_crit(D_j), with the 20 % overhead rule beside it (Zhang et
al. 2025, "How Does Critical Batch Size Scale in Pre-training?", arXiv 2410.21676). Zhang et al. find the
critical batch grows with data as a power law, B_crit ∝ D^γ; ``fit_ladder`` fits γ over the rungs and
predicts B_crit at the budget, or refuses and says why. ``no_extrapolation`` and ``borrowed_exponent`` are
the baselines it has to beat; ``closed_form_laws`` gives published laws for reference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from cbs_ray.maths.lr_schedule import lr_weighted_steps
from cbs_ray.maths.tradeoff import fit_tradeoff, overhead_rule, samples_to_target

__all__ = ["BORROWED_EXPONENTS", "CURVE_MODELS", "POOR_FIT_P", "SD_FLOOR", "Curves", "LadderFit", "LossCurve", "Rung",
           "batch_resamples", "borrowed_exponent", "chi2_sf", "closed_form_laws", "fit_ladder", "fit_loss_curve",
           "fit_power_law", "log2_error", "no_extrapolation", "power_law_chi2", "power_law_exponent_se",
           "recommend_batch", "rung_readings", "rung_resamples", "rung_usable", "rung_weight", "samples_to_loglog",
           "seed_mean"]

Curves = dict[int, list[list[tuple[float, float]]]]  # batch -> over seeds: [(samples_seen, eval_loss), ...]

SD_FLOOR = 0.05    # a rung's sd of log B_crit is at least this (5 %): a near-zero CI would get infinite weight
POOR_FIT_P = 0.01  # refuse when the weighted chi-square's p-value is below this
Z95 = 1.959964

# Exponents of B ∝ D^γ from the literature, tried as the baseline "borrowed exponent":
BORROWED_EXPONENTS = (
    0.383,  # Power Lines (Bergsma et al. 2025, arXiv 2505.13738): B_opt ∝ D^0.383
    0.47,   # Zhang et al. 2025 (arXiv 2410.21676): critical batch ∝ D^~0.47
    0.571,  # Step Law (Li et al. 2025, arXiv 2503.04715): B_opt = 0.58 · D^0.571 tokens
)


@dataclass(frozen=True)
class Rung:
    """One rung: the reference batch's seed-mean loss at ``samples_seen`` is the target; ``steps_by_batch``
    maps every batch to its optimizer steps to reach it (NaN if never reached within its run, or ``censored``).
    ``b_crit`` / ``b_crit_ci``
    (95 %) / ``reason`` come from ``fit_tradeoff``, ``overhead_20pct`` from ``overhead_rule``."""

    samples_seen: float
    target_loss: float
    steps_by_batch: dict[int, float]
    b_crit: float | None
    b_crit_ci: tuple[float, float] | None
    overhead_20pct: int | None
    reason: str | None
    censored: tuple[int, ...] = ()
    """The batches already below the target at their first evaluation: left-censored, a bound on their samples
    (at most that evaluation's), never a crossing, so left out of the rung's fit (their steps are NaN)."""


def seed_mean(seeds: Sequence[Sequence[tuple[float, float]]]) -> tuple[list[float], list[float]]:
    """Mean loss across seeds at the samples points every seed reported (exact equality); a NaN in any seed
    makes that point's mean NaN."""
    by_seed = [{float(s): float(loss) for s, loss in seed} for seed in seeds]
    shared = sorted(set.intersection(*(set(d) for d in by_seed))) if by_seed else []
    return shared, [float(np.mean([d[s] for d in by_seed])) for s in shared]


def _samples_to_target_loglog(samples: Sequence[float], losses: Sequence[float], target: float) -> float:
    """See ``samples_to_loglog``: NaN for a curve already at or below ``target`` at its first evaluation."""
    return samples_to_loglog(samples, losses, target)[0]


def samples_to_loglog(samples: Sequence[float], losses: Sequence[float], target: float) -> tuple[float, bool]:
    """``samples_to_target`` with the interpolation between two evaluations made in log samples and log loss:
    exact where the curve is a power law between them (a geometric cadence leaves a factor of 2 between
    evaluations, over which a straight line in samples overstates the loss of a convex curve and so the samples
    a batch needs). Losses must be positive (a cross-entropy is); a non-positive one counts as missing.
    Returns (samples, censored): a curve already at or below the target at its first evaluation is left-censored,
    (NaN, True): it needed at most that evaluation's samples, a bound, never a crossing."""
    pairs = [(math.log(s), math.log(v)) if s > 0 and v > 0 and math.isfinite(v) else (math.log(s), math.nan)
             for s, v in zip(samples, losses) if s > 0]
    if not pairs or not target > 0:
        return math.nan, False
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    found = samples_to_target(xs, ys, math.log(target), mode="min", censor_first=True)
    if math.isfinite(found):
        return math.exp(found), False
    first = next((y for _, y in sorted(zip(xs, ys)) if math.isfinite(y)), math.nan)
    return math.nan, bool(first <= math.log(target))


CURVE_MODELS = ("fit", "interpolate")
"""How ``rung_readings`` reads a batch's samples to a target loss: ``fit`` from a curve L∞ + a·s^−p fitted to
every seed's evaluations (``fit_loss_curve``), ``interpolate`` between the seed-mean's evaluations."""

_EXPONENT_GRID = np.exp(np.linspace(math.log(0.02), math.log(4.0), 240))


@dataclass(frozen=True)
class LossCurve:
    """L(s) = ``floor`` + ``scale`` · s^−``exponent`` (s in samples), fitted over [``first``, ``last``] samples:
    the data-scaling form of Kaplan et al. 2020 (L(D) = L∞ + (D_c / D)^α) for one batch's learning curve."""

    floor: float
    scale: float
    exponent: float
    first: float
    last: float

    def loss(self, samples: float) -> float:
        return self.floor + self.scale * float(samples ** -self.exponent)

    def samples_to(self, target: float) -> float:
        """Samples at which the curve reaches ``target``: NaN if it is already at or below it at the first fitted
        point (left-censored: a bound, never a crossing; ``censored``) or not by the last (nothing is
        extrapolated past the run)."""
        if self.censored(target):
            return math.nan
        if self.scale <= 0 or target <= self.floor:
            return math.nan
        found = (self.scale / (target - self.floor)) ** (1.0 / self.exponent)
        return float(found) if found <= self.last * (1 + 1e-9) else math.nan

    def censored(self, target: float) -> bool:
        """Already at or below ``target`` at the first fitted point."""
        return self.loss(self.first) <= target


def fit_loss_curve(points: Sequence[tuple[float, float]]) -> LossCurve | None:
    """Least squares of L = floor + scale · s^−exponent over ``points`` (samples, loss), every seed's pooled:
    for each exponent on a log grid over [0.02, 4] the linear fit of (floor, scale), the exponent with the least
    squared error kept. A curve that does not fall (the best scale ≤ 0) is fitted as its mean, flat. None with
    fewer than 3 distinct samples points or no finite loss; non-finite losses (a diverged run) are dropped."""
    pts = [(float(x), float(y)) for x, y in points if x > 0 and math.isfinite(y)]
    xs = np.array([x for x, _ in pts])
    ys = np.array([y for _, y in pts])
    if len(np.unique(xs)) < 3:
        return None
    first, last = float(xs.min()), float(xs.max())
    best = (float(np.sum((ys - ys.mean()) ** 2)), float(ys.mean()), 0.0, 1.0)  # flat
    scaled = xs / first  # s^−p evaluated as (s/first)^−p · first^−p: keeps the design well conditioned
    for p in _EXPONENT_GRID:
        design = np.stack([np.ones_like(xs), scaled ** -p], axis=1)
        (floor, scale), *_ = np.linalg.lstsq(design, ys, rcond=None)
        if scale <= 0:
            continue
        sse = float(np.sum((ys - design @ (floor, scale)) ** 2))
        if sse < best[0]:
            best = (sse, float(floor), float(scale) * first ** p, float(p))
    _, floor, scale, exponent = best
    return LossCurve(floor, scale, exponent, first, last)


def _samples_to(curve: LossCurve | None, means: tuple[list[float], list[float]], target: float, model: str
                ) -> tuple[float, bool]:
    """(samples to ``target``, left-censored) by ``model``."""
    if model == "interpolate":
        return samples_to_loglog(*means, target)
    if curve is None:
        return math.nan, False
    return curve.samples_to(target), curve.censored(target)


def rung_readings(curves: Curves, *, reference_batch: int | None = None, bootstrap: int = 1000,
                  seed: int = 0, curve_model: str = "interpolate", fit_from: float = 0.0,
                  warmup_steps: dict[int, int] | None = None) -> list[Rung]:
    """One ``Rung`` per evaluation point of the reference batch (default: the smallest).

    ``curves`` maps batch size → list over seeds of learning curves, each a list of (samples_seen,
    eval_loss); lower loss is better. A batch's samples to a rung's target, by ``curve_model``:

    * ``"interpolate"``: on its seed-mean curve (``seed_mean``), interpolated in log–log between evaluations
      (``_samples_to_target_loglog``); the target is the reference's seed-mean loss at the rung;
    * ``"fit"``: on the curve ``fit_loss_curve`` fits to every seed's evaluations from ``fit_from`` samples on
      (``LossCurve.samples_to``); the target is the reference's *fitted* loss at the rung, so that one noisy
      evaluation moves neither the target nor a batch's crossing by itself. The rungs are the reference's
      evaluations from ``fit_from`` on.

    S(B) = samples / B; with ``warmup_steps`` (batch → its linear warmup's steps) S(B) counts the steps by their LR
    instead (``maths.lr_schedule.lr_weighted_steps``: a warmup of W steps is worth about W/2 at the peak), so that
    batches whose warmups differ in steps are compared on the same footing. The reference's own samples are the
    rung's, by definition. Either way a batch already
    below the target at its first evaluation is left-censored: its samples are a bound (at most that
    evaluation's), never a crossing, so it is left out of the rung's fit and named in ``Rung.censored``; a batch
    that does not reach a rung's target within its run (right-censored) is left out too (NaN).
    ``bootstrap``/``seed`` go to ``fit_tradeoff``; with only 3 batch sizes it has too few resamples with 3
    distinct ones for an interval, so such a rung cannot be weighted by ``fit_ladder``: measure at least 4."""
    if not curves:
        raise ValueError("no curves")
    if curve_model not in CURVE_MODELS:
        raise ValueError(f"curve_model must be one of {CURVE_MODELS}, got {curve_model!r}")
    ref = min(curves) if reference_batch is None else reference_batch
    means = {b: seed_mean(seeds) for b, seeds in curves.items()}
    fitted = {b: fit_loss_curve([pt for run in seeds for pt in run if pt[0] >= fit_from])
              for b, seeds in curves.items()} if curve_model == "fit" else {}
    batches = sorted(means)
    rungs = []
    for d, target in zip(*means[ref]):
        if curve_model == "fit":
            reference = fitted[ref]
            if d < fit_from or reference is None:
                continue
            target = reference.loss(d)
        if math.isnan(target):
            continue
        found = {b: (d, False) if b == ref else _samples_to(fitted.get(b), means[b], target, curve_model)
                 for b in batches}
        steps = {b: _steps(samples, b, warmup_steps) for b, (samples, _) in found.items()}
        fit = fit_tradeoff(batches, [steps[b] for b in batches], bootstrap=bootstrap, seed=seed)
        rungs.append(Rung(d, target, steps, fit.b_crit, fit.ci, overhead_rule(batches, [steps[b] for b in batches]),
                          fit.reason, censored=tuple(b for b, (_, c) in found.items() if c)))
    return rungs


def _steps(samples: float, batch: int, warmup_steps: dict[int, int] | None) -> float:
    """A batch's optimizer steps to ``samples``, counted by their LR where ``warmup_steps`` gives its warmup."""
    if warmup_steps is None or not math.isfinite(samples):
        return samples / batch
    return lr_weighted_steps(samples / batch, int(warmup_steps.get(batch, 0)))


def fit_power_law(x_given: ArrayLike, y_given: ArrayLike, weights: ArrayLike | None = None) -> tuple[float, float]:
    """(constant, exponent) of y = constant · x^exponent by least squares of log y on log x, each point's
    squared residual times its weight (1 / variance of log y; default all 1). Points with a non-positive or
    non-finite x, y or weight are dropped; needs two distinct x."""
    x, y = np.asarray(x_given, dtype=float), np.asarray(y_given, dtype=float)
    w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y) & np.isfinite(w) & (x > 0) & (y > 0) & (w > 0)
    x, y, w = x[keep], y[keep], w[keep]
    if len(np.unique(x)) < 2:
        raise ValueError(f"needs two distinct x with positive finite values, got {len(np.unique(x))}")
    root = np.sqrt(w)
    design = np.stack([np.ones_like(x), np.log(x)], axis=1) * root[:, None]
    (log_c, exponent), *_ = np.linalg.lstsq(design, np.log(y) * root, rcond=None)
    return float(math.exp(log_c)), float(exponent)


def power_law_exponent_se(x_given: ArrayLike, y_given: ArrayLike, weights: ArrayLike) -> float:
    """The standard error of ``fit_power_law``'s exponent with ``weights`` = 1 / variance of log y: the weighted
    least-squares covariance (XᵀWX)⁻¹'s slope entry, scaled up by √(χ²/(n − 2)) where the points scatter more
    than their own errors say (never down). Points as ``fit_power_law`` keeps them; NaN with fewer than 3."""
    x, y, w = (np.asarray(v, dtype=float) for v in (x_given, y_given, weights))
    keep = np.isfinite(x) & np.isfinite(y) & np.isfinite(w) & (x > 0) & (y > 0) & (w > 0)
    x, y, w = np.log(x[keep]), np.log(y[keep]), w[keep]
    if len(np.unique(x)) < 3:
        return math.nan
    design = np.stack([np.ones_like(x), x], axis=1)
    cov = np.linalg.inv(design.T @ (design * w[:, None]))
    coef = cov @ design.T @ (w * y)
    chi2 = float(np.sum(w * (y - design @ coef) ** 2))
    return float(math.sqrt(cov[1, 1]) * max(1.0, math.sqrt(chi2 / (len(x) - 2))))


def power_law_chi2(x_given: ArrayLike, y_given: ArrayLike, weights: ArrayLike, constant: float,
                   exponent: float) -> float:
    """Σ weight · (log y − log constant − exponent · log x)²: the weighted χ² of ``fit_power_law``'s fit (all points
    as given; the callers pass only usable ones)."""
    x, y, w = (np.asarray(v, dtype=float) for v in (x_given, y_given, weights))
    return float(np.sum(w * (np.log(y) - math.log(constant) - exponent * np.log(x)) ** 2))


def chi2_sf(x: float, dof: int) -> float:
    """P(χ²_dof > x) for an integer dof ≥ 1, closed form (regularised upper incomplete gamma Q(dof/2, x/2))."""
    y = x / 2.0
    if dof % 2 == 0:
        return min(1.0, sum(math.exp(i * math.log(y) - y - math.lgamma(i + 1)) if y > 0 else float(i == 0)
                            for i in range(dof // 2)))
    tail = sum(math.exp((i - 0.5) * math.log(y) - y - math.lgamma(i + 0.5)) for i in range(1, (dof + 1) // 2)) \
        if y > 0 else 0.0
    return min(1.0, math.erfc(math.sqrt(y)) + tail)


@dataclass(frozen=True)
class LadderFit:
    """B_crit = ``constant`` · D^``exponent`` over the rungs in ``rungs_used`` (their samples_seen).
    ``b_crit`` is the prediction at ``budget_samples`` with its bootstrap 90 % ``interval_90``; both are
    None when ``refusal`` says why not (the fit itself is still reported where it was made).
    ``fit_p_value``: the weighted chi-square test of the fit. ``overhead_*``: the same power law fitted,
    unweighted, to the rungs' 20 %-rule batches and its prediction (None with fewer than 3 of them);
    those are powers of two capped at the largest batch measured, so the fit flattens once they saturate."""

    budget_samples: float
    exponent: float | None
    exponent_ci: tuple[float, float] | None
    constant: float | None
    b_crit: float | None
    interval_90: tuple[float, float] | None
    rungs_used: tuple[float, ...]
    refusal: str | None
    fit_p_value: float | None = None
    overhead_constant: float | None = None
    overhead_exponent: float | None = None
    overhead_20pct: float | None = None
    exponent_se: float | None = None
    """The exponent's standard error (``power_law_exponent_se``: the weighted fit's, never below what the rungs'
    scatter about the line says)."""


def rung_usable(rung: Rung) -> bool:
    """A finite, positive B_crit with a 95 % interval whose ends are both finite and positive (``fit_ladder``)."""
    ci = rung.b_crit_ci
    return (rung.b_crit is not None and math.isfinite(rung.b_crit) and rung.b_crit > 0 and ci is not None
            and all(v is not None and math.isfinite(v) and v > 0 for v in ci))


def fit_ladder(rungs: Sequence[Rung], *, budget_samples: float, bootstrap: int = 1000, seed: int = 0
               ) -> LadderFit:
    """Fit log B_crit = log constant + exponent · log D by weighted least squares over the rungs and predict
    B_crit at ``budget_samples``.

    Rungs used: a finite, positive B_crit with a 95 % interval whose ends are both finite and positive; a
    rung with no interval or an unbounded end (∞, or 0 from resamples with no tradeoff) gets no weight and
    is excluded. Weight = 1 / sd², sd = (log hi − log lo) / (2 · 1.96), floored at ``SD_FLOOR``.

    Bootstrap (``bootstrap`` usable resamples, at most 50× that many draws): where every used rung carries its
    batches' steps (``rung_readings``' rungs do), resample the batches, the same at every rung, and refit every rung
    and the power law (``rung_resamples``): the rungs are read off the same runs, so their errors are not
    independent. Otherwise (hand-built rungs) resample the rungs with replacement (skipping resamples with fewer
    than 3 distinct rungs) AND draw each picked rung's log B_crit from a normal about its own with its own sd;
    this counts the rungs' noise about twice over, so the intervals err wide. Either way refit, record the
    exponent and the prediction at the budget; both intervals are the 5th/95th percentiles.

    Refusals, checked in this order (b_crit None and ``refusal`` says which):
      * fewer than 3 usable rungs;
      * poor fit: χ² = Σ weight · residual², p-value P(χ²_{n−2} > χ²) < ``POOR_FIT_P`` (0.01) under the
        rungs' own errors — B_crit does not follow one power law in D;
      * no bootstrap resamples;
      * the exponent's 90 % interval includes 0: B_crit does not measurably grow with data;
      * the exponent's 90 % interval lies below 0: B_crit falls with data, and a falling power law
        extrapolated to the budget is no prediction (it once said B_crit 0.9 where 331 was measured).
    """
    overhead = [(r.samples_seen, r.overhead_20pct) for r in rungs if r.overhead_20pct is not None]
    extra = {}
    if len({d for d, _ in overhead}) >= 3:
        oc, oe = fit_power_law([d for d, _ in overhead], [b for _, b in overhead])
        extra = {"overhead_constant": oc, "overhead_exponent": oe, "overhead_20pct": oc * budget_samples ** oe}
    used = [r for r in rungs if rung_usable(r)]
    finite = sum(r.b_crit is not None and math.isfinite(r.b_crit) for r in rungs)
    d_used = tuple(r.samples_seen for r in used)
    if len({r.samples_seen for r in used}) < 3:
        return LadderFit(budget_samples, None, None, None, None, None, d_used,
                         f"needs at least 3 rungs with a finite B_crit and a finite interval, got {len(used)} "
                         f"({finite} with a finite B_crit)", **extra)
    d = np.array(d_used, dtype=float)
    log_b = np.log(np.array([r.b_crit for r in used], dtype=float))
    by_d = {r.samples_seen: r for r in used}
    w = np.array([rung_weight(r) for r in used])
    constant, exponent = fit_power_law(d, np.exp(log_b), w)
    chi2 = power_law_chi2(d, np.array([r.b_crit for r in used], dtype=float), w, constant, exponent)
    p = chi2_sf(chi2, len(used) - 2)
    se = power_law_exponent_se(d, np.exp(log_b), w)
    base = dict(budget_samples=budget_samples, constant=constant, exponent=exponent, rungs_used=d_used,
                fit_p_value=p, exponent_se=se if math.isfinite(se) else None, **extra)
    if p < POOR_FIT_P:
        return LadderFit(exponent_ci=None, b_crit=None, interval_90=None, refusal=f"poor fit: B_crit does not "
                         f"follow one power law in D (weighted chi-square {chi2:.1f} on {len(used) - 2} degrees "
                         f"of freedom, p = {p:.2g} < {POOR_FIT_P})", **base)
    resamples = rung_resamples(used, bootstrap, np.random.default_rng(seed))
    fits = [fit_power_law([x for x, _ in r], [b for _, b in r], [rung_weight(by_d[x]) for x, _ in r])
            for r in resamples]
    exps, preds = [e_i for _, e_i in fits], [c_i * budget_samples ** e_i for c_i, e_i in fits]
    if not exps:
        return LadderFit(exponent_ci=None, b_crit=None, interval_90=None,
                         refusal="no bootstrap resamples: no interval to predict with", **base)
    exponent_ci = (float(np.percentile(exps, 5)), float(np.percentile(exps, 95)))
    if exponent_ci[0] <= 0 <= exponent_ci[1]:
        return LadderFit(exponent_ci=exponent_ci, b_crit=None, interval_90=None, refusal=f"B_crit does not "
                         f"measurably grow with data over the rungs: the exponent's 90 % interval "
                         f"[{exponent_ci[0]:.3g}, {exponent_ci[1]:.3g}] includes 0", **base)
    if exponent_ci[1] < 0:
        return LadderFit(exponent_ci=exponent_ci, b_crit=None, interval_90=None, refusal=f"B_crit falls with data "
                         f"over the rungs (exponent {exponent:.3g}, "
                         f"90 % [{exponent_ci[0]:.3g}, {exponent_ci[1]:.3g}]): the runs are past the regime where the "
                         f"critical batch grows (a saturating loss, or an LR too large for the larger batches); a "
                         f"falling power law is not extrapolated", **base)
    interval = (float(np.percentile(preds, 5)), float(np.percentile(preds, 95)))
    return LadderFit(exponent_ci=exponent_ci, b_crit=constant * budget_samples ** exponent, interval_90=interval,
                     refusal=None, **base)


def rung_weight(rung: Rung) -> float:
    """A usable rung's weight in ``fit_ladder``: 1 / sd², sd = (log hi − log lo) / (2 · 1.96) of its 95 % interval,
    floored at ``SD_FLOOR``."""
    return 1.0 / _rung_sd(rung) ** 2


def _rung_sd(rung: Rung) -> float:
    assert rung.b_crit_ci is not None  # a usable rung's (rung_usable)
    lo, hi = rung.b_crit_ci
    return max((math.log(hi) - math.log(lo)) / (2 * Z95), SD_FLOOR)


def rung_resamples(rungs: Sequence[Rung], bootstrap: int, rng: np.random.Generator) -> list[list[tuple[float, float]]]:
    """``fit_ladder``'s resamples of the (usable) rungs, each a list of (samples_seen, B_crit) to refit a law through;
    ``bootstrap`` of them at most (from at most 50× that many draws), the same list for the same ``rng`` state.

    Where every rung carries at least 3 batches' steps (``rung_readings``' rungs do): resample the **batches**
    (``batch_resamples``). Otherwise, or where that gives none (hand-built rungs): resample the rungs with replacement
    (skipping draws with fewer than 3 distinct rungs) AND draw each picked rung's log B_crit from a normal about its own
    with its own sd (``rung_weight``'s); this counts the rungs' noise about twice over, so the intervals err wide."""
    joint = all(sum(map(math.isfinite, r.steps_by_batch.values())) >= 3 for r in rungs)
    out = batch_resamples(rungs, bootstrap, rng) if joint else []
    d = np.array([r.samples_seen for r in rungs], dtype=float)
    log_b = np.log(np.array([r.b_crit for r in rungs], dtype=float))
    sd = np.array([_rung_sd(r) for r in rungs])
    for _ in range(50 * bootstrap if not out else 0):
        if len(out) >= bootstrap:
            break
        pick = rng.integers(0, len(rungs), len(rungs))
        if len(np.unique(pick)) < 3:
            continue
        out.append(list(zip(d[pick].tolist(), np.exp(log_b[pick] + rng.normal(0.0, sd[pick])).tolist())))
    return out


def batch_resamples(rungs: Sequence[Rung], bootstrap: int, rng: np.random.Generator
                    ) -> list[list[tuple[float, float]]]:
    """Resamples of the **batches** (with replacement, the same resample at every rung, at least 3 distinct): every
    rung's B_crit refitted from the picked batches' steps (``fit_tradeoff``, no bootstrap of its own) and drawn about
    it with ``SD_FLOOR`` (the floor every rung's error has: resampled batches alone say nothing of the reading's own
    bias); each resample the rungs with a finite B_crit, as (samples_seen, B_crit), kept where there are at least 3.
    The rungs are read off the same runs, so their errors move together: drawing each rung's error independently
    (the fallback where the rungs carry no steps) counts one run's noise once per rung and makes the exponent's
    interval far too wide (on the markov language χ² p = 1, SE 0.25: docs/benchmarks-archive.md#issue-36)."""
    batches = np.array(sorted({b for r in rungs for b in r.steps_by_batch}))
    out: list[list[tuple[float, float]]] = []
    for _ in range(50 * bootstrap):
        if len(out) >= bootstrap:
            break
        pick = rng.choice(batches, len(batches))
        if len(np.unique(pick)) < 3:
            continue
        points = []
        for r in rungs:
            b_crit = fit_tradeoff(pick, [r.steps_by_batch.get(int(b), math.nan) for b in pick], bootstrap=0).b_crit
            if b_crit is not None and math.isfinite(b_crit) and b_crit > 0:
                # no rung better than SD_FLOOR
                points.append((r.samples_seen, b_crit * math.exp(rng.normal(0.0, SD_FLOOR))))
        if len({x for x, _ in points}) >= 3:
            out.append(points)
    return out


def recommend_batch(interval_low: float) -> int:
    """Largest power of two ≤ ``interval_low`` (the low end of the predicted interval), at least 1."""
    if not math.isfinite(interval_low):
        raise ValueError(f"interval_low must be finite, got {interval_low}")
    if interval_low < 2:
        return 1
    _, exp = math.frexp(interval_low)   # interval_low = m · 2^exp, 0.5 ≤ m < 1: exact for powers of two
    return 1 << (exp - 1)


def _last_finite(rungs: Sequence[Rung]) -> Rung | None:
    finite = [r for r in rungs if r.b_crit is not None and math.isfinite(r.b_crit)]
    return max(finite, key=lambda r: r.samples_seen) if finite else None


def no_extrapolation(rungs: Sequence[Rung]) -> float | None:
    """Baseline: the B_crit of the largest rung (most samples seen) with a finite B_crit; None if none."""
    last = _last_finite(rungs)
    return None if last is None else last.b_crit


def borrowed_exponent(rungs: Sequence[Rung], budget_samples: float, gamma: float) -> float | None:
    """Baseline: ``no_extrapolation``'s B_crit × (budget_samples / that rung's samples_seen)^gamma, with an
    exponent taken from the literature (``BORROWED_EXPONENTS``); None if no rung has a finite B_crit."""
    last = _last_finite(rungs)
    return None if last is None else last.b_crit * (budget_samples / last.samples_seen) ** gamma


def log2_error(predicted: float, measured: float) -> float:
    """|log2(predicted / measured)|: 1.0 is a factor of two either way."""
    return abs(math.log2(predicted / measured))


def closed_form_laws(budget_tokens: float, *, compute_flops: float | None = None) -> dict[str, float]:
    """Published optimal-batch laws, in tokens per batch (divide by the sequence length for samples).

      * ``"step_law"``: Step Law (Li et al. 2025, arXiv 2503.04715), B_opt = 0.58 · D^0.571, D the training
        tokens.
      * ``"deepseek_llm"`` (only when ``compute_flops`` is given): DeepSeek LLM (arXiv 2401.02954),
        B_opt = 0.292 · C^0.3271, C the training compute in FLOPs.

    Caveat: both were fitted on models and budgets far larger than a tiny model's (hundreds of millions of
    parameters and up, ~1e17 FLOPs and up); at small scale they are extrapolations, a reference, not a
    measurement."""
    laws = {"step_law": 0.58 * budget_tokens ** 0.571}
    if compute_flops is not None:
        laws["deepseek_llm"] = 0.292 * compute_flops ** 0.3271
    return laws
