"""Both readings of the turning point (raw bests, monotone fit) from a search-cost bench's JSON.

Re-reads the per-batch bests ``bench/search_cost.py`` recorded, with the reporter's own function; no
training. For an older run, pass its JSON from git, e.g.

    git show fec46f4:bench/search_cost.json > /tmp/run3.json
    python bench/turning_point_readings.py /tmp/run3.json [--tolerance 0.02]
"""

from __future__ import annotations

import argparse
import json
import math

from cbs_ray.maths.critical_batch import turning_point
from search_cost import within_one_step  # bench/ is on sys.path when a bench script runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", default="bench/search_cost.json")
    parser.add_argument("--tolerance", type=float, default=0.02)
    args = parser.parse_args()
    seeds = json.loads(open(args.results).read())["seeds"]
    agree = {"raw": 0, "monotone": 0}
    for seed, runs in seeds.items():
        readings = {}
        for name in ("grid", "cbs-ray", "random"):
            bests = {int(b): v for b, v in runs[name]["per_batch_best"].items()}
            batches = sorted(bests)
            metrics = [math.nan if bests[b] is None else bests[b] for b in batches]
            readings[name] = {fit: turning_point(batches, metrics, tolerance=args.tolerance,
                                                 monotone=fit == "monotone") for fit in agree}
        for fit in agree:
            agree[fit] += within_one_step(readings["grid"][fit], readings["cbs-ray"][fit])
        print(f"seed {seed}: raw / monotone  " + "  ".join(
            f"{name} {r['raw']} / {r['monotone']}" for name, r in readings.items()))
    print("RESULT within one grid step of the grid: " + ", ".join(
        f"{fit} {n}/{len(seeds)}" for fit, n in agree.items()))


if __name__ == "__main__":
    main()
