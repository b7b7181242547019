"""Issue 57's validation of the re-posed prediction (``maths.prediction``, at the commit that holds this protocol) on
the pre-training-regime testbed, pre-registered here before any run (``--dry-run`` prints it and stops). Nothing below
may change once a run has been made; runs are kept one by one (``--keep``) and pooled across sessions (``--judge``).

**Draws, by a rule that does not look at outcomes** (``draws``): 12 fresh markov languages, the knobs cycling twice
through the grid Zipf exponent a ∈ {1, 1.5, 2} × coupling s ∈ {2, 3}, each ``data.markov_seed`` drawn by
``numpy.random.default_rng(57).integers(10_000, 1_000_000)`` (the development data used 1234 and 4049 only), at the
size family's smallest model (``n_embd`` 8: 5 112 parameters); plus the Python standard library's sources at two
sizes (``n_embd`` 16 and 32). Each at **two budgets**, D₁ ≈ 20 tokens per parameter (``BUDGETS``) and D₄ = 4·D₁. The
space's ladder otherwise (rungs from D/16, ≥ 1.4 tokens per parameter, to D/2; ``ladder.seeds`` 2; grid 4…256 at D₁
and 4…512 at D₄, ``GRIDS``; alpha 0.5, constant LR after warmup). **Seeds** ``search.seed`` 300 and 301 per (draw, budget): the prediction of
one is judged against B_crit(D) measured by the other's ``--validate-prediction`` runs (``pair``): never on its own.

**Baseline, fixed in advance**: the same anchor (the rungs' geometric centroid, ``prediction.anchor_*``) carried to D
with the literature's central McCandlish-definition exponent, 0.566 (the middle of 0.452–0.68: the prior's mean) —
what a user without a ladder would borrow.

**Endpoints** (``judge``; 95 % CIs clustered by draw, Student's t with draws − 1 degrees of freedom):
- **coverage** of the 90 % interval in [0.80, 0.97] over the scored pairs;
- the **median interval narrower than the literature band** (log2 widths; ``prediction.literature_band``);
- mean paired difference d = |log2(predicted/measured)| − |log2(baseline/measured)|: **never worse** when the CI's
  upper end ≤ +0.1; **better** when mean ≤ −0.1 and the upper end ≤ 0; reported either way;
- a refusal is scored as a miss of coverage and counted, not dropped; a measurement outside the grid is censored
  (printed; the pair is not scored).

**Cost** (``CPU_MINUTES``): ≈ 3 min a D₁ run and 8 a D₄ run on the shared 2 cores: 56 runs ≈ 5 CPU-hours, over
sessions. One locked run at a time:

    python bench/prediction_validation_regime.py --dry-run
    flock /tmp/cbs-ray-ray.lock python bench/prediction_validation_regime.py --only m00:1 --keep bench/prediction_validation_regime_runs
    python bench/prediction_validation_regime.py --judge bench/prediction_validation_regime_runs
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from regime_testbed import validated_search_argv  # noqa: E402  (the bench beside this one: the same command shape)

SEEDS = (300, 301)
KNOBS = [(a, s) for a in (1, 1.5, 2) for s in (2, 3)]
BASELINE_EXPONENT = 0.566
TARGETS = {"coverage": (0.80, 0.97), "never_worse_upper": 0.1, "better": (-0.1, 0.0)}
BUDGETS = {"markov": (7168, 512), "python_source:16": (6144, 512), "python_source:32": (8192, 1024)}
"""D₁ in samples and the evaluation cadence (a multiple of the largest batch): 7 168 × 16 tokens / 5 112 = 22.4;
6 144 × 64 / 8 432 = 46.6 (the smallest D₁ whose half gives B=256 8 steps); 8 192 × 64 / 23 008 = 22.8 tokens per
parameter."""
GRIDS = {1: ("search.batch_sizes={min: 4, max: 256}", "search.num_trials=7", "ladder.min_steps=8"),
         4: ("search.batch_sizes={min: 4, max: 512}", "search.num_trials=8", "ladder.min_steps=16")}
"""The batch grid by budget: at D₁ the largest batch 256 (512 would train 7 steps to the ladder's fraction), with the
ladder's floor of steps at 8; at D₄ 512, floor 16."""
CPU_MINUTES = {1: 3, 4: 8}
COMMON = ("search.method=ladder", "ladder.seeds=2", "ladder.fraction=0.5", "ladder.first_rung=0.0625")


def draws() -> dict[str, tuple[str, list[str]]]:
    """Every draw: its name → (space, sets), budget and seed apart."""
    seeds = np.random.default_rng(57).integers(10_000, 1_000_000, size=12)
    out = {}
    for i, language in enumerate(seeds):
        a, s = KNOBS[i % len(KNOBS)]
        out[f"m{i:02d}"] = ("search_spaces/markov_lm.yaml", [f"data.markov_seed={int(language)}",
                                                             f"data.markov_zipf_exponent={a}",
                                                             f"data.markov_coupling={s}", "model.config.n_embd=8"])
    for width in (16, 32):
        out[f"py{width}"] = ("search_spaces/python_source_lm.yaml", [f"model.config.n_embd={width}"])
    return out


def budget_sets(draw: str, factor: int) -> list[str]:
    key = "markov" if draw.startswith("m") else f"python_source:{draw[2:]}"
    samples, cadence = BUDGETS[key]
    return [f"training.budget_samples={samples * factor}", f"training.eval_every_samples={cadence * factor}",
            f"asha.grace_period_samples={cadence * factor}", *GRIDS[factor]]


def protocol_lines() -> list[str]:
    runs = len(draws()) * 2 * len(SEEDS)
    minutes = len(draws()) * len(SEEDS) * sum(CPU_MINUTES.values())
    return [f"PROTOCOL issue 57 prediction validation (fixed before any run): draws {draws()}",
            f"PROTOCOL budgets D1 {BUDGETS} and D4 = 4 D1; seeds {SEEDS}, each judged on the other's measurement; "
            f"sets {COMMON}; grids {GRIDS}",
            f"PROTOCOL baseline: the prediction's anchor carried with exponent {BASELINE_EXPONENT}; targets {TARGETS}",
            f"PROTOCOL cost: {runs} runs, about {minutes / 60:.1f} CPU-hours on the shared 2 cores"]


def run(draw: str, factor: int, seed: int, keep: Path, work: Path) -> dict:
    space, sets = draws()[draw]
    name = f"{draw}-x{factor}-s{seed}"
    out = work / name
    argv = validated_search_argv(space, out, (*COMMON, *sets, *budget_sets(draw, factor), f"search.seed={seed}"))
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"{name} failed ({proc.returncode}): {proc.stderr[-1500:]}")
    summary = json.loads((out / "report" / "summary.json").read_text())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    pred, v = summary["prediction"], summary.get("prediction_validation") or {}
    row = {"draw": draw, "factor": factor, "seed": seed, "wall_s": round(wall), "commit": commit,
           "batch_sizes": summary["batch_sizes"], "prediction": pred, "measured": v.get("measured_b_crit"),
           "rungs": [[r["samples_seen"], r["b_crit"]] for r in summary["ladder"]["rungs"]]}
    (keep / f"{name}.json").write_text(json.dumps(row, indent=1))
    return row


def pair(rows: list[dict]) -> list[dict]:
    """Each (draw, budget)'s prediction of one seed with the other seed's measurement, and the baseline's."""
    out = []
    for key in sorted({(r["draw"], r["factor"]) for r in rows}):
        runs = sorted((r for r in rows if (r["draw"], r["factor"]) == key), key=lambda r: r["seed"])
        for i, r in enumerate(runs):
            m = runs[(i + 1) % len(runs)]
            p, measured = r["prediction"], m["measured"]
            entry = {"draw": key[0], "factor": key[1], "seed": r["seed"], "measured_seed": m["seed"],
                     "measured": measured, "predicted": p.get("b_crit"), "refusal": p.get("refusal"), "error": None}
            low, high = min(m["batch_sizes"]), max(m["batch_sizes"])
            if len(runs) < 2 or measured is None or not low <= measured <= high:
                entry["censored"] = "no measurement" if measured is None or len(runs) < 2 else "outside the grid"
                out.append(entry)
                continue
            if p.get("b_crit") is None:
                out.append({**entry, "inside": False})
                continue
            anchor_d, anchor_b = p["anchor_samples"], p["anchor_b_crit"]
            baseline = anchor_b * (p["budget_samples"] / anchor_d) ** BASELINE_EXPONENT
            lo, hi = p["interval_90"]
            band = p.get("literature_band") or [math.nan, math.nan]
            out.append({**entry, "error": abs(math.log2(p["b_crit"] / measured)),
                        "baseline_error": abs(math.log2(baseline / measured)), "inside": lo <= measured <= hi,
                        "width": math.log2(hi / lo), "band_width": math.log2(band[1] / band[0])})
    return out


def _t975(dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


def judge(pairs: list[dict]) -> dict:
    coverage_pool = [p for p in pairs if "inside" in p]
    scored = [p for p in pairs if p["error"] is not None]
    if not scored:
        return {"verdict": "nothing scored", "pairs": len(pairs)}
    by_draw: dict = {}
    for p in scored:
        by_draw.setdefault(p["draw"], []).append(p["error"] - p["baseline_error"])
    means = [sum(v) / len(v) for v in by_draw.values()]
    mean = sum(means) / len(means)
    half = (_t975(len(means) - 1) * statistics.stdev(means) / math.sqrt(len(means))) if len(means) > 1 else math.inf
    coverage = sum(p["inside"] for p in coverage_pool) / len(coverage_pool)
    widths, bands = [p["width"] for p in scored], [p["band_width"] for p in scored]
    return {"pairs": len(pairs), "scored": len(scored), "draws": len(by_draw),
            "censored": sum("censored" in p for p in pairs), "refused": len(coverage_pool) - len(scored),
            "coverage": coverage, "coverage_met": TARGETS["coverage"][0] <= coverage <= TARGETS["coverage"][1],
            "median_width_log2": statistics.median(widths), "median_band_width_log2": statistics.median(bands),
            "narrower_than_band": statistics.median(widths) < statistics.median(bands),
            "mean_error": sum(p["error"] for p in scored) / len(scored),
            "mean_baseline_error": sum(p["baseline_error"] for p in scored) / len(scored),
            "mean_difference": mean, "ci95": [mean - half, mean + half],
            "never_worse": mean + half <= TARGETS["never_worse_upper"],
            "better": mean <= TARGETS["better"][0] and mean + half <= TARGETS["better"][1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print the protocol and stop")
    parser.add_argument("--only", help="DRAW:FACTOR (e.g. m00:1); both seeds, each kept as it ends")
    parser.add_argument("--keep", type=Path, default=Path("bench/prediction_validation_regime_runs"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/prediction_validation_regime"))
    parser.add_argument("--judge", type=Path, help="pool the kept runs and print the verdict")
    args = parser.parse_args()
    print("\n".join(protocol_lines()), flush=True)
    if args.dry_run:
        return
    if args.judge:
        rows = [json.loads(p.read_text()) for p in sorted(args.judge.glob("*.json"))]
        pairs = pair(rows)
        for p in pairs:
            print("PAIR " + json.dumps(p), flush=True)
        print("VERDICT " + json.dumps(judge(pairs)))
        return
    args.keep.mkdir(parents=True, exist_ok=True)
    todo = ([tuple(args.only.split(":"))] if args.only else
            [(d, str(f)) for f in (1, 4) for d in draws()])
    for draw, factor in todo:
        for seed in SEEDS:
            if (args.keep / f"{draw}-x{factor}-s{seed}.json").exists():
                continue
            row = run(draw, int(factor), seed, args.keep, args.work)
            print(f"{draw} x{factor} seed {seed}: predicted {row['prediction'].get('b_crit')}, measured "
                  f"{row['measured']}, {row['wall_s']} s", flush=True)


if __name__ == "__main__":
    main()
