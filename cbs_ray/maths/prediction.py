"""B_crit at the full budget D from the rungs *and* a prior over the exponent: never worse than the prior.

The ladder's power law (``maths.ladder.fit_ladder``) refuses where its rungs say little and extrapolates from the fit's
intercept; issue 49 found it no better than an anchor measurement times a literature exponent. Here:

* **The rungs' exponent.** log B_crit against x = log(D_j / D_anchor) by weighted least squares (weights 1 / sd² of
  each rung's log B_crit; equal weights where no rung carries an sd), as a straight line or, where the rule below
  picks it, a **bending** form, a quadratic in x: its local exponent b1 + 2·b2·x changes linearly in log D. The
  exponent carried to D is the mean local exponent from the anchor to D (b1 + b2·Δ, Δ = log(D / D_anchor)); its
  standard error from the fit's covariance, scaled up where the rungs scatter more than their own errors say
  (never down), or, without errors, from their scatter (ordinary least squares).
* **The form, by a rule fixed here** (``BEND_Z``, ``BEND_MIN_RUNGS``): the bending form where there are at least 5
  rungs and the curvature b2 lies more than 2 standard errors *below* 0 (concave: a local exponent that falls, as
  Merrill et al. 2025, arXiv 2505.23971, and issue 36 found past the rungs); else the line. A convex bend is not
  extrapolated: on the development runs it came from the first rungs' flat start near the warmup and, carried to D,
  doubled the error (mean |log2 error| 0.59 against 0.28 with the concave rule;
  docs/benchmarks-archive.md#issue-49-development).
* **The prior** (``PRIORS``): a normal over the exponent for the definition of the critical batch in use, centred on
  the literature's value(s) for that definition (``LITERATURE_EXPONENTS``), with a spread fitted on development
  data only (``bench/prediction_development.py``;
  docs/benchmarks-archive.md#issue-49-development).
* **The posterior** (normal–normal, precision weighting: ``posterior``): γ = (γ̂/SE² + μ₀/τ₀²) / (1/SE² + 1/τ₀²),
  var = 1 / (1/SE² + 1/τ₀²). ``source``: ``rungs`` where the rungs carry at least ``SOURCE_SHARE`` (90 %) of the
  precision, ``prior`` where they carry less than 10 % or no fit could be made (fewer than 3 rungs), else ``combined``.
* **The anchor**: the rung nearest D at or below it (the last rung, in a ladder), its *measured* B_crit, not the fit's
  intercept: B̂(D) = B_anchor · (D / D_anchor)^γ.
* **The 90 % interval** in log B: ±1.645·√(Δ²·var γ + sd_anchor² + sd_D² + s² + (m·Δ)² + form²) where sd_anchor is the
  anchor's measurement noise (its own interval's, floored at ``maths.ladder.SD_FLOOR``; or the rungs' scatter, or
  ``DEFAULT_RUNG_SD``), sd_D the same for the measurement at D it will be judged against, s the rungs' scatter about
  the chosen form (seed-to-seed noise; ``DEFAULT_RUNG_SD`` where it cannot be read), m = ``MODEL_SD_PER_LOG_D`` the
  model error per unit of log D extrapolated (an inflation fitted on the development data), and ``form`` the spread of
  the candidate forms (half the gap between the line's and the bending form's predictions).

Refused only when not even an anchor was measured (no rung with a finite, positive B_crit at or below D).

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

__all__ = ["BEND_MIN_RUNGS", "BEND_Z", "DEFAULT_RUNG_SD", "DEFINITIONS", "LITERATURE_EXPONENTS", "MODEL_SD_PER_LOG_D",
           "PRIORS", "SOURCE_SHARE", "Prediction", "Prior", "RungPoint", "fit_log_polynomial", "posterior",
           "predict_b_crit"]

Z90 = 1.6448536   # two-sided 90 %: the normal's 95th percentile
Z95 = 1.959964
SD_FLOOR = 0.05   # as maths.ladder.SD_FLOOR: no rung's log B_crit is known better than 5 %

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
"""Exponents γ of B ∝ D^γ by definition, with their sources: the borrowed exponents a prediction is compared with, and
the prior's centre (their mean)."""


@dataclass(frozen=True)
class Prior:
    """A normal prior over the exponent: ``mean`` (the mean of ``LITERATURE_EXPONENTS[definition]``) and ``sd``."""

    definition: str
    mean: float
    sd: float
    source: str


PRIOR_SD = 0.16
"""The prior's spread, fitted on development data only (``bench/prediction_development.py``): the root mean square of
the growth measured past the rungs (last rung → D) about the prior's centre over the 21 markov runs of issue 36
(docs/benchmarks-archive.md#issue-49-development: 0.156); it also spans the literature's disagreement for one
definition (0.45 vs 0.68)."""


def _prior(definition: str) -> Prior:
    values = LITERATURE_EXPONENTS[definition]
    return Prior(definition, float(np.mean([v for v, _ in values.values()])), PRIOR_SD,
                 "mean of " + "; ".join(s for _, s in values.values()) + f"; spread {PRIOR_SD} (development data)")


PRIORS = {d: _prior(d) for d in DEFINITIONS}

MODEL_SD_PER_LOG_D = 0.06
"""Model error of log B_crit per unit of log D extrapolated past the anchor: the inflation fitted on the development
data (the smallest that brings the 90 % interval's coverage there to ≥ 90 %; ``bench/prediction_development.py``)."""

DEFAULT_RUNG_SD = 0.11
"""A rung's (and the measurement at D's) noise in log B_crit where neither its own interval nor the rungs' scatter says:
the seed-to-seed sd of log B_crit(D) measured over the markov runs of issue 36 (0.113, pooled over 7 groups of 3
seeds)."""

BEND_MIN_RUNGS = 5
BEND_Z = 2.0
"""The bending form is chosen where at least ``BEND_MIN_RUNGS`` rungs were read and its curvature lies more than
``BEND_Z`` standard errors below 0 (concave): fixed here, not per task."""

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
        return cls(float(samples), float(b_crit), max((math.log(high) - math.log(low)) / (2 * z), SD_FLOOR))

    @property
    def usable(self) -> bool:
        return math.isfinite(self.samples) and self.samples > 0 and math.isfinite(self.b_crit) and self.b_crit > 0


@dataclass(frozen=True)
class Prediction:
    """B_crit at ``budget_samples`` with its 90 % interval, ``source`` (rungs | prior | combined) and the exponent
    carried from the anchor to D (the posterior's), or ``refusal``. ``interval_parts``: each variance term of the
    interval in log B (``exponent``, ``anchor``, ``at_budget``, ``scatter``, ``model``, ``form``)."""

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
    curvature: float | None
    curvature_se: float | None
    rung_share: float | None
    prior: Prior | None
    refusal: str | None = None
    interval_parts: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``b_crit``, ``interval_90`` (a list), ``source``, ``exponent`` first."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["interval_90"] = list(self.interval_90) if self.interval_90 else None
        out["prior"] = None if self.prior is None else {"definition": self.prior.definition, "mean": self.prior.mean,
                                                        "sd": self.prior.sd, "source": self.prior.source}
        return out


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
    distinct x than degree + 1) or, without errors, leave no degree of freedom."""
    n, p = len(x), degree + 1
    if len(np.unique(x)) < p or (sd is None and n <= p):
        return None
    design = np.vander(x, p, increasing=True)
    w = np.ones(n) if sd is None else 1.0 / np.asarray(sd) ** 2
    xtwx = design.T @ (design * w[:, None])
    cov = np.linalg.inv(xtwx)
    coef = cov @ design.T @ (w * y)
    resid = y - design @ coef
    dof = n - p
    scatter = float(math.sqrt(np.sum(resid ** 2) / dof)) if dof > 0 else math.nan
    if sd is None:
        cov = cov * scatter ** 2
    elif dof > 0:
        cov = cov * max(1.0, float(np.sum(w * resid ** 2)) / dof)
    return coef, cov, scatter


def _carried(fit: tuple[Any, ...] | None, span: float) -> tuple[float | None, float | None]:
    """The mean local exponent from the anchor (x = 0) to D (x = ``span``) and its standard error."""
    if fit is None:
        return None, None
    coef, cov, _ = fit
    if len(coef) == 2:
        return float(coef[1]), float(math.sqrt(cov[1, 1]))
    grad = np.array([0.0, 1.0, span])
    return float(coef[1] + coef[2] * span), float(math.sqrt(grad @ cov @ grad))


def predict_b_crit(rungs: Sequence[RungPoint], budget_samples: float, *, definition: str = "mccandlish",
                   prior: Prior | None = None, model_sd: float = MODEL_SD_PER_LOG_D, sd_floor: float = SD_FLOOR
                   ) -> Prediction:
    """B_crit at ``budget_samples`` from ``rungs`` and the prior for ``definition`` (``PRIORS``; or ``prior``): the
    module docstring's recipe. ``sd_floor`` floors each rung's given sd (0 lets a test pass exact rungs)."""
    prior = prior or PRIORS[definition]
    usable = sorted((r for r in rungs if r.usable and r.samples <= budget_samples), key=lambda r: r.samples)
    if not usable:
        return Prediction(budget_samples=budget_samples, b_crit=None, interval_90=None, source=None, exponent=None,
                          exponent_sd=None, form=None, anchor_samples=None, anchor_b_crit=None, rungs_exponent=None,
                          rungs_exponent_se=None, curvature=None, curvature_se=None, rung_share=None, prior=prior,
                          refusal=f"no anchor: no rung with a finite, positive B_crit at or below {budget_samples:g} "
                                  f"samples ({len(rungs)} rung(s) given)")
    anchor = usable[-1]
    span = math.log(budget_samples / anchor.samples)
    x = np.log([r.samples / anchor.samples for r in usable])
    y = np.log([r.b_crit for r in usable])
    given = [r.sd for r in usable]
    sd = None if any(s is None for s in given) else np.maximum(np.array(given, dtype=float), sd_floor)
    line = fit_log_polynomial(x, y, sd, 1) if len(np.unique(x)) >= 3 else None
    bend = fit_log_polynomial(x, y, sd, 2) if len(np.unique(x)) >= BEND_MIN_RUNGS else None
    curvature: float | None = float(bend[0][2]) if bend else None
    curvature_se: float | None = float(math.sqrt(bend[1][2, 2])) if bend else None
    bends = (curvature is not None and curvature_se is not None and curvature_se > 0
             and curvature < -BEND_Z * curvature_se)  # concave only
    chosen = bend if bends else line
    estimate, se = _carried(chosen, span)
    if se is not None and not (math.isfinite(se) and se >= 0):
        estimate, se = None, None
    exponent, exponent_sd, share = posterior(estimate, se, prior.mean, prior.sd)
    source = "prior" if share <= 1 - SOURCE_SHARE else "rungs" if share >= SOURCE_SHARE else "combined"
    b_crit = anchor.b_crit * math.exp(exponent * span)
    scatter = chosen[2] if chosen is not None and math.isfinite(chosen[2]) else None
    noise = anchor.sd if anchor.sd is not None else scatter if scatter is not None else DEFAULT_RUNG_SD
    noise = max(noise, sd_floor)
    form_gap = 0.0
    if line is not None and bend is not None:  # the spread of the candidate forms, each carried through the posterior
        alt = [posterior(*_carried(f, span), prior.mean, prior.sd)[0] for f in (line, bend)]
        form_gap = abs(alt[0] - alt[1]) * span / 2
    parts = {"exponent": (exponent_sd * span) ** 2, "anchor": noise ** 2, "at_budget": noise ** 2,
             "scatter": (scatter if scatter is not None else DEFAULT_RUNG_SD) ** 2, "model": (model_sd * span) ** 2,
             "form": form_gap ** 2}
    half = Z90 * math.sqrt(sum(parts.values()))
    return Prediction(budget_samples=budget_samples, b_crit=b_crit,
                      interval_90=(b_crit * math.exp(-half), b_crit * math.exp(half)), source=source, exponent=exponent,
                      exponent_sd=exponent_sd, form=("bend" if bends else "line") if chosen is not None else None,
                      anchor_samples=anchor.samples, anchor_b_crit=anchor.b_crit, rungs_exponent=estimate,
                      rungs_exponent_se=se, curvature=curvature, curvature_se=curvature_se, rung_share=share,
                      prior=prior, interval_parts=parts)
