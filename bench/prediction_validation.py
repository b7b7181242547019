"""Issue 49's validation of the ladder's predictor (``maths.prediction``), pre-registered here before any run and
printed before the runs (``--dry-run`` prints it and stops). Nothing below may change once a run has been made.

**Settings, by a rule that does not look at outcomes** (``SETTINGS``): the four corners of the grid the issue names,
Zipf exponent a ∈ {1, 2} × coupling s ∈ {2, 3}, on a **fresh language** (``data.markov_seed`` 4049: no run of the
development data used it; they used 1234), one LR rule for all (``ladder.alpha`` 0.25: the one under which B=128 did not
stall on the peaked settings in issue 36; fixed before any run here), the space's ladder otherwise
(``bench/spaces/markov_lm_2tpp.yaml``: 2 runs per batch, rungs 384 … 3200, D = 16 384).

**Seeds** (``SEEDS``): ``search.seed`` 100, 102, 104, 106 for every setting (runs {S, S+1}; none used before). Each run
is a ladder with ``--validate-prediction`` (``bench/ladder_validation.py``'s ``run``); the ladder reads each run only
up to where it alone would have stopped it. **The measurement at D is taken on seeds disjoint from the ladder's**: the
prediction of seed ``SEEDS[i]`` is judged against B_crit(D) measured by the runs of seed ``SEEDS[(i + 1) % 4]`` of the
same setting (``pair``): four predictions and four measurements per setting, no prediction judged on its own runs.

**Primary endpoint** (``judge``): over the 16 pairs, the paired difference d = |log2(predicted / measured)| −
|log2(borrowed / measured)|, "borrowed" the best single exponent *of the same definition* (McCandlish's B_crit =
E_min/S_min: ``LITERATURE_EXPONENTS["mccandlish"]``, 0.452 and 0.68, each times the ladder's last rung, the better of
the two over the pooled pairs: a choice that favours the baseline). Its mean, with a 95 % CI clustered by setting:
the mean of the 4 settings' means ± t(0.975, 3) · sd / √4. Targets (``TARGETS``): **better** — mean ≤ −0.1 and the
CI's upper end ≤ 0; failing that **never worse** — mean ≤ +0.05 and the upper end ≤ +0.1; reported as whichever
holds, or **missed**.
**Coverage**: the measured B_crit(D) inside the prediction's 90 % interval on 80–97 % of the pairs.
**Decision**: the package's recommended batch (the largest power of two at or below the interval's lower end)
equals the measured one's power of two (2^⌊log2 B_crit(D)⌋) on ≥ 80 % of the pairs; the point prediction's power of
two is reported beside it (not a criterion).
Every pair is printed (setting, seed, rungs, exponent ± SE, source, prediction and interval, measured, each baseline).

**Secondary** (``--secondary``): the tiny LM and the SST-2 LM under the markov plan (``lm8``, ``sst2lm8`` of
``bench/ladder_validation.py``), one run each: a prediction labelled by its source, or a refusal with its reason.

**Cost** (``CPU_SECONDS_PER_RUN``): a markov ladder with its measurement, 2 runs per batch, took 153–245 s of wall
on the shared 2 cores in issue 36 (v2–v5; 190 s typical): 16 runs ≈ 51 min; the secondary tasks ≈ 16 min more. Run
under the machine's Ray lock, one seed per locked job:

    python bench/prediction_validation.py --dry-run
    flock /tmp/cbs-ray-ray.lock python bench/prediction_validation.py --only a1s3 --seeds 100 --keep DIR
    python bench/prediction_validation.py --judge DIR    # every summary under DIR, paired and scored
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ladder_validation as lv  # noqa: E402  (the bench beside this one: its run() and task table)

LANGUAGE_SEED = 4049
ALPHA = 0.25
SETTINGS = {f"a{a}s{s}": ("bench/spaces/markov_lm_2tpp.yaml", [f"data.markov_zipf_exponent={a}",
                                                         f"data.markov_coupling={s}", f"data.markov_seed={LANGUAGE_SEED}"])
            for a in (1, 2) for s in (2, 3)}
SEEDS = (100, 102, 104, 106)
PROTOCOL = {"sets": ["ladder.seeds=2", "ladder.min_warmup_steps=8", "ladder.step_count=lr_weighted",
                     f"ladder.alpha={ALPHA}"], "seeds": ",".join(map(str, SEEDS))}
TARGETS = {"better": (-0.1, 0.0), "never_worse": (0.05, 0.1), "coverage": (0.80, 0.97), "decision": 0.80}
T975_3 = 3.182446  # Student's t, 97.5th percentile, 3 degrees of freedom (4 settings)
CPU_SECONDS_PER_RUN = 190
SECONDARY = ("lm8", "sst2lm8")


def protocol_lines() -> list[str]:
    runs = len(SETTINGS) * len(SEEDS)
    return [f"PROTOCOL issue 49 (fixed before any run): settings {SETTINGS}",
            f"PROTOCOL sets {PROTOCOL['sets']}, search.seed {list(SEEDS)}; prediction of seed i judged against the "
            f"measurement of seed i+1 (mod {len(SEEDS)}) of the same setting",
            f"PROTOCOL primary: mean paired difference in |log2 error| vs the best single McCandlish-definition "
            f"borrowed exponent, 95 % CI clustered by setting (t 3 dof); targets {TARGETS}",
            f"PROTOCOL cost: {runs} runs × ≈ {CPU_SECONDS_PER_RUN} s ≈ {runs * CPU_SECONDS_PER_RUN / 60:.0f} min "
            f"on the shared 2 cores (+ ≈ 16 min with --secondary)"]


def pair(rows: list[dict]) -> list[dict]:
    """Each setting's prediction of seed i with the measurement of seed i+1 (mod the seeds run), the baselines'
    errors against that measurement."""
    from cbs_ray.maths.prediction import LITERATURE_EXPONENTS

    out = []
    for setting in sorted({r["setting"] for r in rows}):
        runs = sorted((r for r in rows if r["setting"] == setting), key=lambda r: r["seed"])
        for i, r in enumerate(runs):
            m = runs[(i + 1) % len(runs)]
            measured = m["measured"]
            if len(runs) < 2 or measured is None or r["predicted"] is None or r["last_rung"] is None:
                out.append({**r, "measured_seed": m["seed"], "measured_at_d": measured, "error": None})
                continue
            d_last, b_last = r["last_rung"]
            borrowed = {name: abs(math.log2(b_last * (r["budget"] / d_last) ** g / measured))
                        for name, (g, _) in LITERATURE_EXPONENTS["mccandlish"].items()}
            lo, hi = r["interval_90"]
            out.append({**r, "measured_seed": m["seed"], "measured_at_d": measured,
                        "error": abs(math.log2(r["predicted"] / measured)), "borrowed": borrowed,
                        "inside": lo <= measured <= hi,
                        "decision": r["batch_size"] == 2 ** math.floor(math.log2(measured)),
                        "point_power_of_two": 2 ** math.floor(math.log2(r["predicted"])) ==
                        2 ** math.floor(math.log2(measured))})
    return out


def judge(pairs: list[dict]) -> dict:
    """The pre-registered endpoints over the scored pairs (module docstring)."""
    scored = [p for p in pairs if p["error"] is not None]
    if not scored:
        return {"verdict": "nothing scored", "pairs": len(pairs)}
    names = list(scored[0]["borrowed"])
    best = min(names, key=lambda k: sum(p["borrowed"][k] for p in scored))
    by_setting: dict = {}
    for p in scored:
        by_setting.setdefault(p["setting"], []).append(p["error"] - p["borrowed"][best])
    means = [sum(v) / len(v) for v in by_setting.values()]
    mean = sum(means) / len(means)
    sd = math.sqrt(sum((x - mean) ** 2 for x in means) / (len(means) - 1)) if len(means) > 1 else math.inf
    upper = mean + T975_3 * sd / math.sqrt(len(means))
    primary = ("better" if mean <= TARGETS["better"][0] and upper <= TARGETS["better"][1] else
               "never worse" if mean <= TARGETS["never_worse"][0] and upper <= TARGETS["never_worse"][1] else "missed")
    coverage = sum(p["inside"] for p in scored) / len(scored)
    decision = sum(p["decision"] for p in scored) / len(scored)
    return {"pairs": len(pairs), "scored": len(scored), "best_borrowed": best, "mean_difference": mean,
            "ci95": [mean - T975_3 * sd / math.sqrt(len(means)), upper], "primary": primary,
            "coverage": coverage, "coverage_met": TARGETS["coverage"][0] <= coverage <= TARGETS["coverage"][1],
            "decision": decision, "decision_met": decision >= TARGETS["decision"],
            "point_power_of_two": sum(p["point_power_of_two"] for p in scored) / len(scored),
            "mean_error": sum(p["error"] for p in scored) / len(scored),
            "mean_borrowed": {k: sum(p["borrowed"][k] for p in scored) / len(scored) for k in names}}


def row(setting: str, seed: int, summary: dict) -> dict:
    """What a run contributes: its ladder's prediction and its own measurement at D (judged against another seed's)."""
    lad, pred, v = summary["ladder"], summary["prediction"], summary.get("prediction_validation") or {}
    finite = [(r["samples_seen"], r["b_crit"]) for r in lad["rungs"] if r["b_crit"]]
    return {"setting": setting, "seed": seed, "budget": pred["budget_samples"], "predicted": pred["b_crit"],
            "interval_90": pred["interval_90"], "source": pred.get("source"), "exponent": pred.get("exponent"),
            "exponent_sd": pred.get("exponent_sd"), "rungs_exponent": pred.get("rungs_exponent"),
            "rungs_exponent_se": pred.get("rungs_exponent_se"), "batch_size": pred["batch_size"],
            "refusal": pred["refusal"], "rungs": [[d, b] for d, b in finite],
            "last_rung": max(finite) if finite else None, "measured": v.get("measured_b_crit"),
            "power_law": (v.get("power_law_prediction") or {}).get("b_crit")}


def print_pairs(pairs: list[dict]) -> None:
    def f(x, spec=".3g"):
        return "–" if x is None else format(x, spec)

    for p in pairs:
        lo, hi = p["interval_90"] or (None, None)
        base = ", ".join(f"{k} {f(e, '.2f')}" for k, e in (p.get("borrowed") or {}).items())
        print(f"PAIR {p['setting']} seed {p['seed']} (measured on seed {p['measured_seed']}): rungs "
              f"{', '.join(f(b) for _, b in p['rungs'])}; exponent {f(p['exponent'])} ± {f(p['exponent_sd'], '.2g')} "
              f"(rungs' {f(p['rungs_exponent'])} ± {f(p['rungs_exponent_se'], '.2g')}), source {p['source']}; "
              f"predicted {f(p['predicted'])} [{f(lo)}, {f(hi)}], measured {f(p['measured_at_d'])}; |log2 err| "
              f"{f(p['error'], '.2f')}; borrowed {base}; the power law's {f(p['power_law'])}; recommended "
              f"{p['batch_size']}" + (f"; refusal: {p['refusal']}" if p["refusal"] else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the protocol and the cost; run nothing")
    parser.add_argument("--only", default=",".join(SETTINGS))
    parser.add_argument("--seeds", default=PROTOCOL["seeds"])
    parser.add_argument("--secondary", action="store_true", help="also the tiny LM and the SST-2 LM (lm8, sst2lm8)")
    parser.add_argument("--keep", help="write the runs under this directory")
    parser.add_argument("--judge", metavar="DIR", help="score every rows.json under DIR; run nothing")
    args = parser.parse_args()
    for line in protocol_lines():
        print(line, flush=True)
    if args.dry_run:
        return
    if args.judge:
        rows = [r for path in sorted(Path(args.judge).rglob("rows.json")) for r in json.loads(path.read_text())]
        pairs = pair(rows)
        print_pairs(pairs)
        print(f"VERDICT {json.dumps(judge(pairs))}")
        return
    lv.MARKOV.update(SETTINGS)
    lv.MARKOV_PROTOCOLS["v49"] = PROTOCOL
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(args.keep or name)
        rows = []
        for setting in args.only.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                (tmp / f"{setting}-{seed}").mkdir(parents=True, exist_ok=True)
                wall, summary = lv.run(setting, tmp / f"{setting}-{seed}", seed=seed, protocol="v49")
                rows.append({**row(setting, seed, summary), "wall_s": round(wall)})
                (tmp / f"{setting}-{seed}" / "rows.json").write_text(json.dumps(rows[-1:], indent=1))
        for task in SECONDARY if args.secondary else ():
            wall, summary = lv.run(task, tmp / task, protocol="v2")
            r = row(task, 0, summary)
            print(f"SECONDARY {task}: " + (f"refused: {r['refusal']}" if r["refusal"] else
                                           f"predicted {r['predicted']:.3g} {r['interval_90']} ({r['source']}); "
                                           f"measured {r['measured']}") + f"; {wall:.0f} s")
        if rows and len(args.seeds.split(",")) > 1:
            pairs = pair(rows)
            print_pairs(pairs)
            print(f"VERDICT {json.dumps(judge(pairs))}")


if __name__ == "__main__":
    main()
