"""What the search costs against the manual method, on real data (SST-2 from ../shared/data/sst2/, CPU).

Per seed, three Tune experiments over the same space and the same equal-sample budget per trial:

1. *grid*: every batch size × a fixed grid of alpha and warmup (``search.strategy=grid``, 3 × 3 points),
   each trained to the full budget, no early stopping: the manual method;
2. *cbs-ray*: the space as shipped (multivariate TPE + ASHA within each batch size, in samples);
3. *random*: Optuna's random sampler, the same number of trials as (2), no early stopping.

For each: total samples processed (the sum over trials of the samples each trained on), wall time, the
critical batch by each method of the reporter (turning point, McCandlish fit, 20 % rule) and the best dev
accuracy. Then, per seed: samples and wall ratios search ÷ grid and whether the turning points agree
within one grid step (a factor of 2). Results go to ``--out`` as JSON after every experiment, so a
stopped run keeps what it finished.

    python bench/search_cost.py [--seeds 0 1 2] [--space search_spaces/sst2_tiny_cpu.yaml] [--set K=V ...]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STRATEGIES = {
    "grid": ["search.strategy=grid", "search.early_stopping=false"],
    "cbs-ray": [],
    "random": ["search.strategy=random", "search.early_stopping=false"],
}


def measure(space: str, overrides: list[str], storage: str, output: str) -> dict:
    """Run one experiment through the public API; its cost and its answer."""
    from cbs_ray.tune.api import run_search
    from cbs_ray.spec.load import load_spec

    spec = load_spec(space, overrides + [f"storage_path={storage}"])
    start = time.perf_counter()
    result = run_search(spec, output_dir=output, verbose=0)
    wall = time.perf_counter() - start
    summary, metric = result.summary, spec.search.metric
    trials = result.trials
    critical = summary.critical_batch
    best = trials[metric].max() if spec.search.mode == "max" else trials[metric].min()
    completed = [r for r in summary.per_batch if r.get(f"best_{metric}") is not None
                 and not math.isnan(r[f"best_{metric}"])]
    pick = max if spec.search.mode == "max" else min
    selected = pick(completed, key=lambda r: r[f"best_{metric}"]) if completed else {}
    return {"trials": len(trials), "samples": int(trials["samples_seen"].sum()), "wall_s": round(wall, 1),
            "turning_point": critical.batch_size,  # as the spec reads it (search.turning_point)
            "turning_point_raw": critical.turning_point.raw_batch_size,
            "turning_point_monotone": critical.turning_point.monotone_batch_size,
            "mccandlish_b_crit": critical.tradeoff.b_crit,
            "rule_20pct": critical.overhead_20pct.batch_size, f"best_{metric}": float(best),
            "per_batch_best": {int(r["batch_size"]): r.get(f"best_{metric}") for r in summary.per_batch},
            # with data.holdout_examples: the dev-set figure of the trial the method selects
            f"selected_dev_{metric}": selected.get(f"dev_{metric}"),
            "experiment": result.experiment_path}


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def within_one_step(a, b) -> bool:
    return a is not None and b is not None and abs(math.log2(a) - math.log2(b)) <= 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--space", default=str(ROOT / "search_spaces" / "sst2_tiny_cpu.yaml"))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", default=str(ROOT / "bench" / "search_cost.json"))
    args = parser.parse_args()

    import logging

    import ray

    results = {"space": args.space, "overrides": args.overrides, "seeds": {}}
    ray.init(include_dashboard=False, logging_level=logging.WARNING)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for seed in args.seeds:
                runs = results["seeds"].setdefault(str(seed), {})
                for name, extra in STRATEGIES.items():
                    overrides = args.overrides + [f"search.seed={seed}"] + extra
                    if name == "random":  # as many trials as the search ran
                        overrides.append(f"search.num_trials={runs['cbs-ray']['trials']}")
                    try:
                        runs[name] = measure(args.space, overrides, f"{tmp}/ray", f"{tmp}/out/{seed}-{name}")
                    except Exception as e:  # keep the other experiments' figures
                        runs[name] = {"error": f"{type(e).__name__}: {e}"}
                    print(f"seed {seed} {name}: {json.dumps(runs[name])}", flush=True)
                    Path(args.out).write_text(json.dumps(results, indent=2))
    finally:
        ray.shutdown()

    print("\nseed  samples search/grid  wall search/grid  samples random/grid  turning point grid/search/random"
          "  agree  best acc grid/search/random  selected trial's dev acc grid/search/random")
    agreements = []
    for seed, runs in results["seeds"].items():
        grid, search, rand = runs["grid"], runs["cbs-ray"], runs["random"]
        if any("error" in r for r in (grid, search, rand)):
            print(f"{seed}: failed: {[r.get('error') for r in (grid, search, rand)]}")
            continue
        agree = within_one_step(grid["turning_point"], search["turning_point"])
        agreements.append(agree)
        print(f"{seed:>4}  {search['samples'] / grid['samples']:>19.3f}  {search['wall_s'] / grid['wall_s']:>15.3f}"
              f"  {rand['samples'] / grid['samples']:>19.3f}  "
              f"{grid['turning_point']}/{search['turning_point']}/{rand['turning_point']:<10}  {str(agree):>5}  "
              f"{grid['best_accuracy']:.3f}/{search['best_accuracy']:.3f}/{rand['best_accuracy']:.3f}  "
              + "/".join(_fmt(r.get("selected_dev_accuracy")) for r in (grid, search, rand)))
    ratios = [r["cbs-ray"]["samples"] / r["grid"]["samples"] for r in results["seeds"].values()
              if "samples" in r.get("grid", {}) and "samples" in r.get("cbs-ray", {})]
    if ratios:
        print(f"RESULT samples search/grid: max {max(ratios):.3f} over {len(ratios)} seeds (target <= 0.25); "
              f"turning point within one grid step of the grid's in {sum(agreements)}/{len(agreements)} seeds "
              f"(target >= 2/3)")
    for reading in ("raw", "monotone"):  # both readings of the same experiments
        key = f"turning_point_{reading}"
        pairs = [(r["grid"][key], r["cbs-ray"][key]) for r in results["seeds"].values()
                 if key in r.get("grid", {}) and key in r.get("cbs-ray", {})]
        if pairs:
            print(f"turning point read off the {reading} bests, grid/search: "
                  + ", ".join(f"{g}/{c}" for g, c in pairs)
                  + f"; within one grid step in {sum(within_one_step(g, c) for g, c in pairs)}/{len(pairs)} seeds")
    print(f"results: {args.out}")
    if not ratios:
        sys.exit(1)


if __name__ == "__main__":
    main()
