"""Issue 37's validation of branch mode's schedule (CPU, offline), as a user runs it: ``--set
search.method=branch --validate-schedule`` with the defaults, on the built-in ``markov`` task
(``bench/spaces/markov_lm_2tpp.yaml``) and on the tiny causal LM (``search_spaces/tiny_causal_lm.yaml``), the
validation on ``branch.validation_seeds`` = 3 seeds held out from the trunk's.

The criteria are fixed here and in ``methods.branch.reading_verdicts`` before any run, and printed before the first
search starts; this script only runs, reads ``summary.json`` and prints the verdicts (``RESULT`` lines) and
the tables docs/benchmarks-archive.md#issue-37 records:

- on ``markov``: CBS(t) at >= 3 resolvable checkpoints and not decreasing beyond its noise
  (``trend.holds``); the schedule non-inferior to the small batch at ε (``non_inferiority.holds``) and below
  the interpolated fixed-batch frontier beyond its noise (``below_frontier.holds``); the steps it saves
  against the best non-inferior fixed batch, with its interval (reported beside the paper's 43 %, not a pass
  mark); the whole search with its validation within 15 min on 2 cores;
- on the tiny LM: the same verdicts, whatever they are (its trunk saturates: issue 26).

Tune experiments and reports go to a temporary directory (``--keep DIR`` keeps them). Starts Ray once per
task: run it under the machine's CPU lock (``flock /tmp/cbs-cpu.lock python bench/branch_validation.py``).

    python bench/branch_validation.py [--only markov,tiny_lm] [--set key=value ...] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASKS = {"markov": "bench/spaces/markov_lm_2tpp.yaml", "tiny_lm": "search_spaces/tiny_causal_lm.yaml"}
WALL_TARGET_S = 15 * 60
MIN_RESOLVABLE = 3
CRITERIA = (
    f"markov: CBS(t) at >= {MIN_RESOLVABLE} resolvable checkpoints and not decreasing beyond its noise; the schedule "
    "non-inferior to the small batch and below the fixed-batch frontier by the paired tests of "
    "methods.branch.reading_verdicts (their text below, as the search prints it); steps saved against the best "
    f"non-inferior fixed batch with its interval (the paper: 43 %, an anchor, not a pass mark); wall <= "
    f"{WALL_TARGET_S} s. tiny_lm: the same verdicts, recorded whatever they are."
)


def search(space: str, sets: list[str], tmp: Path, tag: str) -> tuple[float, dict, str]:
    """Run the CLI; (wall seconds, summary.json, what it printed)."""
    out = tmp / tag
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cbs_ray.search", "--space", space, "--set", "search.method=branch",
                           "--validate-schedule", *sets, "--set", f"storage_path={tmp / 'rr'}", "--output", str(out)],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"{tag} search failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return wall, json.loads((out / "summary.json").read_text()), proc.stdout


def _f(value, spec: str = ".4f") -> str:
    return "–" if value is None else format(value, spec)


def cbs_table(s: dict) -> list[str]:
    rows = ["| checkpoint | CBS(t), interval | resolvable (trunk's move) | each batch's loss at t + Δ (✗ fails) |",
            "| --- | --- | --- | --- |"]
    for p in s["critical_batch_over_training"]:
        cells = ", ".join(f"{o['batch_size']} {_f(o['loss'])}" + ("" if o["status"] in ("trunk", "recovers") else " ✗")
                          for o in p["branches"])
        interval = p["interval"] or [None, None]
        rows.append(f"| {p['samples_seen']} | {p['batch_size']}{' (' + p['bound'] + ' bound)' if p['bound'] else ''}, "
                    f"[{interval[0]}, {interval[1] or '∞'}]{' close call' if p['close_call'] else ''} | "
                    f"{'yes' if p['resolvable'] else 'no'} ({_f(p['trunk_improvement'])}) | {cells} |")
    return rows


def validation_tables(v: dict) -> list[str]:
    rows = ["| run | batch | steps | final eval loss, mean [95 % CI] | by seed |", "| --- | --- | --- | --- | --- |"]
    for c in v["controls"]:
        ci = c["final_loss_ci95"] or [None, None]
        seeds = ", ".join(f"{k}: {x:.4f}" for k, x in c["final_losses"].items())
        rows.append(f"| {c['name']} | {c['batch_size'] or 'schedule'} | {c['steps']} | {_f(c['final_loss_mean'])} "
                    f"[{_f(ci[0])}, {_f(ci[1])}] | {seeds} |")
    ni, below, saved = v["non_inferiority"] or {}, v["below_frontier"], v["steps_saved"]
    interval = saved["interval"] or [None, None]
    rows += ["", "| test | mean difference | one-sided 95 % bound | line | verdict |",
             "| --- | --- | --- | --- | --- |",
             f"| non-inferior to the small batch | {_f(ni.get('difference_mean'), '+.4f')} | "
             f"{_f(ni.get('upper_95'), '+.4f')} | < ε = {ni.get('margin')} | {ni.get('holds')} |",
             f"| below the frontier (at {below['steps']} steps, frontier {_f(below['frontier_loss'])} between "
             f"B={below['between']}) | {_f(below['difference_mean'], '+.4f')} | {_f(below['upper_95'], '+.4f')} | "
             "< 0 | "
             f"{below['holds']} |",
             f"| steps saved against B={saved['against_batch']} ({saved['against_steps']} steps) | "
             f"{_f(saved['fraction'], '.0%')} | interval [{_f(interval[0], '.0%')}, {_f(interval[1], '.0%')}] | – | "
             f"{_f(v['steps_saved_vs_small'], '.0%')} against the small batch |"]
    return rows


def report(tag: str, wall: float, s: dict) -> None:
    resolvable = sum(1 for p in s["critical_batch_over_training"] if p["resolvable"])
    print(f"RESULT {tag}: wall {wall:.0f} s ({wall / 60:.1f} min); resolvable checkpoints {resolvable}; trend "
          f"{s['trend']['verdict']} (holds: {s['trend']['holds']}); schedule {s['batch_size_schedule']} "
          f"({s['schedule_rule']})")
    for line in cbs_table(s):
        print(f"TABLE {tag}: {line}")
    if s.get("loss_comparison"):
        print(f"RESULT {tag}: CBS(t) eval vs train_ema: " + "; ".join(
            f"{c['samples_seen']}: {c['eval']['batch_size']}{'' if c['eval']['resolvable'] else ' (nr)'} vs "
            f"{c['train_ema']['batch_size']}{'' if c['train_ema']['resolvable'] else ' (nr)'}"
            for c in s["loss_comparison"]))
    v = s.get("schedule_validation")
    if not v:
        print(f"RESULT {tag}: no validation (the schedule kept the trunk's batch)")
        return
    for line in validation_tables(v):
        print(f"TABLE {tag}: {line}")
    ni, below = v["non_inferiority"] or {}, v["below_frontier"]
    verdicts = {"resolvable >= 3": resolvable >= MIN_RESOLVABLE, "trend holds": s["trend"]["holds"],
                "non-inferior": ni.get("holds"), "below the frontier": below["holds"],
                "steps saved with interval": v["steps_saved"]["fraction"] is not None,
                f"wall <= {WALL_TARGET_S} s": wall <= WALL_TARGET_S}
    print(f"RESULT {tag}: " + "; ".join(f"{k}: {val}" for k, val in verdicts.items()))
    branches = s["samples_by_role"].get("trunk", 0) + s["samples_by_role"].get("branch", 0)
    print(f"RESULT {tag}: samples trunk + branches {branches}, validation {s['samples_by_role'].get('schedule', 0)}; "
          f"cost ratio {s['cost_ratio']:.2f} of the from-scratch grid")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(TASKS), help="comma-separated tasks: " + ", ".join(TASKS))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--keep", default=None, help="keep experiments and reports in this directory")
    args = parser.parse_args()
    sets = [a for o in args.overrides for a in ("--set", o)]
    print(f"CRITERIA (fixed before the runs): {CRITERIA}", flush=True)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(args.keep or name)
        for tag in args.only.split(","):
            wall, summary, printed = search(TASKS[tag], sets, tmp, tag)
            criterion = next((line for line in printed.splitlines() if "criterion, fixed before" in line), "")
            print(f"RESULT {tag}: printed before its validation runs: {criterion.strip()[:160]}…", flush=True)
            report(tag, wall, summary)


if __name__ == "__main__":
    main()
