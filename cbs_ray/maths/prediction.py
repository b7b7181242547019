"""B_crit at the full budget D from the rungs *and* a prior over the exponent, anchored where the rungs pin it best.

The pre-registered validation of the earlier predictor, anchored at the last rung, found it worse than a borrowed
exponent (mean |log2 error| 1.20 against 0.86; 10 of 16 inside its interval:
docs/benchmarks-archive.md#issue-49-validation-full), and most of its misses on rungs read below the smallest batch
trained or flat over the rungs. The rule here, fixed in code from development data only (the ladder's 21 runs on the
markov language and the 16 stored rows of that validation, ``bench/prediction_development.py``):

* **Which rungs** (``screen_rungs``): a rung is used only where its B_crit is finite and positive, it lies at or below
  D, past the warm-up transient (``rungs_from``: the ladder reads rungs from twice the warmup on) and **inside the
  batch grid** (``batch_grid``: between the smallest and the largest batch trained; a B_crit read outside it is the
  tradeoff's extrapolation, not a measurement). The rest are left out, each with its reason (``Prediction.left_out``).
* **The anchor**: the rungs' geometric centroid: log D̄ and log B̄ the (precision-)weighted means of the used rungs'
  log D and log B_crit, where a straight line through them is pinned best (its intercept's error is least there),
  instead of the last rung, which carries one reading's noise and sits at the end of the line.
* **The rungs' exponent**: log B_crit against log D by weighted least squares (weights 1 / sd² of each rung's log
  B_crit; equal weights where a rung carries no sd), its standard error from the fit, scaled up where the rungs scatter
  more than their own errors say (never down), or, without errors, from their scatter.
* **Carried to D with shrinkage** (``posterior``, a normal–normal precision weighting): the rungs' exponent counts with
  its standard error *and* ``TRANSFER_SD``, the spread of the exponent from the rungs' centroid to D about the
  exponent over the rungs beyond their own error (fitted on the development data by a variance decomposition: 0.24), so
  the rungs move the exponent away from the prior only as far as their precision over their span warrants, and never
  further than a growth measured over the rungs has been seen to carry past them.
  γ = (γ̂/SE'² + μ₀/τ₀²) / (1/SE'² + 1/τ₀²), SE'² = SE² + ``TRANSFER_SD``², var = 1 / (1/SE'² + 1/τ₀²).
  ``source``: ``rungs`` where the rungs carry at least ``SOURCE_SHARE`` (90 %) of the precision, ``prior`` where less
  than 10 % or no fit could be made (fewer than 3 rungs), else ``combined``. B̂(D) = B̄ · (D / D̄)^γ.
* **The prior** (``PRIORS``): a normal over the exponent for the definition of the critical batch in use, centred on
  the literature's value(s) for that definition (``LITERATURE_EXPONENTS``), its spread fitted on development data.
* **The literature band** (``Prediction.literature_band``): the same anchor carried with the smallest and the largest
  exponent the literature reports for the definition (0.452–0.68 for McCandlish's), beside every prediction.
* **The 90 % interval** in log B: ±1.645·√(Δ²·var γ + sd_anchor² + sd_D² + (m·Δ)²), Δ = log(D / D̄), sd_anchor the
  rungs' noise (the median of their own sds, floored at ``SD_FLOOR``; or their scatter about the line, or
  ``DEFAULT_RUNG_SD``): the centroid is counted as no better known than one rung, since the rungs are read off the same
  runs and their errors move together; sd_D the same for the measurement at D it is judged against; m =
  ``MODEL_SD_PER_LOG_D``, the inflation fitted on the development draws (never on validation ones).
* **Warnings** (``Prediction.warnings``, one line each): flat or falling rungs (``flat_rungs``: the upper end of the
  rungs' exponent's 90 % interval at most ``FLAT_EXPONENT``, 0.1: on such rungs in the earlier validation
  (docs/benchmarks-archive.md#issue-49-validation) B_crit at D came out 4–18× the last rung and the prediction fell
  short; read the literature band), fewer than 3 rungs in use (the exponent is the prior's), and rungs left out.

Refused only when no rung is left to anchor at, or where the answer leaves the floats' range (wild but finite rungs):
one line saying which.

Sources: McCandlish et al. 2018 (arXiv 1812.06162, B_crit = E_min/S_min); Kaplan et al. 2020 (arXiv 2001.08361, §5.1
and Table 5: B_crit(L) ∝ L^(−1/α_B), α_B ≈ 0.21, L(D) ∝ D^(−α_D), α_D ≈ 0.095); Zhang et al. 2025 (arXiv 2410.21676,
CBS at 20 % overhead ∝ D^≈0.47); Li et al. 2025, Step Law (arXiv 2503.04715, B_opt ∝ D^0.571); Bergsma et al. 2025,
Power Lines (arXiv 2505.13738, B_opt ∝ D^0.383); Gelman et al., Bayesian Data Analysis §2.5 (the normal posterior).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["DEFAULT_RUNG_SD", "DEFINITIONS", "FLAT_EXPONENT", "LITERATURE_EXPONENTS", "MODEL_SD_PER_LOG_D", "PRIORS",
           "SOURCE_SHARE", "TRANSFER_SD", "LeftOut", "Prediction", "Prior", "RungPoint", "fit_log_polynomial",
           "flat_rungs", "literature_range", "posterior", "predict_b_crit", "screen_rungs"]

Z90 = 1.6448536   # two-sided 90 %: the normal's 95th percentile
Z95 = 1.959964
SD_FLOOR = 0.05   # as maths.ladder.SD_FLOOR: no rung's log B_crit is known better than 5 %
LOG_MAX = 700.0   # |log| of any figure reported: past it exp() leaves the floats (e^709 ≈ 8e307)

DEFINITIONS = ("mccandlish", "overhead_20pct", "b_opt")
"""The critical batch's definitions whose exponents are kept apart: McCandlish et al.'s B_crit = E_min / S_min (what
the ladder reads), the largest batch within 20 % of perfect scaling (Zhang et al. 2025's CBS), and the loss-optimal
batch at a fixed budget B_opt (Step Law, Power Lines)."""

LITERATURE_EXPONENTS: dict[str, dict[str, tuple[float, str]]] = {
    "mccandlish": {
        "kaplan_2020": (0.095 / 0.21, "Kaplan et al. 2020 §5.1: B_crit ∝ L^(−1/α_B), α_B = 0.21, with L ∝ D^(−0.095)"),
        "zhang_2025_emin_smin": (0.68, "E_min/S_min on Zhang et al. 2025's released steps-to-target (issue 49)"),
    },
    "overhead_20pct": {
        "zhang_2025": (0.47, "Zhang et al. 2025, arXiv 2410.21676: CBS (20 % overhead) ∝ D^≈0.47"),
        "zhang_2025_released": (0.49, "the same paper's released runs, 20 % overhead (issue 49)"),
    },
    "b_opt": {
        "step_law": (0.571, "Li et al. 2025, Step Law, arXiv 2503.04715: B_opt = 0.58·D^0.571 tokens"),
        "power_lines": (0.383, "Bergsma et al. 2025, Power Lines, arXiv 2505.13738: B_opt ∝ D^0.383"),
    },
}
"""Exponents γ of B ∝ D^γ by definition, with their sources: the borrowed exponents a prediction is compared with, the
prior's centre (their mean) and the literature band (their smallest and largest)."""


def literature_range(definition: str) -> tuple[float, float]:
    """The smallest and the largest exponent the literature reports for ``definition``."""
    values = [v for v, _ in LITERATURE_EXPONENTS[definition].values()]
    return min(values), max(values)


@dataclass(frozen=True)
class Prior:
    """A normal prior over the exponent: ``mean`` (the mean of ``LITERATURE_EXPONENTS[definition]``) and ``sd``."""

    definition: str
    mean: float
    sd: float
    source: str


PRIOR_SD = 0.16
"""The prior's spread, fitted on development data only (``bench/prediction_development.py``): the root mean square of
the growth measured past the rungs (last rung → D) about the prior's centre over the ladder's 21 runs on the markov
language (docs/benchmarks-archive.md#issue-49-development: 0.156); it also spans the literature's disagreement for one
definition (0.45 vs 0.68)."""


def _prior(definition: str) -> Prior:
    values = LITERATURE_EXPONENTS[definition]
    return Prior(definition, float(np.mean([v for v, _ in values.values()])), PRIOR_SD,
                 "mean of " + "; ".join(s for _, s in values.values()) + f"; spread {PRIOR_SD} (development data)")


PRIORS = {d: _prior(d) for d in DEFINITIONS}

TRANSFER_SD = 0.24
"""How far the exponent from the rungs' centroid to D strays from the exponent over the rungs, beyond the rungs' own
standard error: √(mean (γ_late − γ̂)² − mean SE² − mean (2·sd²/Δ²)) over the development draws whose rungs could be
fitted (``bench/prediction_development.py``: the ladder's 21 runs on the markov language and the 16 stored rows of
the earlier predictor's validation, rungs inside the grid [8, 128]; 0.24). Added to the rungs' SE² before the
precision weighting."""

MODEL_SD_PER_LOG_D = 0.04
"""Model error of log B_crit per unit of log D from the centroid to D: the inflation fitted on the development draws
only (the smallest on a 0.02 grid that brings the 90 % interval's coverage over the 35 scored development draws to
≥ 90 %: 0.04, 32 of 35; ``bench/prediction_development.py``), never on validation draws."""

DEFAULT_RUNG_SD = 0.11
"""A rung's (and the measurement at D's) noise in log B_crit where neither its own interval nor the rungs' scatter says:
the seed-to-seed sd of log B_crit(D) measured over the ladder's runs on the markov language (0.113, pooled over 7
groups of 3 seeds)."""

FLAT_EXPONENT = 0.1
"""Rungs are flat or falling (a warning) where the upper end of their exponent's 90 % interval is at most this: the
growth they show is not clearly above 0."""

SOURCE_SHARE = 0.9
"""``source`` is ``rungs`` where their share of the exponent's precision is ≥ this, ``prior`` where it is ≤ 1 − this."""


@dataclass(frozen=True)
class RungPoint:
    """One rung: B_crit read at ``samples``; ``sd`` the sd of its log (None: unknown, read from the rungs' scatter)."""

    samples: float
    b_crit: float
    sd: float | None = None

    @classmethod
    def from_interval(cls, samples: float, b_crit: float, low: float | None, high: float | None,
                      level: float = 0.95) -> RungPoint:
        """The sd of log B_crit from a two-sided interval at ``level`` (0.95 or 0.90), floored at ``SD_FLOOR``; None
        where an end is missing, non-finite or non-positive."""
        z = {0.95: Z95, 0.90: Z90}[level]
        if low is None or high is None or not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
            return cls(float(samples), float(b_crit), None)
        sd = (math.log(high) - math.log(low)) / (2 * z)
        return cls(float(samples), float(b_crit), max(sd, SD_FLOOR) if math.isfinite(sd) else None)

    @property
    def usable(self) -> bool:
        return math.isfinite(self.samples) and self.samples > 0 and math.isfinite(self.b_crit) and self.b_crit > 0


@dataclass(frozen=True)
class LeftOut:
    """A rung shown and left out of the prediction, with why."""

    samples: float
    b_crit: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"samples": _finite(float(self.samples)), "b_crit": _finite(float(self.b_crit)), "reason": self.reason}


def screen_rungs(rungs: Sequence[RungPoint], budget_samples: float, *, batch_grid: tuple[float, float] | None = None,
                 rungs_from: float = 0.0) -> tuple[list[RungPoint], list[LeftOut]]:
    """(the rungs used, sorted by samples; those left out, each with its reason): a rung is used where its B_crit is
    finite and positive, it lies at or below ``budget_samples``, at or past ``rungs_from`` (the warm-up transient ends
    there) and, with ``batch_grid`` (the smallest and the largest batch trained), where its B_crit lies inside it."""
    used, left = [], []
    for r in sorted(rungs, key=lambda r: (r.samples if math.isfinite(r.samples) else math.inf)):
        if not r.usable:
            left.append(LeftOut(r.samples, r.b_crit, "no finite, positive B_crit at a finite, positive samples"))
        elif r.samples > budget_samples:
            left.append(LeftOut(r.samples, r.b_crit, f"past the budget ({budget_samples:g} samples)"))
        elif r.samples < rungs_from:
            left.append(LeftOut(r.samples, r.b_crit,
                                f"inside the warm-up transient (rungs from {rungs_from:g} samples)"))
        elif batch_grid is not None and r.b_crit < batch_grid[0]:
            left.append(LeftOut(r.samples, r.b_crit, f"B_crit {r.b_crit:.3g} below the smallest batch trained "
                                                     f"({batch_grid[0]:g}): read off the grid"))
        elif batch_grid is not None and r.b_crit > batch_grid[1]:
            left.append(LeftOut(r.samples, r.b_crit, f"B_crit {r.b_crit:.3g} above the largest batch trained "
                                                     f"({batch_grid[1]:g}): read off the grid"))
        else:
            used.append(r)
    return used, left


@dataclass(frozen=True)
class Prediction:
    """B_crit at ``budget_samples`` with its 90 % interval, ``source`` (rungs | prior | combined) and the exponent
    carried from the anchor (the rungs' centroid) to D (the posterior's), or ``refusal``. ``interval_parts``: each
    variance term of the interval in log B (``exponent``, ``anchor``, ``at_budget``, ``model``). ``literature_band``:
    the same anchor carried with the literature's smallest and largest exponent for the definition. ``warnings``: one
    line each (flat or falling rungs, too few rungs, rungs left out). ``left_out``: the rungs not used, with why."""

    budget_samples: float
    b_crit: float | None
    interval_90: tuple[float, float] | None
    source: str | None
    exponent: float | None
    exponent_sd: float | None
    form: str | None
    anchor_samples: float | None
    anchor_b_crit: float | None
    rungs_exponent: float | None
    rungs_exponent_se: float | None
    rung_share: float | None
    prior: Prior | None
    refusal: str | None = None
    interval_parts: dict[str, float] = field(default_factory=dict)
    literature_band: tuple[float, float] | None = None
    warnings: list[str] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    rungs_used: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (every float finite or None): ``b_crit``, ``interval_90`` (a list), ``source``, ``exponent``
        first."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["interval_90"] = list(self.interval_90) if self.interval_90 else None
        out["literature_band"] = list(self.literature_band) if self.literature_band else None
        out["left_out"] = [r.to_dict() for r in self.left_out]
        out["warnings"] = list(self.warnings)
        out["prior"] = None if self.prior is None else {"definition": self.prior.definition, "mean": self.prior.mean,
                                                        "sd": self.prior.sd, "source": self.prior.source}
        clean: dict[str, Any] = _finite(out)
        return clean


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (JSON has none)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def posterior(estimate: float | None, se: float | None, prior_mean: float, prior_sd: float
              ) -> tuple[float, float, float]:
    """(mean, sd, the estimate's share of the precision) of the normal posterior of a normal prior N(prior_mean,
    prior_sd²) and one normal measurement ``estimate`` ± ``se`` (Gelman et al., BDA §2.5). No estimate (None, or an
    se that is None, non-finite or ≤ 0 with no estimate) gives the prior; se = 0 gives the estimate."""
    if estimate is None or se is None or not math.isfinite(se) or not math.isfinite(estimate):
        return prior_mean, prior_sd, 0.0
    if se <= 0:
        return estimate, 0.0, 1.0
    w_data, w_prior = 1.0 / se ** 2, 1.0 / prior_sd ** 2
    share = w_data / (w_data + w_prior)
    return share * estimate + (1 - share) * prior_mean, math.sqrt(1.0 / (w_data + w_prior)), share


def fit_log_polynomial(x: np.ndarray, y: np.ndarray, sd: np.ndarray | None, degree: int
                       ) -> tuple[np.ndarray, np.ndarray, float] | None:
    """(coefficients of y = Σ c_k x^k, their covariance, the residual sd) by weighted least squares, weights 1/sd²:
    the covariance (XᵀWX)⁻¹ scaled by max(1, χ²/dof) (never below the points' own errors); with ``sd`` None, ordinary
    least squares with the residual variance RSS/dof. None where the points cannot determine the coefficients (fewer
    distinct x than degree + 1, or a singular design) or, without errors, leave no degree of freedom."""
    n, p = len(x), degree + 1
    if len(np.unique(x)) < p or (sd is None and n <= p):
        return None
    design = np.vander(x, p, increasing=True)
    w = np.ones(n) if sd is None else 1.0 / np.asarray(sd) ** 2
    xtwx = design.T @ (design * w[:, None])
    try:
        cov = np.linalg.inv(xtwx)
    except np.linalg.LinAlgError:
        return None
    coef = cov @ design.T @ (w * y)
    resid = y - design @ coef
    dof = n - p
    scatter = float(math.sqrt(np.sum(resid ** 2) / dof)) if dof > 0 else math.nan
    if sd is None:
        cov = cov * scatter ** 2
    elif dof > 0:
        cov = cov * max(1.0, float(np.sum(w * resid ** 2)) / dof)
    if not (np.all(np.isfinite(coef)) and np.all(np.isfinite(cov))):
        return None
    return coef, cov, scatter


def flat_rungs(estimate: float | None, se: float | None) -> bool:
    """The rungs' exponent not clearly above 0: the upper end of its 90 % interval at most ``FLAT_EXPONENT``."""
    return estimate is not None and se is not None and estimate + Z90 * se <= FLAT_EXPONENT


def _refused(budget_samples: float, prior: Prior, reason: str, left: list[LeftOut], used: int = 0) -> Prediction:
    return Prediction(budget_samples=budget_samples, b_crit=None, interval_90=None, source=None, exponent=None,
                      exponent_sd=None, form=None, anchor_samples=None, anchor_b_crit=None, rungs_exponent=None,
                      rungs_exponent_se=None, rung_share=None, prior=prior, refusal=reason, left_out=left,
                      rungs_used=used)


def _left_out_warning(left: list[LeftOut], given: int) -> list[str]:
    if not left:
        return []
    kinds: dict[str, int] = {}
    for r in left:
        kind = ("off the batch grid" if "grid" in r.reason else "inside the warm-up transient" if "warm-up" in r.reason
                else "past the budget" if "budget" in r.reason else "without a B_crit")
        kinds[kind] = kinds.get(kind, 0) + 1
    return [f"{len(left)} of {given} rung(s) left out ({', '.join(f'{n} {k}' for k, n in kinds.items())}): "
            f"see left_out; a B_crit read off the grid is the tradeoff's extrapolation: widen the batch grid"]


def predict_b_crit(rungs: Sequence[RungPoint], budget_samples: float, *, definition: str = "mccandlish",
                   prior: Prior | None = None, model_sd: float = MODEL_SD_PER_LOG_D, sd_floor: float = SD_FLOOR,
                   batch_grid: tuple[float, float] | None = None, rungs_from: float = 0.0,
                   transfer_sd: float = TRANSFER_SD) -> Prediction:
    """B_crit at ``budget_samples`` from ``rungs`` and the prior for ``definition`` (``PRIORS``; or ``prior``): the
    module docstring's rule. ``batch_grid`` (smallest, largest batch trained) and ``rungs_from`` (the end of the
    warm-up transient, in samples) screen the rungs (``screen_rungs``); ``sd_floor`` floors each rung's given sd (0
    lets a test pass exact rungs); ``transfer_sd`` and ``model_sd`` as ``TRANSFER_SD`` and ``MODEL_SD_PER_LOG_D``."""
    prior = prior or PRIORS[definition]
    used, left = screen_rungs(rungs, budget_samples, batch_grid=batch_grid, rungs_from=rungs_from)
    if not used:
        grid = f" inside the batch grid [{batch_grid[0]:g}, {batch_grid[1]:g}]," if batch_grid else ""
        return _refused(budget_samples, prior, f"no anchor: no rung with a finite, positive B_crit{grid} at or below "
                                               f"{budget_samples:g} samples ({len(rungs)} rung(s) given, "
                                               f"{len(left)} left out)", left)
    x = np.log([r.samples for r in used])
    y = np.log([r.b_crit for r in used])
    given = [r.sd for r in used]
    sd = None if any(s is None for s in given) else np.maximum(np.array(given, dtype=float), sd_floor)
    w = np.ones(len(used)) if sd is None else 1.0 / sd ** 2
    x_bar, y_bar = float(np.sum(w * x) / np.sum(w)), float(np.sum(w * y) / np.sum(w))
    line = fit_log_polynomial(x - x_bar, y, sd, 1) if len(np.unique(x)) >= 3 else None
    estimate = float(line[0][1]) if line else None
    se = float(math.sqrt(line[1][1, 1])) if line else None
    if se is not None and not (math.isfinite(se) and se >= 0):
        estimate, se = None, None
    carried_se = None if se is None else math.sqrt(se ** 2 + transfer_sd ** 2)
    exponent, exponent_sd, share = posterior(estimate, carried_se, prior.mean, prior.sd)
    source = "prior" if share <= 1 - SOURCE_SHARE else "rungs" if share >= SOURCE_SHARE else "combined"
    span = math.log(budget_samples) - x_bar
    scatter = line[2] if line is not None and math.isfinite(line[2]) else None
    noise = float(np.median(sd)) if sd is not None else scatter if scatter is not None else DEFAULT_RUNG_SD
    noise = max(noise, sd_floor)
    parts = {"exponent": (exponent_sd * span) ** 2, "anchor": noise ** 2, "at_budget": noise ** 2,
             "model": (model_sd * span) ** 2}
    log_b = y_bar + exponent * span
    half = Z90 * math.sqrt(sum(parts.values()))
    low_g, high_g = literature_range(prior.definition)
    ends = (log_b - half, log_b + half, y_bar + low_g * span, y_bar + high_g * span, x_bar, y_bar)
    if not all(math.isfinite(v) and abs(v) <= LOG_MAX for v in ends):
        return _refused(budget_samples, prior, f"out of range: carried from the rungs' centroid at "
                                               f"{_exp_text(x_bar)} samples (B_crit {_exp_text(y_bar)}) to "
                                               f"{budget_samples:g} the prediction or its interval leaves the floats' "
                                               f"range; check the rungs' samples and B_crit", left, len(used))
    warnings = _left_out_warning(left, len(rungs))
    if line is None:
        warnings.append(f"fewer than 3 rungs in use ({len(used)}): no growth read from the rungs; the exponent is the "
                        f"prior's {prior.mean:.3g}")
    elif flat_rungs(estimate, se):
        assert estimate is not None and se is not None
        warnings.append(f"flat or falling rungs: B_crit over the {len(used)} rungs in use ({used[0].b_crit:.3g} at "
                        f"{used[0].samples:g} … {used[-1].b_crit:.3g} at {used[-1].samples:g} samples) grows as "
                        f"D^{estimate:.2f} ± {se:.2f}, its 90 % upper end {estimate + Z90 * se:.2f} ≤ {FLAT_EXPONENT}; "
                        f"where B_crit rises only later it can lie far above this prediction (measured: 4–18× "
                        f"the last rung, docs/benchmarks-archive.md#issue-49-validation): read the literature band")
    return Prediction(budget_samples=budget_samples, b_crit=math.exp(log_b),
                      interval_90=(math.exp(log_b - half), math.exp(log_b + half)), source=source, exponent=exponent,
                      exponent_sd=exponent_sd, form="line" if line is not None else None,
                      anchor_samples=math.exp(x_bar), anchor_b_crit=math.exp(y_bar), rungs_exponent=estimate,
                      rungs_exponent_se=se, rung_share=share, prior=prior, interval_parts=parts,
                      literature_band=(math.exp(y_bar + low_g * span), math.exp(y_bar + high_g * span)),
                      warnings=warnings, left_out=left, rungs_used=len(used))


def _exp_text(log_value: float) -> str:
    """e^``log_value`` as text, where it may lie past the floats' range."""
    if not math.isfinite(log_value):
        return str(log_value)
    if abs(log_value) <= LOG_MAX:
        return f"{math.exp(log_value):.4g}"
    return f"1e{log_value / math.log(10):.0f}"
