"""Is the embedded default's answer stable? Runs `python -m cbs_ray.search --set search.seed=N` for each
search seed, exactly as a user would, and prints each run's critical batch, verdict and wall time
(issue 38's target: all 128 and resolved, the median wall time within 90 s on 2 cores).

    python bench/default_stability.py                  # seeds 0 1 2
    python bench/default_stability.py --seeds 0 1 2 3 --keep /tmp/stability   # keeps each run's output
    python bench/default_stability.py --set search.strategy=tpe                 # another strategy, side by side

Runs one search at a time (each starts and stops its own local Ray).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_default(seed: int, directory: Path, overrides: list[str] = ()) -> dict:
    """One default search with ``search.seed=seed`` (and ``overrides``); its answer from summary.json and its
    wall time."""
    start = time.perf_counter()
    extra = [arg for override in overrides for arg in ("--set", override)]
    proc = subprocess.run([sys.executable, "-m", "cbs_ray.search", *extra, "--set", f"search.seed={seed}",
                           "--set", f"storage_path={directory}/ray_results", "--output", str(directory / "out")],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    (directory / "stdout.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode:
        return {"seed": seed, "wall_s": wall, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    summary = json.loads((directory / "out" / "summary.json").read_text())
    answer, turning = summary["answer"], summary["critical_batch"]["turning_point"]
    return {"seed": seed, "wall_s": wall, "critical_batch": answer["batch_size"], "bound": answer["bound"],
            "resolved": answer["resolved"], "cross_checks_agree": answer["cross_checks_agree"],
            "tradeoff": summary["critical_batch"]["tradeoff"]["b_crit"],
            "overhead_20pct": summary["critical_batch"]["overhead_20pct"]["batch_size"],
            "raw": turning.get("raw_batch_size"), "answer": answer["text"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--keep", help="keep each run's stdout, summary and experiment under this directory")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        runs = []
        for seed in args.seeds:
            directory = root / f"seed{seed}"
            directory.mkdir(parents=True, exist_ok=True)
            run = run_default(seed, directory, args.overrides)
            runs.append(run)
            if "error" in run:
                print(f"seed {seed}: failed after {run['wall_s']:.0f} s: {run['error']}", flush=True)
                continue
            tradeoff = f"{run['tradeoff']:.0f}" if run["tradeoff"] is not None else "n/a"
            print(f"seed {seed}: {run['answer']}\n  wall {run['wall_s']:.0f} s; tradeoff B_crit {tradeoff}, "
                  f"20% rule {run['overhead_20pct']}, raw walk {run['raw']}", flush=True)
    answers = {(r.get("critical_batch"), r.get("bound")) for r in runs}
    stable = all(r.get("resolved") for r in runs) and len(answers) == 1
    walls = sorted(r["wall_s"] for r in runs)
    print(f"RESULT {' '.join(args.overrides) or 'default'}: "
          f"{'all resolved and equal' if stable else 'NOT all resolved and equal'}: "
          f"critical batch {sorted(str(a[0]) for a in answers)} over seeds {args.seeds}; "
          f"median wall {walls[len(walls) // 2]:.0f} s, slowest {walls[-1]:.0f} s (target: median <= 90 s)")


if __name__ == "__main__":
    main()
