"""Issue 19's targets on the tiny causal LM (CPU, offline), side by side, as a user runs them:

1. branch mode with the schedule validated:
   ``python -m cbs_ray.search --space search_spaces/tiny_causal_lm.yaml --set search.method=branch
   --validate-schedule`` — its wall time, CBS(t), the recommended schedule, the trend verdict, and the
   schedule run against the trunk's fixed small batch (optimizer steps saved, final eval loss difference;
   target: within 1 %, ≥ 25 % fewer steps);
2. the from-scratch search of the same space (``python -m cbs_ray.search --space
   search_spaces/tiny_causal_lm.yaml``, as shipped: TPE, ASHA, a repeat per batch size) over the same batch
   sizes (the trunk's and the branches', ``--set search.batch_sizes=[...]``) — the samples each trains, from their history.csv (target: branch mode ≤ 0.5 of from-scratch),
   besides the from-scratch grid of the same batches × alphas without early stopping (summary.json's
   ``scratch_samples``).

Results and Tune experiments go to a temporary directory. Starts Ray twice, one search after the other:
run it under the machine's Ray lock where several people share it (``flock /tmp/ray.lock python
bench/branch_targets.py``).

    python bench/branch_targets.py [--skip-scratch] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

SPACE = "search_spaces/tiny_causal_lm.yaml"


def search(args: list[str], tmp: Path, tag: str) -> tuple[float, Path]:
    """Run the CLI; (wall seconds, output directory)."""
    out = tmp / tag
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cbs_ray.search", "--space", SPACE, *args,
                           "--set", f"storage_path={tmp / 'rr'}", "--output", str(out)], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"{tag} search failed ({proc.returncode}): {proc.stderr[-800:]}")
    print(f"--- {tag} ({wall:.0f} s): the last lines it printed", flush=True)
    print("\n".join(proc.stdout.strip().splitlines()[-14:]), flush=True)
    return wall, out


def samples_trained(history: pd.DataFrame) -> int:
    """Samples every trial trained: its last ``samples_seen`` minus where it started (a branch starts at
    its checkpoint)."""
    total = 0
    for _, run in history.groupby("trial_id"):
        start = int(run["start_samples"].iloc[0]) if "start_samples" in run and run["start_samples"].notna().any() else 0
        total += int(run["samples_seen"].max()) - start
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-scratch", action="store_true", help="only the branch search")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="an override for both searches")
    args = parser.parse_args()
    sets = [a for o in args.overrides for a in ("--set", o)]
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        wall, out = search(["--set", "search.method=branch", "--validate-schedule", *sets], tmp, "branch")
        summary = json.loads((out / "summary.json").read_text())
        branch_history = pd.read_csv(out / "history.csv")
        searched = samples_trained(branch_history[branch_history["role"] != "schedule"])
        scratch_samples = None
        if not args.skip_scratch:
            # Over the same batch sizes: the trunk's and the branches'.
            batches = sorted({summary["trunk"]["batch_size"], *summary["branch_batches"]})
            scratch_wall, scratch_out = search(["--set", f"search.batch_sizes={batches}", *sets], tmp, "scratch")
            scratch_samples = samples_trained(pd.read_csv(scratch_out / "history.csv"))
    cbs = ", ".join(f"{p['samples_seen']}: {p['batch_size']}{' (' + p['bound'] + ' bound)' if p.get('bound') else ''}"
                    for p in summary["critical_batch_over_training"])
    print(f"RESULT branch search wall time {wall:.0f} s ({wall / 60:.1f} min, schedule run included)")
    print(f"RESULT CBS(t) by samples seen: {cbs}; schedule {summary['batch_size_schedule']}")
    print(f"RESULT trend: {summary['trend']['verdict']} — {summary['trend']['text']}")
    v = summary.get("schedule_validation")
    print("RESULT schedule: " + (v["text"] if v else "not run (the schedule keeps the trunk's batch)"))
    grid = summary.get("scratch_samples")
    print(f"RESULT cost: branch search {searched} samples (trunk + branches) = "
          f"{searched / grid:.2f} of the from-scratch grid over the same batches x alphas ({grid})"
          + (f", {searched / scratch_samples:.2f} of the shipped from-scratch search ({scratch_samples} samples, "
             f"{scratch_wall:.0f} s)" if scratch_samples else "") + "; target <= 0.5")


if __name__ == "__main__":
    main()
