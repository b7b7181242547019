"""Issue 36's open question, read from a validated ladder's ``summary.json`` (post hoc, no training): does B_crit(D)
bend between the ladder's last rung and D (a local exponent that falls with D), and does B_crit follow the loss?

The validation's runs go on past the fraction (the smallest batch to D, every other until it reaches the smallest
batch's loss at D), so every evaluation of the smallest batch between the last rung and D is a rung the runs
already answer: ``maths.ladder.rung_readings`` over the summary's seed-mean curves gives B_crit there, read exactly
as the measurement at D is. Printed: B_crit along D, the local exponent between neighbours, the exponent from the
last rung to D that the measurement implies, and B_crit against the rung's target loss (Kaplan et al. 2020, §5.1:
B_crit(L) ≈ B*/L^(1/α_B), a power of the loss; Merrill et al. 2025, arXiv 2505.23971: the critical batch rises fast
early in training, then plateaus).

    python bench/ladder_curvature.py SUMMARY_JSON [SUMMARY_JSON ...]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from cbs_ray.maths.ladder import (
    BORROWED_EXPONENTS,
    borrowed_exponent,
    fit_ladder,
    fit_loss_curve,
    fit_power_law,
    rung_readings,
)
from cbs_ray.methods.ladder.reading_stop import ladder_cuts, samples_trained


def along(summary: dict) -> list:
    """B_crit at every evaluation of the smallest batch from the first rung to D, from the summary's curves."""
    lad = summary["ladder"]
    curves = {int(b): [[(float(s), float(v)) for s, v in pts]] for b, pts in summary["curves"].items()}
    warm = lad.get("warmup_steps") if lad.get("step_count") == "lr_weighted" else None
    warm = {int(b): int(w) for b, w in warm.items()} if warm else None
    first = min(r["samples_seen"] for r in lad["rungs"])
    return [r for r in rung_readings(curves, bootstrap=200, warmup_steps=warm)
            if first <= r.samples_seen <= summary["prediction"]["budget_samples"]]


def show(path: str) -> None:
    s = json.loads(Path(path).read_text())
    lad, budget = s["ladder"], s["prediction"]["budget_samples"]
    last = max(lad["rungs_used"])
    rows = along(s)
    print(f"{path}: exponent {lad['exponent']:.3f} ± {lad['exponent_se']:.3f} over the rungs to {last:g}, predicted "
          f"{s['prediction']['b_crit']:.1f}, measured {s['prediction_validation']['measured_b_crit']:.1f}")
    prev = None
    for r in rows:
        local = (math.log(r.b_crit / prev.b_crit) / math.log(r.samples_seen / prev.samples_seen)
                 if prev and r.b_crit and prev.b_crit else None)
        ci = r.b_crit_ci or (math.nan, math.nan)
        print(f"  D {r.samples_seen:>7g}{' (rung)' if r.samples_seen <= last else '       '}: B_crit "
              f"{(r.b_crit or math.nan):6.1f} [{ci[0]:6.1f}, {ci[1]:6.1f}], target loss {r.target_loss:.4f}, local "
              f"exponent {'   –' if local is None else f'{local:5.2f}'}")
        prev = r if r.b_crit else prev
    at_last = next(r for r in rows if r.samples_seen == last)
    beyond = [r for r in rows if r.samples_seen >= last and r.b_crit]
    _, after = fit_power_law([r.samples_seen for r in beyond], [r.b_crit for r in beyond])
    inside = [r for r in rows if r.samples_seen <= last and r.b_crit]
    _, before = fit_power_law([r.samples_seen for r in inside], [r.b_crit for r in inside])
    print(f"  exponent (unweighted) over the rungs {before:.3f}; from the last rung to D {after:.3f} "
          f"(measured / last rung: {math.log(beyond[-1].b_crit / at_last.b_crit) / math.log(budget / last):.3f})")
    _, k_rungs = fit_power_law([r.target_loss for r in inside], [r.b_crit for r in inside])
    _, k_all = fit_power_law([r.target_loss for r in rows if r.b_crit], [r.b_crit for r in rows if r.b_crit])
    _, k_after = fit_power_law([r.target_loss for r in beyond], [r.b_crit for r in beyond])
    _, p_rungs = fit_power_law([r.samples_seen for r in inside], [r.target_loss for r in inside])
    _, p_after = fit_power_law([r.samples_seen for r in beyond], [r.target_loss for r in beyond])
    print(f"  B_crit against the target loss: exponent {k_rungs:.2f} over the rungs, {k_after:.2f} from the last rung "
          f"to D, {k_all:.2f} over all; the loss against D: exponent {p_rungs:.3f} over the rungs, {p_after:.3f} after")

    through_loss(s, rows)
    curved(s)
    longer(s)


def through_loss(s: dict, rows: list) -> None:
    """Post hoc: B_crit = c·L^k fitted over the ladder's rungs (L the rung's target), at D with the smallest batch's
    loss there as measured (a perfect extrapolation of the loss), as extrapolated by a power law through its last
    octave of evaluations (Kaplan et al. 2020's L(D) without a floor), and by L∞ + a·s^−p (``fit_loss_curve``) from
    three starts (a floor extrapolated 5× is unstable)."""
    lad, budget = s["ladder"], s["prediction"]["budget_samples"]
    used = [r for r in lad["rungs"] if r["samples_seen"] in lad["rungs_used"]]
    w = [1 / max((math.log(r["b_crit_ci"][1]) - math.log(r["b_crit_ci"][0])) / 3.92, 0.05) ** 2 for r in used]
    c, k = fit_power_law([r["target_loss"] for r in used], [r["b_crit"] for r in used], w)
    ref = s["curves"][str(min(s["batch_sizes"]))]
    stop, first = lad["fraction_samples"], min(lad["rungs_used"])
    measured = s["prediction_validation"]["measured_b_crit"]
    loss_d = next(v for x, v in ref if x == budget)
    octave = [(x, v) for x, v in ref if stop / 2 <= x <= stop]
    _, p = fit_power_law([x for x, _ in octave], [v for _, v in octave])
    guess = octave[-1][1] * (budget / octave[-1][0]) ** p
    print(f"  through the loss: B_crit = {c:.3g}·L^{k:.2f} (weighted, over the rungs); the smallest batch's loss at D "
          f"{loss_d:.4f} measured -> B_crit {c * loss_d ** k:.1f}; its last octave's power law (exponent {p:.3f}) "
          f"gives {guess:.4f} at D -> B_crit {c * guess ** k:.1f} "
          f"(|log2 err| {abs(math.log2(c * guess ** k / measured)):.2f}"
          f"; measured {measured:.1f})")
    for start in (first, stop / 4, stop / 2):
        curve = fit_loss_curve([(x, v) for x, v in ref if start <= x <= stop])
        if curve is not None:
            guess = curve.loss(budget)
            print(f"    L∞ + a·s^−p from {start:g} to {stop:g}: floor {curve.floor:.4f}, "
                  f"exponent {curve.exponent:.3f}; "
                  f"at D {guess:.4f}" + (f" -> B_crit {c * guess ** k:.1f}" if guess > 0 else ""))


def curved(s: dict) -> None:
    """Post hoc: log B_crit quadratic in log D over the ladder's rungs (weighted as ``fit_ladder``), its prediction at
    D and a 90 % interval from its covariance (scaled up by √(χ²/dof) where the rungs scatter more than their
    errors)."""
    lad, budget = s["ladder"], s["prediction"]["budget_samples"]
    used = [r for r in lad["rungs"] if r["samples_seen"] in lad["rungs_used"]]
    x = np.log([r["samples_seen"] for r in used])
    y = np.log([r["b_crit"] for r in used])
    w = np.array([1 / max((math.log(r["b_crit_ci"][1]) - math.log(r["b_crit_ci"][0])) / 3.92, 0.05) ** 2
                  for r in used])
    for degree in (d for d in (1, 2) if len(x) > d + 1):  # a residual degree of freedom at least
        design = np.vander(x - x.mean(), degree + 1, increasing=True)
        cov = np.linalg.inv(design.T @ (design * w[:, None]))
        coef = cov @ design.T @ (w * y)
        chi2 = float(np.sum(w * (y - design @ coef) ** 2))
        at = np.vander([math.log(budget) - x.mean()], degree + 1, increasing=True)[0]
        se = math.sqrt(at @ cov @ at) * max(1.0, math.sqrt(chi2 / (len(x) - degree - 1)))
        print(f"  log B_crit of degree {degree} in log D over the rungs: coefficients {np.round(coef, 3).tolist()} "
              f"(± {np.round(np.sqrt(np.diag(cov)), 3).tolist()}), χ² {chi2:.2f} on {len(x) - degree - 1}; at D "
              f"{math.exp(at @ coef):.1f} (90 % {math.exp(at @ coef - 1.645 * se):.1f}–"
              f"{math.exp(at @ coef + 1.645 * se):.1f})")


def longer(s: dict) -> None:
    """Post hoc: the ladder as if it had stopped later (the fraction at each evaluation of the smallest batch from
    the ladder's own to D/2), read from the validation's runs, which are those runs up to there (only the smallest
    batch's warmup, a fraction of its steps to the fraction, would have been longer): the power law over its rungs,
    its prediction, and the samples it would have trained over the measurement's."""
    lad, budget = s["ladder"], s["prediction"]["budget_samples"]
    warm = {int(b): int(v) for b, v in lad["warmup_steps"].items()} if lad.get("step_count") == "lr_weighted" else None
    curves = {int(b): [[(float(x), float(v)) for x, v in pts]] for b, pts in s["curves"].items()}
    measured, first = s["prediction_validation"]["measured_b_crit"], min(lad["rungs_used"])
    whole = samples_trained(curves, ladder_cuts(curves, reference_stop=budget, cap=4 * budget))
    for stop in (x for x, _ in curves[min(curves)][0] if lad["fraction_samples"] <= x <= budget / 2):
        cuts = ladder_cuts(curves, reference_stop=stop, cap=lad["cap_samples"] / lad["fraction_samples"] * stop)
        cut = {b: [[(x, v) for x, v in c[0] if x <= cuts[b]]] for b, c in curves.items()}
        rungs = [r for r in rung_readings(cut, bootstrap=300, warmup_steps=warm) if first <= r.samples_seen <= stop]
        fit = fit_ladder(rungs, budget_samples=budget, bootstrap=300)
        if fit.b_crit is None:
            print(f"  a ladder to {stop:g}: refused ({fit.refusal})")
            continue
        borrowed = ", ".join(f"{abs(math.log2(borrowed_exponent(rungs, budget, g) / measured)):.2f}"
                             for g in BORROWED_EXPONENTS)
        print(f"  a ladder to {stop:g} ({stop / budget:.2f} D, {len(rungs)} rungs): exponent {fit.exponent:.3f} ± "
              f"{fit.exponent_se:.3f}, predicted {fit.b_crit:.1f} ({fit.interval_90[0]:.1f}–{fit.interval_90[1]:.1f}), "
              f"|log2 err| {abs(math.log2(fit.b_crit / measured)):.2f}; borrowed {borrowed}; samples "
              f"{samples_trained(curves, cuts) / whole:.2f} of the measurement's (one seed's curves)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("summaries", nargs="+")
    for path in parser.parse_args().summaries:
        show(path)


if __name__ == "__main__":
    main()
