"""Issue 26's targets on the tiny causal LM (CPU, offline): branch mode read as Merrill et al. 2025 read it,
and its schedule against the fixed-batch frontier, as a user runs them.

The success criteria are the code's, fixed before any of these runs (``methods.branch.reading_verdicts``,
the paper's ε = 0.01 nats, the power check's 2ε, the close-call rule); this script only runs and prints:

1. ``default``: ``--set search.method=branch --validate-schedule`` (one run per batch; the validation on
   ``branch.validation_seeds`` = 3 seeds) — wall time (the whole search plus its validation), CBS(t) with its
   intervals, the schedule against the frontier, the cost of trunk + branches against a from-scratch grid;
2. ``repeats``: the same with ``branch.repeats=3`` — CBS(t) with a standard error per comparison (3 seeds of
   every branch and of the trunk's continuation) and whether it decreases beyond its noise; its own schedule
   and validation;
3. ``keep`` / ``reset`` (and ``keep1024`` / ``reset1024``): one checkpoint (2048 samples; 1024), ``branch.repeats=3``,
   Adam's state kept (the paper's) vs reset — CBS there and each batch's mean loss ± its standard error.

Tune experiments and reports go to a temporary directory. Starts Ray once per search, one after the other:
run it under the machine's Ray lock (``flock /tmp/ray.lock python bench/branch_paper.py``); ≈ 15 min on 2 cores.

    python bench/branch_paper.py [--only default,repeats,keep,reset,keep1024,reset1024]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPACE = "search_spaces/tiny_causal_lm.yaml"
RUNS = {
    "default": ["--validate-schedule"],
    "repeats": ["--validate-schedule", "--set", "branch.repeats=3"],
    "keep": ["--set", "branch.repeats=3", "--set", "branch.checkpoints=[2048]"],
    "reset": ["--set", "branch.repeats=3", "--set", "branch.checkpoints=[2048]", "--set",
              "branch.optimizer_state=reset"],
    "keep1024": ["--set", "branch.repeats=3", "--set", "branch.checkpoints=[1024]"],
    "reset1024": ["--set", "branch.repeats=3", "--set", "branch.checkpoints=[1024]", "--set",
                  "branch.optimizer_state=reset"],
}


def search(args: list[str], tmp: Path, tag: str) -> tuple[float, dict]:
    """Run the CLI; (wall seconds, summary.json)."""
    out = tmp / tag
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cbs_ray.search", "--space", SPACE, "--set", "search.method=branch",
                           *args, "--set", f"storage_path={tmp / 'rr'}", "--output", str(out)],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"{tag} search failed ({proc.returncode}): {proc.stderr[-800:]}")
    return wall, json.loads((out / "summary.json").read_text())


def point_line(p: dict) -> str:
    if p["trunk_loss"] is None:
        return f"{p['samples_seen']}: undetermined"
    cells = []
    for o in p["branches"]:
        se = f"±{o['standard_error']:.4f}" if o.get("standard_error") is not None else ""
        loss = f"{o['loss']:.4f}{se}" if o["loss"] is not None else o["status"]
        cells.append(f"B={o['batch_size']} {loss}" + ("" if o["status"] in ("trunk", "recovers") else " ✗"))
    interval = p["interval"]
    cbs = f"CBS {p['batch_size']} in [{interval[0]}, {interval[1] or '∞'})" if p["resolvable"] else \
        f"not resolvable (trunk moved {p['trunk_improvement']:.4f} < 2ε)"
    return (f"{p['samples_seen']}: {cbs}{' (close call)' if p['close_call'] else ''}; " + ", ".join(cells))


def report(tag: str, wall: float, s: dict) -> None:
    print(f"RESULT {tag}: wall {wall:.0f} s ({wall / 60:.1f} min)")
    for p in s["critical_batch_over_training"]:
        print(f"RESULT {tag}:   {point_line(p)}")
    print(f"RESULT {tag}: trend {s['trend']['verdict']} (holds: {s['trend']['holds']}); schedule "
          f"{s['batch_size_schedule']} at alpha {s['schedule_alpha']}")
    v = s.get("schedule_validation")
    if v:
        for c in v["controls"]:
            ci = c["final_loss_ci95"]
            print(f"RESULT {tag}:   {c['name']:9s} B={str(c['batch_size'] or '-'):>4} {c['steps']:5d} steps, loss "
                  f"{c['final_loss_mean']:.4f} [{ci[0]:.4f}, {ci[1]:.4f}] ({c['seeds']} seeds)")
        ni = v["non_inferiority"] or {}
        print(f"RESULT {tag}: below the frontier: {v['below_frontier']['holds']}; non-inferior to the small batch: "
              f"{ni.get('holds')}; {v['steps_saved_vs_small']:.0%} fewer steps than the small batch")
    branches = s["samples_by_role"].get("trunk", 0) + s["samples_by_role"].get("branch", 0)
    print(f"RESULT {tag}: trunk + branches {branches} samples = {branches / s['scratch_samples']:.2f} of the "
          f"from-scratch grid over the same batches ({s['scratch_samples']}); target <= 0.5")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(RUNS), help="comma-separated runs: " + ", ".join(RUNS))
    tags = parser.parse_args().only.split(",")
    with tempfile.TemporaryDirectory() as name:
        for tag in tags:
            wall, summary = search(RUNS[tag], Path(name), tag)
            report(tag, wall, summary)


if __name__ == "__main__":
    main()
