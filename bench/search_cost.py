"""What the search costs against the manual method, on real data (SST-2 from ../shared/data/sst2/, CPU).

Per seed, three Tune experiments over the same space and the same equal-sample budget per trial:

1. *grid*: every batch size × a fixed grid of alpha and warmup (``search.strategy=grid``, 3 × 3 points),
   each trained to the full budget, no early stopping: the manual method;
2. *cbs-ray*: the space as shipped (multivariate TPE + ASHA within each batch size, in samples);
3. *random*: Optuna's random sampler, the same number of trials as (2), no early stopping;
4. *bisect*: ``search.strategy=bisect`` (issue 38: alpha once, then the batches by bisection on the monotone
   reading, each once);
5. *one-per-batch*: one full run per batch size at its seeded configuration (middle alpha, the seed rule's
   warmup), no early stopping: the simple alternative a reviewer would name.

``--strategies`` picks which run (all by default); ``--grid-from FILE`` takes the grid's figures from an earlier
run's JSON instead of training it again (its 63 full runs take ~10 min a seed on 2 cores), and says so. An
existing ``--out`` of the same space and overrides is added to (the seeds run now replace theirs), so seeds can
run one invocation at a time and be reported together.

With ``bisect``, issue 38's criteria are printed before the runs: against the grid (SST-2: samples <= 0.08 of the
grid's, the turning point within one grid step, no worse than one run per batch) and, with ``cbs-ray``, against
the search as shipped (the tiny LMs: samples <= 0.5 of its, the same answer within one grid step).

For each: total samples processed (the sum over trials of the samples each trained on), wall time, the
critical batch by each method of the reporter (turning point, McCandlish fit, 20 % rule) and the best dev
accuracy. Then, per seed: samples and wall ratios search ÷ grid and whether the turning points agree
within one grid step (a factor of 2). Results go to ``--out`` as JSON after every experiment, so a
stopped run keeps what it finished.

    python bench/search_cost.py [--seeds 0 1 2] [--space search_spaces/sst2_tiny_cpu.yaml] [--set K=V ...]
        [--strategies bisect one-per-batch] [--grid-from bench/search_cost.json]
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
    "bisect": ["search.strategy=bisect"],
    "one-per-batch": ["search.early_stopping=false"],  # num_trials = the batch count: only the seeded points run
}


def measure(space: str, overrides: list[str], storage: str, output: str) -> dict:
    """Run one experiment through the public API; its cost and its answer."""
    from cbs_ray.spec.load import load_spec
    from cbs_ray.tune.api import run_search

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
            # each trial: batch, alpha, samples, status; by batch and alpha (Tune's trial ids do not say the order
            # trials started in; the bisect walk's order follows from the per-batch figures by its policy)
            "trained": [[int(t.batch_size), round(float(t.alpha), 4), int(t.samples_seen), t.status]
                        for t in trials.sort_values(["batch_size", "alpha"]).itertuples()] if len(trials) else None,
            "experiment": result.experiment_path}


def unfinished(error) -> dict:
    """For an experiment that ended with trials its saved state does not show as ended: each trial's saved
    status, batch, alpha and samples (what the search did before it)."""
    path = getattr(error, "experiment_path", None)
    if path is None:
        return {}
    from ray.tune import ExperimentAnalysis

    return {"saved_trials": [{"status": t.status, "batch": 2 ** t.config.get("log2_batch", 0),
                              "alpha": t.config.get("alpha"), "samples": (t.last_result or {}).get("samples_seen")}
                             for t in ExperimentAnalysis(path).trials]}


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def within_one_step(a, b) -> bool:
    return a is not None and b is not None and abs(math.log2(a) - math.log2(b)) <= 1


def monotone_turning_point(run: dict, tolerance: float, mode: str = "max", relative: bool = True):
    """The monotone turning point of a run's per-batch bests (for a stored run that predates the key)."""
    from cbs_ray.maths.critical_batch import turning_point

    best = {int(b): (math.nan if v is None else v) for b, v in run["per_batch_best"].items()}
    batches = sorted(best)
    return turning_point(batches, [best[b] for b in batches], mode=mode, tolerance=tolerance, relative=relative,
                         monotone=True)


GRID_CRITERIA = ("criteria (fixed before the runs): bisect samples/grid <= 0.08; turning point (monotone) within one "
                 "grid step of the grid's on every seed; no worse than one run per batch")
SEARCH_CRITERIA = ("criteria (fixed before the runs): bisect samples <= 0.5 x the search as shipped (cbs-ray, "
                   "repeats included in both); the same turning point (as the spec reads it) within one grid step, "
                   "on every seed")


def report_against_search(results: dict) -> None:
    """Issue 38's target for the tiny LMs: bisect against the search as shipped, on the same seeds."""
    print(f"\n{SEARCH_CRITERIA}")
    print("seed  search tp  bisect tp  search samples  bisect samples  bisect/search  search wall s  bisect wall s")
    met = []
    for seed, runs in sorted(results["seeds"].items()):
        search, bisect = runs.get("cbs-ray", {}), runs.get("bisect", {})
        if "samples" not in search or "samples" not in bisect:
            print(f"{seed}: missing: {[r.get('error') for r in (search, bisect)]}")
            met.append(False)
            continue
        ratio = bisect["samples"] / search["samples"]
        agree = within_one_step(search["turning_point"], bisect["turning_point"])
        met.append(ratio <= 0.5 and agree)
        print(f"{seed:>4}  {str(search['turning_point']):>9}  {str(bisect['turning_point']):>9}  "
              f"{search['samples']:>14}  {bisect['samples']:>14}  {ratio:>13.3f}  {search['wall_s']:>13}  "
              f"{bisect['wall_s']:>13}")
    print(f"RESULT bisect vs the search as shipped: criteria met on {sum(met)}/{len(met)} seeds")


def report_bisect(results: dict, *, grid_stored: bool) -> None:
    """Issue 38's criteria, fixed before the runs: bisect's samples <= 0.08 of the grid's; its turning point
    within one grid step of the grid's on every seed; no worse than one full run per batch (samples, and
    agreement with the grid)."""
    from cbs_ray.spec.load import load_spec

    spec = load_spec(results["space"], results["overrides"])
    from cbs_ray.spec.sections import spec_tolerances

    tol, mode = spec_tolerances(spec)[0], spec.search.mode  # the space's unit (issue 50: nats for a loss)
    tolerance = tol.value
    print(f"\n{GRID_CRITERIA}" + (" (grid figures stored from an earlier run)" if grid_stored else ""))
    print("seed  grid tp  bisect tp  one-per-batch tp  bisect/grid samples  one-per-batch/grid  bisect wall s  "
          "one-per-batch wall s")
    met = []
    for seed, runs in sorted(results["seeds"].items()):
        grid, bisect, one = runs.get("grid", {}), runs.get("bisect", {}), runs.get("one-per-batch", {})
        if "samples" not in grid or "samples" not in bisect:
            print(f"{seed}: missing: {[r.get('error') for r in (grid, bisect, one)]}")
            met.append(False)
            continue
        grid_tp = monotone_turning_point(grid, tolerance, mode, relative=tol.relative)
        ratio = bisect["samples"] / grid["samples"]
        one_ratio = one["samples"] / grid["samples"] if "samples" in one else math.nan
        agree = within_one_step(grid_tp, bisect["turning_point_monotone"])
        one_agree = within_one_step(grid_tp, one.get("turning_point_monotone"))
        met.append(ratio <= 0.08 and agree and (agree or not one_agree) and not ratio > one_ratio)
        print(f"{seed:>4}  {grid_tp:>7}  {bisect['turning_point_monotone']:>9}  "
              f"{str(one.get('turning_point_monotone')):>16}  {ratio:>19.3f}  {one_ratio:>18.3f}  "
              f"{bisect['wall_s']:>13}  {str(one.get('wall_s')):>20}")
    print(f"RESULT bisect: criteria met on {sum(met)}/{len(met)} seeds")


def strategy_overrides(name: str, overrides: list[str], runs: dict, batches: int) -> list[str]:
    """The overrides of one strategy's experiment (random: as many trials as the search ran; one per batch: as
    many as the batches, the seeded points)."""
    extra = {"random": [f"search.num_trials={runs.get('cbs-ray', {}).get('trials')}"],
             "one-per-batch": [f"search.num_trials={batches}"]}.get(name, [])
    return overrides + STRATEGIES[name] + extra


def start_results(args) -> dict:
    """The results to fill: an existing ``--out`` of the same space and overrides less the seeds run now; with
    ``bisect``, issue 38's criteria printed before anything trains."""
    results = {"space": args.space, "overrides": args.overrides, "seeds": {}}
    earlier = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
    if (earlier.get("space"), earlier.get("overrides")) == (args.space, args.overrides):
        results["seeds"] = {k: v for k, v in earlier["seeds"].items() if int(k) not in args.seeds}
        print(f"adding to {args.out} (seeds {sorted(results['seeds'])} kept from it)")
    if "bisect" in args.strategies:
        if {"grid", "one-per-batch"} & set(args.strategies) or args.grid_from:
            print(GRID_CRITERIA, flush=True)
        if "cbs-ray" in args.strategies:
            print(SEARCH_CRITERIA, flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--space", default=str(ROOT / "search_spaces" / "sst2_tiny_cpu.yaml"))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", default=str(ROOT / "bench" / "search_cost.json"))
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES))
    parser.add_argument("--grid-from", default=None, help="an earlier run's JSON to take the grid's figures from")
    args = parser.parse_args()
    if args.grid_from:
        stored = json.loads(Path(args.grid_from).read_text())

    import logging

    import ray

    from cbs_ray.spec.load import load_spec
    from cbs_ray.tune.runner import SearchInterrupted

    results = start_results(args)
    batches = len(load_spec(args.space, args.overrides).batch_sizes)
    ray.init(include_dashboard=False, logging_level=logging.WARNING)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for seed in args.seeds:
                runs = results["seeds"].setdefault(str(seed), {})
                if args.grid_from:
                    runs["grid"] = {**stored["seeds"][str(seed)]["grid"], "stored": args.grid_from}
                for name in STRATEGIES:
                    if name not in args.strategies or (name == "grid" and args.grid_from):
                        continue
                    overrides = strategy_overrides(name, args.overrides + [f"search.seed={seed}"], runs, batches)
                    try:
                        runs[name] = measure(args.space, overrides, f"{tmp}/ray", f"{tmp}/out/{seed}-{name}")
                    except (Exception, SearchInterrupted) as e:  # keep the other experiments' figures
                        runs[name] = {"error": f"{type(e).__name__}: {e}", **unfinished(e)}
                    print(f"seed {seed} {name}: {json.dumps(runs[name])}", flush=True)
                    Path(args.out).write_text(json.dumps(results, indent=2))
    finally:
        ray.shutdown()

    if "bisect" in args.strategies and ({"grid", "one-per-batch"} & set(args.strategies) or args.grid_from):
        report_bisect(results, grid_stored=bool(args.grid_from))
    if {"bisect", "cbs-ray"} <= set(args.strategies):
        report_against_search(results)
    if not {"cbs-ray", "random"} <= set(args.strategies):  # the issue-7 table needs both
        print(f"results: {args.out}")
        return
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
