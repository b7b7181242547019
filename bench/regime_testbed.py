"""Issue 57's acceptance of the pre-training-regime testbed, pre-registered here before any run (``--dry-run`` prints
the protocol and stops). Nothing below may change once a run has been made; a miss is reported, not tuned away.

**What it checks.** The two findings Zhang et al. 2025 ("How Does Critical Batch Size Scale in Pre-training?",
arXiv 2410.21676) report for real pre-training, on both built-in corpora of the testbed (the markov language,
``search_spaces/markov_lm.yaml``, and the Python standard library's sources, ``search_spaces/python_source_lm.yaml``):

1. **B_crit grows with D**: at a fixed model, the local exponent of B_crit ∝ D^γ is within ``EXPONENT_BAND``
   ([0.3, 0.8]) over at least ``MIN_SPAN`` (8×) in D;
2. **B_crit hardly depends on the model at a fixed D**: across the size family (``SIZES``: ≥ 4× in parameters),
   B_crit at D changes by at most ``MAX_SIZE_RATIO`` (1.5×).

**Settings, by a rule that does not look at outcomes.** Each corpus at each size of its family (``SIZES``: the
space's model at ``n_embd`` 8, 16 and 32, one layer, two heads: 5.9× in parameters on the markov language and 6.7×
on the Python sources), at the space's own D (22.1 and 22.8 tokens per parameter for the largest size, more for the
smaller: D is one number per corpus, as the second finding needs), the space's batch grid (4…512), its LR rule
(alpha 0.5, constant after warmup) and its ladder (rungs from 1/16 of D, ≥ 1.4 tokens per parameter for the largest
size, to D/2; ``ladder.seeds`` 2), ``search.seed`` 0. One run per (corpus, size) is a ladder with
``--validate-prediction`` (``python -m cbs_ray.search --space SPACE --set search.method=ladder --validate-prediction``):
its rungs read B_crit at D/16 … D/2 and its validation measures B_crit at D on seeds of its own.

**Readings** (``judge``): B_crit is McCandlish et al.'s E_min/S_min (the ladder's rung reading and its measurement at
D); Zhang et al.'s 20 % overhead rule is printed beside it, not judged. A reading counts only when it lies inside the
batch grid (``search.batch_sizes``) and the rung has ≥ 1 token per parameter; every other reading is printed and left
out (censored, named as such). **Finding 1**: the least-squares slope of log B_crit on log D over the counted rungs and
the measurement at D, per (corpus, size), where the counted points span ≥ 8× in D; its value in the band on every
(corpus, size) is the acceptance. **Finding 2**: per corpus, max/min of B_crit at D over the sizes ≤ 1.5.

**Amendment, after the first run (markov:32) and before any other, by the issue's own rule** ("every B_crit read
inside the batch grid: widen the grid rather than extrapolate"): its B_crit at D read 256.07 on a grid ending at 256, at
the edge, so both spaces' grids were widened to 4…512 and markov:32 trained again; the first run is kept in
``regime_testbed_runs/superseded/``. The judge's reading of D was also corrected then: it had taken
``measurement_samples`` (every sample the measurement trained, 906 752) for D instead of the budget (40 960). No
criterion, setting or threshold above changed. The widened grid made the Python space's ladder refuse (B=512 had 8
steps to the fraction, under its ``ladder.min_steps`` 16): its three runs failed before training, and the space's
floor became 8 steps and its first rung 1/16 of D (1/32 was under one batch of 512: refused the same way;
``search_spaces/python_source_lm.yaml``) before any of them trained.

**Cost** (``CPU_SECONDS_PER_RUN``): ≈ 12 min a run on the shared 2 cores beside other work (the largest size: 704 s for the first),
6 runs ≈ 1 h. Run under the machine's Ray lock, one run per locked job, each kept as it ends:

    python bench/regime_testbed.py --dry-run
    flock /tmp/cbs-ray-ray.lock python bench/regime_testbed.py --only markov:32 --keep bench/regime_testbed_runs
    python bench/regime_testbed.py --judge bench/regime_testbed_runs
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

SPACES = {"markov": "search_spaces/markov_lm.yaml", "python_source": "search_spaces/python_source_lm.yaml"}
SIZES = {"markov": (8, 16, 32), "python_source": (8, 16, 32)}
"""``model.config.n_embd`` of the size family (n_layer 1, n_head 2, the space's other keys)."""
PROTOCOL_SETS = ("search.method=ladder", "ladder.seeds=2", "search.seed=0")
EXPONENT_BAND = (0.3, 0.8)
MIN_SPAN = 8.0
MAX_SIZE_RATIO = 1.5
MIN_TOKENS_PER_PARAMETER_AT_RUNG = 1.0
CPU_SECONDS_PER_RUN = 720


def protocol_lines() -> list[str]:
    runs = [f"{corpus}:{width}" for corpus in SPACES for width in SIZES[corpus]]
    return [f"PROTOCOL issue 57 acceptance (fixed before any run): runs {runs}; spaces {SPACES}; sets {PROTOCOL_SETS} "
            f"+ model.config.n_embd=W + --validate-prediction",
            f"PROTOCOL finding 1: slope of log B_crit on log D over rungs inside the grid with >= "
            f"{MIN_TOKENS_PER_PARAMETER_AT_RUNG} token per parameter and the measurement at D, span >= {MIN_SPAN}x, "
            f"in {list(EXPONENT_BAND)} on every (corpus, size)",
            f"PROTOCOL finding 2: per corpus, max/min B_crit at D over the sizes <= {MAX_SIZE_RATIO}",
            f"PROTOCOL cost: {len(runs)} runs x <= {CPU_SECONDS_PER_RUN} s on the shared 2 cores"]


def validated_search_argv(space: str, out: Path, sets) -> list[str]:
    """The command of one run with ``--validate-prediction``: its Ray results under ``out/ray_results``, its report in
    ``out/report``, each of ``sets`` a ``--set`` (also ``bench/prediction_validation_regime.py``'s)."""
    argv = [sys.executable, "-m", "cbs_ray.search", "--space", space, "--validate-prediction",
            "--set", f"storage_path={out / 'ray_results'}", "--output", str(out / "report")]
    for s in sets:
        argv += ["--set", s]
    return argv


def run(corpus: str, width: int, keep: Path, work: Path) -> dict:
    """One (corpus, size): the ladder with its validation (its Ray results and report under ``work``), kept as
    ``keep/<corpus>-<width>.json`` (the summary's ladder, prediction and validation, the parameters, the wall time
    and the commit)."""
    out = work / f"{corpus}-{width}"
    argv = validated_search_argv(SPACES[corpus], out, (*PROTOCOL_SETS, f"model.config.n_embd={width}"))
    dry = subprocess.run([*argv, "--dry-run"], capture_output=True, text=True)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"{corpus}:{width} failed ({proc.returncode}): {proc.stderr[-1500:]}")
    summary = json.loads((out / "report" / "summary.json").read_text())
    params = next(int(line.split()[1].replace(",", "")) for line in dry.stdout.splitlines()
                  if line.startswith("model: "))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    row = {"corpus": corpus, "width": width, "parameters": params, "wall_s": round(wall, 1), "commit": commit,
           "tokens_per_sample": 16 if corpus == "markov" else 64, "batch_sizes": summary["batch_sizes"],
           "ladder": summary["ladder"], "prediction": summary["prediction"],
           "prediction_validation": summary["prediction_validation"]}
    (keep / f"{corpus}-{width}.json").write_text(json.dumps(row, indent=1))
    return row


def readings(row: dict) -> list[dict]:
    """Every B_crit reading of a run, rungs then D: samples, tokens per parameter, B_crit, the 20 % rule, and
    whether it counts (inside the grid, ≥ 1 token per parameter) or why not."""
    low, high = min(row["batch_sizes"]), max(row["batch_sizes"])
    per_param = row["tokens_per_sample"] / row["parameters"]
    points = [(r["samples_seen"], r["b_crit"], r["overhead_20pct"], "rung") for r in row["ladder"]["rungs"]]
    v = row["prediction_validation"]
    points.append((row["prediction"]["budget_samples"], v["measured_b_crit"], v["measured_overhead_20pct"], "D"))
    out = []
    for samples, b_crit, overhead, where in points:
        tpp = samples * per_param
        why = ("no reading" if b_crit is None or not math.isfinite(b_crit) else
               f"below the grid ({low})" if b_crit < low else f"above the grid ({high})" if b_crit > high else
               f"{tpp:.2g} tokens per parameter < 1" if tpp < MIN_TOKENS_PER_PARAMETER_AT_RUNG else None)
        out.append({"where": where, "samples": samples, "tokens_per_parameter": tpp, "b_crit": b_crit,
                    "overhead_20pct": overhead, "left_out": why})
    return out


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of log y on log x; None with fewer than two distinct x."""
    if len({x for x, _ in points}) < 2:
        return None
    lx = [math.log(x) for x, _ in points]
    ly = [math.log(y) for _, y in points]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def judge(keep: Path) -> int:
    rows = {(r["corpus"], r["width"]): r for r in (json.loads(p.read_text()) for p in sorted(keep.glob("*.json")))}
    missing = [f"{c}:{w}" for c in SPACES for w in SIZES[c] if (c, w) not in rows]
    if missing:
        print(f"missing runs: {missing}")
    verdicts = []
    for corpus in SPACES:
        at_d = {}
        for width in SIZES[corpus]:
            row = rows.get((corpus, width))
            if row is None:
                continue
            counted = []
            print(f"{corpus} n_embd {width} ({row['parameters']:,} parameters, {row['wall_s']:.0f} s, {row['commit']}):")
            for r in readings(row):
                fmt = "none" if r["b_crit"] is None else f"{r['b_crit']:.1f}"
                print(f"  {r['where']:4} {r['samples']:>8.0f} samples {r['tokens_per_parameter']:6.2f} tok/param "
                      f"B_crit {fmt:>7} (20 % rule {r['overhead_20pct']}){'  left out: ' + r['left_out'] if r['left_out'] else ''}")
                if r["left_out"] is None:
                    counted.append((r["samples"], r["b_crit"]))
                if r["where"] == "D" and r["left_out"] is None:
                    at_d[width] = r["b_crit"]
            span = max(x for x, _ in counted) / min(x for x, _ in counted) if counted else 0.0
            gamma = slope(counted)
            ok = gamma is not None and span >= MIN_SPAN and EXPONENT_BAND[0] <= gamma <= EXPONENT_BAND[1]
            verdicts.append(ok)
            print(f"  finding 1: exponent {'none' if gamma is None else f'{gamma:.2f}'} over {span:.1f}x in D "
                  f"({len(counted)} readings): {'met' if ok else 'missed'}")
        if len(at_d) == len(SIZES[corpus]):
            ratio = max(at_d.values()) / min(at_d.values())
            verdicts.append(ratio <= MAX_SIZE_RATIO)
            print(f"{corpus} finding 2: B_crit at D by width {({w: round(b, 1) for w, b in at_d.items()})}: "
                  f"max/min {ratio:.2f} ({'met' if ratio <= MAX_SIZE_RATIO else 'missed'})")
        else:
            verdicts.append(False)
            print(f"{corpus} finding 2: not judged (a reading at D missing or left out: {sorted(at_d)})")
    print(f"acceptance: {'met' if verdicts and all(verdicts) and not missing else 'missed'}")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print the protocol and stop")
    parser.add_argument("--only", help="CORPUS:WIDTH, one run (e.g. markov:32)")
    parser.add_argument("--keep", type=Path, help="folder where each run's figures are written as it ends")
    parser.add_argument("--judge", type=Path, help="pool the kept runs and print the acceptance")
    parser.add_argument("--work", type=Path, default=Path("/tmp/regime_testbed"),
                        help="where the runs' Ray results and reports go (default /tmp/regime_testbed)")
    args = parser.parse_args()
    print("\n".join(protocol_lines()), flush=True)
    if args.dry_run:
        return
    if args.judge:
        sys.exit(judge(args.judge))
    keep = args.keep or Path("bench/regime_testbed_runs")
    keep.mkdir(parents=True, exist_ok=True)
    todo = [tuple(args.only.split(":"))] if args.only else [(c, str(w)) for c in SPACES for w in SIZES[c]]
    for corpus, width in todo:
        if (keep / f"{corpus}-{width}.json").exists():
            print(f"{corpus}:{width} kept already: not trained again", flush=True)
            continue
        row = run(corpus, int(width), keep, args.work)
        print(f"{corpus}:{width} done in {row['wall_s']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
