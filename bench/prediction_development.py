"""The predictor's development evaluation, openly: ``maths.prediction`` against the borrowed exponents on development
data, and the fit of its free constants (the prior's spread, the transfer sd, the model error) on those data only,
before any validation run (issue 49; re-posed in issue 57: the rungs' centroid as the anchor, rungs off the batch grid
left out, the transfer sd).

Development data (issue 57: the validation draws of issue 49 are development data now; a new validation uses none
of these):

* **The markov runs of issue 36** (docs/benchmarks-archive.md#issue-36; ``MARKOV_RUNS``: every fresh-seed run with
  the final knobs, v2 ×6,
  v3 ×3, v4's power-law runs ×6, v5 ×3, and the third session's three scoping seeds; rungs B_crit at 384 … 3200
  samples, B_crit measured at D = 16 384, as printed in those tables). The tables print no rung intervals, so the
  rungs here carry none (``RungPoint.sd`` None: the fit reads their scatter); in a ladder they carry their own.
* **Issue 49's validation runs** (``bench/prediction_validation_runs/rows.json``, 16 rows: four markov settings on
  language 4049, seeds 100…106), each seed's prediction judged on the next seed's measurement of the same setting (the
  ring that validation scored), rungs as stored (no intervals).

Both ran the grid ``search.batch_sizes`` 8…128 (``MARKOV_GRID``): rungs whose B_crit lies outside it are left out.

* **Step Law's released sweep** (Li et al. 2025, ``data/dense_lr_bs_loss.csv`` of github.com/step-law/steplaw; not
  vendored: pass its path): per (N, D) cell the best loss over the LR at every batch, B_opt the batch that minimises
  it (a parabola in log B through the best batch and its neighbours); per model size N the cells' B_opt against D,
  the largest D held out. This is the **B_opt** definition, so it is scored against the B_opt prior and exponents
  (0.571, fitted by Step Law on this very CSV: a circular baseline, said so; 0.383). N = 1.07 B has two budgets:
  one rung.

Printed: per run, the predictor's B_crit(D), interval, source, exponent and warnings against the measured one and
against each borrowed exponent of the definition anchored at the last rung; pooled mean |log2 error|, coverage; the
constants fitted (``PRIOR_SD``, ``DEFAULT_RUNG_SD``, ``TRANSFER_SD``, ``MODEL_SD_PER_LOG_D``) against those in
``maths.prediction``.

    python bench/prediction_development.py [--steplaw PATH/dense_lr_bs_loss.csv]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from cbs_ray.maths.prediction import (
    DEFAULT_RUNG_SD,
    LITERATURE_EXPONENTS,
    MODEL_SD_PER_LOG_D,
    PRIOR_SD,
    PRIORS,
    TRANSFER_SD,
    Prior,
    RungPoint,
    predict_b_crit,
)

MARKOV_RUNG_SAMPLES = (384, 512, 768, 1024, 1408, 2048, 2944, 3200)
MARKOV_BUDGET = 16384
MARKOV_GRID = (8, 128)
ISSUE49_ROWS = Path(__file__).resolve().parent / "prediction_validation_runs" / "rows.json"

# (group, setting, seed, rungs' B_crit at MARKOV_RUNG_SAMPLES, measured B_crit(D)),
# from docs/benchmarks-archive.md#issue-36
MARKOV_RUNS = [
    ("v2", "markov", 10, (35.8, 37.3, 44.7, 51.1, 60.7, 74.7, 88.5, 92), 179),
    ("v2", "markov", 12, (36.1, 38.4, 46.7, 53, 62.3, 75.2, 89.1, 92.4), 176),
    ("v2", "markov", 14, (34.7, 36.7, 43.7, 49.2, 58, 70.4, 83.8, 87.2), 172),
    ("v2", "markov_far", 10, (15.3, 15.1, 15.9, 18.1, 22.7, 29.7, 37.5, 39.6), 114),
    ("v2", "markov_far", 12, (13.7, 8.58, 7.03, 7.93, 17.5, 24.8, 32.1, 33.5), 74.2),
    ("v2", "markov_far", 14, (11.3, 10.6, 9.08, 10.7, 13.6, 29, 37.9, 39.4), 67.1),
    ("v3", "markov_far", 30, (7.5, 8.8, 11.0, 14.2, 19.2, 26.0, 37.7, 38.5), 87.9),
    ("v3", "markov_far", 32, (9.3, 10.5, 12.8, 16.1, 21.6, 27.9, 36.0, 39.0), 98.6),
    ("v3", "markov_far", 34, (8.5, 9.6, 11.1, 14.1, 18.9, 25.3, 32.2, 33.8), 93.1),
    ("v4d", "markov", 70, (39.6, 43.4, 51.7, 56.9, 65.5, 78.9, 94.8, 98.4), 185),
    ("v4d", "markov", 72, (35.3, 37.1, 43.3, 48.3, 56.1, 68.9, 83.1, 86.4), 182),
    ("v4d", "markov", 74, (35.0, 36.7, 43.9, 48.7, 58.0, 72.2, 86.2, 90.0), 165),
    ("v4", "markov_steep", 70, (6.51, 7.68, 11.6, 15.1, 19.9, 27.0, 32.5, 33.3), 111),
    ("v4", "markov_steep", 72, (8.27, 8.89, 11.4, 13.4, 17.8, 25.1, 28.1, 29.6), 109),
    ("v4", "markov_steep", 74, (7.65, 8.27, 10.7, 13.5, 18.2, 25.3, 26.8, 29.0), 115),
    ("v5", "markov_steep", 80, (7.1, 7.4, 8.4, 10.3, 13.8, 20.1, 24.3, 25.6), 91.6),
    ("v5", "markov_steep", 82, (7.1, 7.4, 8.6, 10.6, 15.0, 20.9, 30.2, 31.6), 94.8),
    ("v5", "markov_steep", 84, (7.7, 8.4, 10.8, 12.4, 16.0, 22.1, 27.6, 30.2), 97.0),
    ("scope", "markov_far", 40, (8.7, 10.1, 13.4, 16.9, 21.5, 28.3, 36.5, 38.4), 98.1),
    ("scope", "markov_far", 42, (9.3, 10.4, 13.7, 17.0, 21.2, 27.8, 36.0, 38.1), 102.3),
    ("scope", "markov", 40, (36.6, 39.0, 46.6, 52.7, 62.5, 75.3, 88.0, 91.2), 171),
]

STEPLAW_TOKENS_PER_SAMPLE = 2048  # Step Law's sequences (its bs is in sequences)


def log2_error(predicted: float, measured: float) -> float:
    return abs(math.log2(predicted / measured))


def score(rungs: list, budget: float, measured: float, definition: str, prior: Prior | None = None,
          model_sd: float = MODEL_SD_PER_LOG_D, transfer_sd: float = TRANSFER_SD,
          grid: tuple[float, float] | None = None) -> dict:
    """The predictor and each borrowed exponent of ``definition`` (anchored at the last rung, as issue 49 scored them)
    against ``measured``; a refused prediction scores None."""
    p = predict_b_crit(rungs, budget, definition=definition, prior=prior, model_sd=model_sd, transfer_sd=transfer_sd,
                       batch_grid=grid)
    last = max((r for r in rungs if r.samples <= budget), key=lambda r: r.samples)
    borrowed = {name: last.b_crit * (budget / last.samples) ** g for name, (g, _) in
                LITERATURE_EXPONENTS[definition].items()}
    ok = p.b_crit is not None and p.interval_90 is not None
    late = None
    if ok and p.anchor_samples is not None and p.anchor_b_crit is not None:  # from the centroid to D
        late = math.log(measured / p.anchor_b_crit) / math.log(budget / p.anchor_samples)
    return {"prediction": p, "error": log2_error(p.b_crit, measured) if ok else None,
            "inside": (p.interval_90[0] <= measured <= p.interval_90[1]) if ok else None,
            "width": math.log2(p.interval_90[1] / p.interval_90[0]) if ok else None,
            "band_width": math.log2(p.literature_band[1] / p.literature_band[0]) if p.literature_band else None,
            "borrowed": {k: log2_error(v, measured) for k, v in borrowed.items()},
            "no_extrapolation": log2_error(last.b_crit, measured),
            "late_exponent": math.log(measured / last.b_crit) / math.log(budget / last.samples),
            "centroid_late_exponent": late}


def markov_scores(model_sd: float = MODEL_SD_PER_LOG_D, prior: Prior | None = None,
                  transfer_sd: float = TRANSFER_SD) -> list[dict]:
    """Issue 36's markov runs, each judged on its own measurement at D."""
    out = []
    for group, setting, seed, rungs, measured in MARKOV_RUNS:
        points = [RungPoint(d, b) for d, b in zip(MARKOV_RUNG_SAMPLES, rungs)]
        out.append({"group": group, "setting": setting, "seed": seed, "measured": measured,
                    **score(points, MARKOV_BUDGET, measured, "mccandlish", prior, model_sd, transfer_sd,
                            MARKOV_GRID)})
    return out


def issue49_scores(model_sd: float = MODEL_SD_PER_LOG_D, transfer_sd: float = TRANSFER_SD) -> list[dict]:
    """Issue 49's 16 stored validation rows, each seed's prediction judged on the next seed's measurement."""
    rows = json.loads(ISSUE49_ROWS.read_text())
    by: dict = {}
    for r in rows:
        by.setdefault(r["setting"], []).append(r)
    out = []
    for setting, runs in sorted(by.items()):
        runs = sorted(runs, key=lambda r: r["seed"])
        for i, r in enumerate(runs):
            measured = runs[(i + 1) % len(runs)]["measured"]
            points = [RungPoint(d, b) for d, b in r["rungs"]]
            out.append({"group": "i49", "setting": setting, "seed": r["seed"], "measured": measured,
                        **score(points, r["budget"], measured, "mccandlish", None, model_sd, transfer_sd,
                                MARKOV_GRID)})
    return out


def development_scores(model_sd: float = MODEL_SD_PER_LOG_D, transfer_sd: float = TRANSFER_SD) -> list[dict]:
    return markov_scores(model_sd, transfer_sd=transfer_sd) + issue49_scores(model_sd, transfer_sd)


def steplaw_cells(path: Path) -> dict:
    """{N: [(D in samples, B_opt in samples), ...]} from Step Law's CSV (module docstring)."""
    import pandas as pd

    df = pd.read_csv(path)[["N", "D", "lr", "bs", "smooth loss"]].dropna()
    best = df.groupby(["N", "D", "bs"])["smooth loss"].min().reset_index()
    out: dict = {}
    for (n, d), cell in best.groupby(["N", "D"]):
        cell = cell.sort_values("bs")
        b, loss = np.log(cell["bs"].to_numpy(float)), cell["smooth loss"].to_numpy(float)
        i = int(np.argmin(loss))
        b_opt = b[i]
        if 0 < i < len(b) - 1:  # a parabola through the best batch and its neighbours, its vertex kept inside them
            a2, a1, _ = np.polyfit(b[i - 1:i + 2], loss[i - 1:i + 2], 2)
            if a2 > 0:
                b_opt = float(np.clip(-a1 / (2 * a2), b[i - 1], b[i + 1]))
        out.setdefault(int(n), []).append((float(d) / STEPLAW_TOKENS_PER_SAMPLE, float(math.exp(b_opt))))
    return {n: sorted(v) for n, v in out.items()}


def steplaw_scores(path: Path, model_sd: float = MODEL_SD_PER_LOG_D) -> list[dict]:
    out = []
    for n, cells in steplaw_cells(path).items():
        *kept, (budget, measured) = cells
        rungs = [RungPoint(d, b) for d, b in kept]
        out.append({"group": "steplaw", "setting": f"N={n / 1e6:.0f}M", "seed": len(kept), "measured": measured,
                    **score(rungs, budget, measured, "b_opt", model_sd=model_sd)})
    return out


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def print_rows(rows: list[dict]) -> None:
    for r in rows:
        p = r["prediction"]
        base = ", ".join(f"{k} {v:.2f}" for k, v in r["borrowed"].items())
        if r["error"] is None:
            print(f"ROW {r['group']} {r['setting']} {r['seed']}: refused ({p.refusal}); borrowed {base}")
            continue
        lo, hi = p.interval_90
        flat = " FLAT-WARNED" if any(w.startswith("flat") for w in p.warnings) else ""
        print(f"ROW {r['group']} {r['setting']} {r['seed']}: predicted {p.b_crit:.3g} [{lo:.3g}, {hi:.3g}] "
              f"({p.source}, exponent {p.exponent:.3f}; rungs' {_rounded(p.rungs_exponent)} ± "
              f"{_rounded(p.rungs_exponent_se)}; {p.rungs_used} rungs, {len(p.left_out)} left out{flat}), measured "
              f"{r['measured']:.3g} ({'inside' if r['inside'] else 'OUTSIDE'}), |log2 err| {r['error']:.2f}; "
              f"borrowed {base}; no extrapolation {r['no_extrapolation']:.2f}")


def pooled(rows: list[dict], label: str) -> None:
    scored = [r for r in rows if r["error"] is not None]
    if not scored:
        return
    err = np.array([r["error"] for r in scored])
    names = list(scored[0]["borrowed"])
    means = {k: float(np.mean([r["borrowed"][k] for r in scored])) for k in names}
    best = min(means, key=means.get)
    diff = err - np.array([r["borrowed"][best] for r in scored])
    print(f"POOLED {label} ({len(scored)} scored, {len(rows) - len(scored)} refused): predictor mean |log2 err| "
          f"{err.mean():.3f}; borrowed from the last rung "
          + ", ".join(f"{k} {v:.3f}" for k, v in means.items())
          + f"; no extrapolation {np.mean([r['no_extrapolation'] for r in scored]):.3f}; paired difference vs the best "
          f"borrowed ({best}) {diff.mean():+.3f}; coverage {sum(r['inside'] for r in scored)}/{len(scored)}; median "
          f"interval width {np.median([r['width'] for r in scored]):.2f} log2 (literature band "
          f"{np.median([r['band_width'] for r in scored]):.2f}); flat-rung warnings "
          f"{sum(any(w.startswith('flat') for w in r['prediction'].warnings) for r in scored)}; sources "
          + ", ".join(f"{s} {sum(r['prediction'].source == s for r in scored)}" for s in ("rungs", "combined", "prior")))


def fit_constants(rows: list[dict]) -> None:
    """The constants as fitted on the development draws, beside those the package holds."""
    centre = PRIORS["mccandlish"].mean
    late = np.array([r["late_exponent"] for r in rows if r["group"] != "i49"])
    print(f"FIT prior spread: RMS of the late exponent (last rung → D) about the prior's centre {centre:.3f}, issue "
          f"36's runs: {math.sqrt(np.mean((late - centre) ** 2)):.3f} (package PRIOR_SD {PRIOR_SD})")
    groups: dict = {}
    for r in rows:
        if r["group"] != "i49":
            groups.setdefault((r["group"], r["setting"]), []).append(math.log(r["measured"]))
    pooled_var = [np.var(v, ddof=1) for v in groups.values() if len(v) >= 2]
    noise = math.sqrt(np.mean(pooled_var))
    print(f"FIT seed-to-seed sd of log B_crit(D), pooled over {len(pooled_var)} setting/protocol groups: "
          f"{noise:.3f} (package DEFAULT_RUNG_SD {DEFAULT_RUNG_SD})")
    fitted = [r for r in rows if r["centroid_late_exponent"] is not None and r["prediction"].rungs_exponent_se]
    resid = np.array([r["centroid_late_exponent"] - r["prediction"].rungs_exponent for r in fitted])
    se = np.array([r["prediction"].rungs_exponent_se for r in fitted])
    spans = np.array([math.log(r["prediction"].budget_samples / r["prediction"].anchor_samples) for r in fitted])
    transfer = math.sqrt(max(0.0, float(np.mean(resid ** 2) - np.mean(se ** 2) - np.mean(2 * noise ** 2 / spans ** 2))))
    print(f"FIT transfer sd: √(mean (γ_late − γ̂)² − mean SE² − mean 2·sd²/Δ²) over the {len(fitted)} development draws "
          f"with a fit: {transfer:.3f} (package TRANSFER_SD {TRANSFER_SD})")
    for m in np.arange(0.0, 0.31, 0.02):
        again = [r for r in development_scores(model_sd=float(m)) if r["inside"] is not None]
        coverage = np.mean([r["inside"] for r in again])
        if coverage >= 0.9:
            print(f"FIT model error per unit log D: the smallest on a 0.02 grid with coverage ≥ 90 % on the "
                  f"{len(again)} scored development draws: {m:.2f} (coverage {coverage:.2f}; package "
                  f"MODEL_SD_PER_LOG_D {MODEL_SD_PER_LOG_D})")
            break


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steplaw", type=Path, help="Step Law's data/dense_lr_bs_loss.csv")
    args = parser.parse_args()
    rows = development_scores()
    print_rows(rows)
    pooled([r for r in rows if r["group"] not in ("scope", "i49")], "markov, issue 36's 18 fresh-seed runs")
    pooled([r for r in rows if r["group"] == "i49"], "markov, issue 49's 16 validation rows (development now)")
    pooled(rows, "every development draw")
    fit_constants(rows)
    if args.steplaw:
        law = steplaw_scores(args.steplaw)
        print_rows(law)
        pooled(law, "Step Law B_opt, the largest D of each N held out")
    else:
        print("Step Law: not scored (no --steplaw PATH)")


if __name__ == "__main__":
    main()
