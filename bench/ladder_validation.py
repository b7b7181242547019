"""Issue 27's and 36's targets: the ladder's prediction of the full run's critical batch against a measurement, as a
user runs it (``--set search.method=ladder --validate-prediction``).

Issue 36 (``--markov``): the built-in markov language (``bench/spaces/markov_lm_2tpp.yaml``) at two settings, the default
(Zipf 1, coupling 3) and ``markov_far`` (Zipf 1.5, coupling 2), 3 seeds each (data order and init), under a protocol
(``MARKOV_PROTOCOLS``, printed before the runs): ``v1``, the first run (``search.seed`` 0, 1, 2, ``ladder.seeds=1``,
so every seed is its own ladder and its own measurement; missed), and ``v2`` (the default), pre-registered after it:
``ladder.seeds=2`` (seed-mean curves in the ladder and in the measurement), every batch warmed up over at least 8
steps and S(B) counted by the LR (``ladder.min_warmup_steps``, ``ladder.step_count``), fresh seeds 10, 12, 14;
``v3``, pre-registered after v2's miss on ``markov_far`` and for it only (``--only markov_far``): v2 plus
``ladder.alpha=0.25``, fresh seeds 30, 32, 34.
``v4`` and ``v4d`` (issue 36, fourth session; pre-registered and committed before any of their runs): the prediction
through the loss (``ladder.predict=loss``, ``maths.ladder_loss``: B_crit = c·L^k fitted over the rungs against their
target loss, at the smallest batch's loss at D extrapolated by a power law in samples through its last octave before
the stop, anchored at the stop; the 90 % interval from ``fit_ladder``'s batch resamples with the smallest batch's seeds
resampled for L(D)). Why: a one-seed scoping per setting (post hoc, not a validation;
docs/benchmarks-archive.md#issue-36-s3 and #issue-36-s4a) found B_crit(D) concave in log–log beyond the rungs, so
that the power law over-predicts by 0.3–0.7 in log2 where the rungs' exponent is high; the prediction through the
loss was closer on 5 of 8 scoping rows (worse on the three of the default language).
``v4`` = v3's sets plus ``ladder.predict=loss``, for ``markov_steep`` (Zipf 2, coupling 2; ``--only markov_steep``),
a setting chosen from one scoping seed (60, one run per batch) because its growth beyond the rungs, D^0.73, was the
only one found far from the borrowed exponents (0.383, 0.47, 0.571); ``v4d`` = v2's sets plus ``ladder.predict=loss``,
for the default ``markov`` setting (``--only markov``). Fresh seeds 70, 72, 74 for both (runs {70, 71}, {72, 73},
{74, 75}); the criteria ``MARKOV_CRITERIA`` and the verdict code unchanged; judged together with ``--judge`` over the
six rows (the setting further from the borrowed exponents picked by the code, as before, from the power law's mean
exponent). Each row also carries the power law's prediction on the same runs (``power_law``), for the table only.
``v5`` (pre-registered after v4's miss and committed before its runs): v3's sets exactly (the power law, the default
prediction) for ``markov_steep`` (``--only markov_steep``), fresh seeds 80, 82, 84, judged with the default setting
under v2 (seeds 10, 12, 14, already run) as v3 was; chosen because on v4's six runs the power law, read post hoc, beat
each borrowed exponent on every steep seed: a lead, tested here on seeds nobody has seen.
The criteria (``MARKOV_CRITERIA``) are fixed here before any run and printed before the runs: on every seed of both
settings the measured B_crit(D) inside the predicted 90 % interval, |log2(predicted / measured)| ≤ 0.5, a smaller
error than no extrapolation, the ladder's samples ≤ 0.3 of the measurement's; on the setting whose mean exponent lies
further from the borrowed exponents (0.383, 0.47, 0.571), a smaller error than each of them on every seed; the two
settings' mean exponents differ by ≥ 0.15.

The success criteria are the code's, fixed before any of these runs (``methods.ladder.reading``): the measured
B_crit(D) inside the predicted 90 % interval, |log2(predicted / measured)| ≤ 0.5 (``LOG2_TARGET``), a smaller
error than both naive baselines (B_crit at the largest rung; that × (D / D_rung)^γ for γ = 0.383, 0.47, 0.571),
and the ladder training ≤ 0.3 of the measurement's samples.

Tasks (each built-in, offline; the built-in text enlarged to 2·D examples so that even the measurement's runs to
2·D are one epoch):

* ``lm`` — the tiny causal LM (``search_spaces/tiny_causal_lm.yaml``) at D = 16384 samples, batches 8…128: the
  task the ladder was developed on;
* ``bert`` — the tiny BERT sentiment classifier (``search_spaces/tiny_cpu.yaml``, its eval loss) at D = 8192,
  batches 8…128: not tuned on (run once, after ``lm``'s settings were fixed).
* ``sst2lm`` — the same GPT-2 on SST-2's training sentences as text (``../shared/data/sst2/``, a word-level
  tokenizer of 4000; dev.tsv as the eval set), D = 16384, batches 4…64, alpha 0.5: a model still learning at D
  (the second development task);
* ``sst2lm8`` — ``sst2lm`` under the markov space's ladder plan (issue 36: rungs over 8.5× in D, 384…3264);
* ``lm8`` — ``lm`` under the same plan as ``sst2lm8`` (rungs from D/64 to 0.2·D; added after v2 refused ``lm``
  over 2.8× only, before its run).
* ``sst2bert`` — ``search_spaces/sst2_tiny_cpu.yaml`` as shipped, its eval loss, batches 16…256: held out (run
  once, after ``sst2lm``'s settings were fixed).

Tune experiments go to a temporary directory; one Ray per task, one after the other: run it under the machine's
Ray lock (``flock /tmp/ray.lock python bench/ladder_validation.py``).

    python bench/ladder_validation.py [--only lm,lm8,bert,sst2lm,sst2lm8,sst2bert] [--protocol v2] [--set KEY=VALUE] [--keep DIR]
    python bench/ladder_validation.py --markov [--protocol v2] [--only markov,markov_far,markov_steep] [--seeds 10,12,14] \
        [--keep DIR]
    python bench/ladder_validation.py --judge DIR1/markov_rows.json DIR2/markov_rows.json ...
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SST2 = ROOT.parent / "shared" / "data" / "sst2"

TASKS = {
    "lm": ("search_spaces/tiny_causal_lm.yaml",
           ["training.budget_samples=16384", "data.builtin_train_examples=32768", "search.batch_sizes=[8, 16, 32, 64, 128]",
            "training.eval_every_samples=2048", "asha.grace_period_samples=2048"]),
    "bert": ("search_spaces/tiny_cpu.yaml",
             ["training.budget_samples=8192", "data.builtin_train_examples=16384",
              "search.batch_sizes=[8, 16, 32, 64, 128]", "training.eval_every_samples=1024",
              "asha.grace_period_samples=1024", "search.metric=eval_loss", "search.mode=min"]),
    "sst2lm": ("search_spaces/tiny_causal_lm.yaml",
               ["data.source=files", f"data.train_file={SST2 / 'train.tsv'}", "data.text_column=sentence",
                f"data.eval_file={SST2 / 'dev.tsv'}", "data.eval_text_column=content", "model.vocab_size=4000",
                "training.budget_samples=16384", "search.batch_sizes=[4, 8, 16, 32, 64]", "ladder.alpha=0.5",
                "training.eval_every_samples=2048", "asha.grace_period_samples=2048"]),
    # issue 36's protocol asks rungs over >= 8x in D: this space's 10 % warmup and 25 % fraction give 2.8x (from
    # 1024), so the same task under the markov space's plan (fraction 0.2, first rung D/64, warmup 5 %: 384...3264)
    "sst2lm8": ("search_spaces/tiny_causal_lm.yaml",
                ["data.source=files", f"data.train_file={SST2 / 'train.tsv'}", "data.text_column=sentence",
                 f"data.eval_file={SST2 / 'dev.tsv'}", "data.eval_text_column=content", "model.vocab_size=4000",
                 "training.budget_samples=16384", "search.batch_sizes=[4, 8, 16, 32, 64]", "ladder.alpha=0.5",
                 "training.eval_every_samples=2048", "asha.grace_period_samples=2048", "ladder.fraction=0.2",
                 "ladder.first_rung=0.015625", "search.warmup_fraction_range=[0.05, 0.05]"]),
    # the tiny LM under the same plan (issue 36: its v2 refusal read rungs over 2.8x only; added before its run)
    "lm8": ("search_spaces/tiny_causal_lm.yaml",
            ["training.budget_samples=16384", "data.builtin_train_examples=32768",
             "search.batch_sizes=[8, 16, 32, 64, 128]", "training.eval_every_samples=2048",
             "asha.grace_period_samples=2048", "ladder.fraction=0.2", "ladder.first_rung=0.015625",
             "search.warmup_fraction_range=[0.05, 0.05]"]),
    # held out (run once, its settings fixed before: the space as shipped, its eval loss, D its own budget, the
    # batches the ladder's floor allows at a quarter of D: 16 steps at 256)
    "sst2bert": ("search_spaces/sst2_tiny_cpu.yaml",
                 ["search.batch_sizes=[16, 32, 64, 128, 256]", "search.metric=eval_loss", "search.mode=min"]),
}


MARKOV = {
    "markov": ("bench/spaces/markov_lm_2tpp.yaml", []),
    "markov_far": ("bench/spaces/markov_lm_2tpp.yaml", ["data.markov_zipf_exponent=1.5", "data.markov_coupling=2"]),
    # issue 36, fourth session: the one setting whose growth beyond the rungs (D^0.73, one scoping seed) was far
    # from the borrowed exponents; judged under v4 only
    "markov_steep": ("bench/spaces/markov_lm_2tpp.yaml", ["data.markov_zipf_exponent=2", "data.markov_coupling=2"]),
}

MARKOV_PROTOCOLS = {
    # issue 36 as first run (missed): one run per batch, B=128 warmed up over 1 step, every step counted as one
    "v1": {"seeds": "0,1,2",
           "sets": ["ladder.seeds=1", "ladder.min_warmup_steps=0", "ladder.step_count=optimizer"]},
    # pre-registered after v1's miss (committed before its runs): two runs per batch in the ladder and in the
    # measurement (seed-mean curves), every batch warmed up over at least 8 steps and S(B) counted by the LR (the
    # space's defaults), fresh seeds: search.seed 10, 12, 14 run seeds {10, 11}, {12, 13}, {14, 15}
    "v2": {"seeds": "10,12,14",
           "sets": ["ladder.seeds=2", "ladder.min_warmup_steps=8", "ladder.step_count=lr_weighted"]},
    # pre-registered after v2's miss on markov_far (committed before its runs), for markov_far only (the default
    # setting stays judged under v2): v2 plus ladder.alpha 0.25, so that B=128 trains at 0.0034 rather than 0.0057
    # (v2's B=128 stalled after its warmup there); fresh seeds 30, 32, 34 (runs {30, 31}, {32, 33}, {34, 35})
    "v3": {"seeds": "30,32,34",
           "sets": ["ladder.seeds=2", "ladder.min_warmup_steps=8", "ladder.step_count=lr_weighted",
                    "ladder.alpha=0.25"]},
    # issue 36, fourth session (committed before its runs): the prediction through the loss, B_crit = c·L^k at the
    # smallest batch's loss at D extrapolated from its last octave (the power law over-predicted a B_crit(D) that
    # bends beyond the rungs); v3's sets plus ladder.predict=loss, for markov_steep (Zipf 2, coupling 2) only; fresh
    # seeds 70, 72, 74 (runs {70, 71}, {72, 73}, {74, 75})
    "v4": {"seeds": "70,72,74",
           "sets": ["ladder.seeds=2", "ladder.min_warmup_steps=8", "ladder.step_count=lr_weighted",
                    "ladder.alpha=0.25", "ladder.predict=loss"]},
    # the same prediction on the default markov setting under v2's sets (its alpha 0.5), the same fresh seeds
    "v4d": {"seeds": "70,72,74",
            "sets": ["ladder.seeds=2", "ladder.min_warmup_steps=8", "ladder.step_count=lr_weighted",
                     "ladder.predict=loss"]},
    # pre-registered after v4's miss (committed before its runs), for markov_steep only: v3's sets exactly (the power
    # law, the package's default prediction), because on v4's runs the power law, read post hoc, beat each borrowed
    # exponent on every steep seed; fresh seeds 80, 82, 84 (runs {80, 81}, {82, 83}, {84, 85}); judged with the
    # default setting under v2 (seeds 10, 12, 14, already run), as v3 was
    "v5": {"seeds": "80,82,84",
           "sets": ["ladder.seeds=2", "ladder.min_warmup_steps=8", "ladder.step_count=lr_weighted",
                    "ladder.alpha=0.25"]},
}
"""What each validation ran, beside the space (``bench/spaces/markov_lm_2tpp.yaml``) and the setting's knobs."""

MARKOV_CRITERIA = {
    "log2_error_max": 0.5,        # |log2(predicted / measured)| on every seed
    "samples_ratio_max": 0.3,     # the ladder's samples over the measurement's
    "exponent_gap_min": 0.15,     # between the two settings' mean exponents
}
"""Issue 36's success criteria, fixed before any run (and printed before the runs)."""


def run(task: str, tmp: Path, *, seed: int | None = None, protocol: str = "v2", extra: tuple = ()
        ) -> tuple[float, dict]:
    space, sets = {**TASKS, **MARKOV}[task]
    if seed is not None:
        sets = [*sets, *MARKOV_PROTOCOLS[protocol]["sets"], f"search.seed={seed}"]
    elif protocol in MARKOV_PROTOCOLS:  # issue 36's knobs on issue 27's tasks (search.seed 0)
        sets = [*sets, *MARKOV_PROTOCOLS[protocol]["sets"]]
    sets = [*sets, *extra]  # --set, after the protocol's: a reduction of it, said where its figures are recorded
    out = tmp / task
    argv = [sys.executable, "-m", "cbs_ray.search", "--space", space, "--set", "search.method=ladder",
            "--validate-prediction", "--set", f"storage_path={tmp / 'rr'}", "--output", str(out)]
    for s in sets:
        argv += ["--set", s]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"{task} failed ({proc.returncode}): {proc.stderr[-1500:]}")
    print("\n".join(line for line in proc.stdout.splitlines() if not line.startswith("[")), flush=True)
    return wall, json.loads((out / "summary.json").read_text())


def report(task: str, wall: float, s: dict) -> None:
    lad, pred, v = s["ladder"], s["prediction"], s["prediction_validation"]
    print(f"RESULT {task}: wall {wall:.0f} s ({wall / 60:.1f} min), ladder + measurement")
    for r in lad["rungs"]:
        ci = r["b_crit_ci"]
        print(f"RESULT {task}:   rung {r['samples_seen']:>6g}: B_crit "
              + (f"{r['b_crit']:.1f} [{ci[0]:.1f}, {ci[1]:.1f}]" if r["b_crit"] and ci else
                 f"{r['b_crit']:.1f}" if r["b_crit"] else f"– ({r['reason']})") + f", 20 % rule {r['overhead_20pct']}")
    e, eci = lad["exponent"], lad["exponent_ci"]
    print(f"RESULT {task}: exponent {e if e is None else round(e, 3)} "
          f"{'' if not eci else f'[{eci[0]:.3f}, {eci[1]:.3f}]'}, p {lad['fit_p_value']}; refusal: {lad['refusal']}")
    if pred["b_crit"] is not None:
        lo, hi = pred["interval_90"]
        print(f"RESULT {task}: predicted B_crit({pred['budget_samples']}) {pred['b_crit']:.1f} [{lo:.1f}, {hi:.1f}], "
              f"recommended batch {pred['batch_size']}")
    m = v["measured_b_crit"]
    print(f"RESULT {task}: measured {m if m is None else round(m, 1)} {v['measured_b_crit_ci']}; inside the interval "
          f"{v['within_interval']}; |log2 error| {v['log2_error']}")
    for name, b in v["baselines"].items():
        print(f"RESULT {task}:   baseline {name}: {b['b_crit']} (|log2 error| {b['log2_error']})")
    print(f"RESULT {task}: beats the baselines {v['beats_baselines']}; target met {v.get('target_met')}; the ladder "
          f"trained {v['samples_ratio']:.3f} of the measurement's samples ({s['cost']['fraction_of_full']:.2f} of a "
          f"from-scratch search at D)")


def markov_row(setting: str, seed: int, wall: float, s: dict) -> dict:
    """One seed's figures, and its verdicts on the criteria that hold per seed."""
    lad, pred, v = s["ladder"], s["prediction"], s["prediction_validation"]
    base = {k: b["log2_error"] for k, b in v["baselines"].items()}
    error, interval = v["log2_error"], pred["interval_90"]
    row = {"setting": setting, "seed": seed, "wall_s": round(wall), "rungs_used": len(lad["rungs_used"]),
           "span": lad["rung_span"], "exponent": lad["exponent"], "exponent_se": lad["exponent_se"],
           "predicted": pred["b_crit"], "interval_90": interval, "measured": v["measured_b_crit"], "log2_error": error,
           "baselines": base, "b_simple": v.get("b_simple_prediction"), "samples_ratio": v["samples_ratio"],
           "refusal": pred["refusal"], "measured_reason": v["measured_reason"], "exponent_ci": lad["exponent_ci"],
           "predict": lad.get("predict", "power_law"), "power_law": v.get("power_law_prediction"),
           "through_loss": lad.get("through_loss"),
           "rungs": [[r["samples_seen"], r["b_crit"], r["censored"]] for r in lad["rungs"]],
           "measured_ci": v["measured_b_crit_ci"], "measured_censored": v["measured_censored"],
           "ladder_samples": s["cost"]["ladder_samples"], "measurement_samples": v["measurement_samples"]}
    row["inside"] = bool(v["within_interval"])
    row["error_ok"] = error is not None and error <= MARKOV_CRITERIA["log2_error_max"]
    row["beats_no_extrapolation"] = error is not None and base["no_extrapolation"] is not None and \
        error < base["no_extrapolation"]
    row["beats_borrowed"] = error is not None and all(e is not None and error < e for k, e in base.items()
                                                      if k.startswith("borrowed"))
    row["ratio_ok"] = v["samples_ratio"] is not None and v["samples_ratio"] <= MARKOV_CRITERIA["samples_ratio_max"]
    return row


def markov_verdict(rows: list[dict]) -> bool:
    """Print the per-seed table and the criteria's verdicts; True if every criterion holds."""
    from cbs_ray.maths.ladder import BORROWED_EXPONENTS

    def fmt(x, f=".3g"):
        return "–" if x is None else format(x, f)

    for r in rows:
        lo, hi = r["interval_90"] or (None, None)
        print(f"TABLE {r['setting']} seed {r['seed']}: rungs {r['rungs_used']} (span {fmt(r['span'])}x), exponent "
              f"{fmt(r['exponent'])} ± {fmt(r['exponent_se'], '.2g')}, predicted {fmt(r['predicted'])} "
              f"[{fmt(lo)}, {fmt(hi)}], measured {fmt(r['measured'])}, |log2 err| {fmt(r['log2_error'], '.2f')}; "
              + ", ".join(f"{k} {fmt(e, '.2f')}" for k, e in r["baselines"].items())
              + f"; B_simple's {fmt((r['b_simple'] or {}).get('b_crit'))} ({fmt((r['b_simple'] or {}).get('log2_error'), '.2f')})"
              + (f"; the power law's {fmt(r['power_law']['b_crit'])} [{fmt((r['power_law']['interval_90'] or [None])[0])}, "
                 f"{fmt((r['power_law']['interval_90'] or [None, None])[1])}] ({fmt(r['power_law']['log2_error'], '.2f')})"
                 if r.get("power_law") else "")
              + f"; samples ratio {fmt(r['samples_ratio'], '.3f')}; {r['wall_s']} s"
              + (f"; refusal: {r['refusal']}" if r["refusal"] else "")
              + (f"; measurement: {r['measured_reason']}" if r["measured_reason"] else ""))
    settings = sorted({r["setting"] for r in rows})
    mean_exp = {k: (sum(e) / len(e) if (e := [r["exponent"] for r in rows if r["setting"] == k and r["exponent"]
                                             is not None]) else None) for k in settings}
    far = max((k for k in settings if mean_exp[k] is not None),
              key=lambda k: min(abs(mean_exp[k] - g) for g in BORROWED_EXPONENTS), default=None)
    verdicts = {
        "measured B_crit(D) inside the 90 % interval on every seed": all(r["inside"] for r in rows),
        f"|log2 error| <= {MARKOV_CRITERIA['log2_error_max']} on every seed": all(r["error_ok"] for r in rows),
        "smaller error than no extrapolation on every seed": all(r["beats_no_extrapolation"] for r in rows),
        f"smaller error than each borrowed exponent on every seed of {far}":
            far is not None and all(r["beats_borrowed"] for r in rows if r["setting"] == far),
        f"ladder samples <= {MARKOV_CRITERIA['samples_ratio_max']} of the measurement's": all(r["ratio_ok"] for r in rows),
        f"mean exponents differ by >= {MARKOV_CRITERIA['exponent_gap_min']} ({mean_exp})":
            len(settings) == 2 and None not in mean_exp.values()
            and abs(mean_exp[settings[0]] - mean_exp[settings[1]]) >= MARKOV_CRITERIA["exponent_gap_min"],
    }
    for name, ok in verdicts.items():
        print(f"VERDICT {'met' if ok else 'MISSED'}: {name}")
    return all(verdicts.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None)
    parser.add_argument("--markov", action="store_true", help="issue 36's validation on the markov language")
    parser.add_argument("--seeds", default=None, help="search.seed of each ladder (default: the protocol's)")
    parser.add_argument("--protocol", default="v2", choices=sorted(MARKOV_PROTOCOLS))
    parser.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                        help="a further --set after the protocol's (a cheaper ladder.seeds), printed before the runs")
    parser.add_argument("--keep", help="write the reports under this directory instead of a temporary one")
    parser.add_argument("--judge", nargs="+", metavar="ROWS_JSON",
                        help="judge the markov_rows.json of runs made one seed at a time (--keep DIR each) "
                             "together, under the same criteria, without running anything")
    args = parser.parse_args()
    args.protocol_given = any(a.startswith("--protocol") for a in sys.argv[1:])
    if args.judge:
        print(f"CRITERIA (fixed before the runs): {MARKOV_CRITERIA}", flush=True)
        markov_verdict([row for path in args.judge for row in json.loads(Path(path).read_text())])
        return
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(args.keep or name)
        if not args.markov:
            if args.protocol_given:
                print(f"PROTOCOL {args.protocol} (fixed before the runs): "
                      f"{MARKOV_PROTOCOLS[args.protocol]['sets']} then {args.extra}; CRITERIA: {MARKOV_CRITERIA}",
                      flush=True)
            for task in (args.only or ",".join(TASKS)).split(","):
                wall, summary = run(task, tmp, protocol=args.protocol if args.protocol_given else "",
                                    extra=tuple(args.extra))
                report(task, wall, summary)
                rows = [markov_row(task, 0, wall, summary)]  # judged on the same criteria where it predicts
                (tmp / f"{task}_rows.json").write_text(json.dumps(rows, indent=1))
                if rows[0]["refusal"]:  # the issue's criterion on these tasks: a refusal with its reason
                    print(f"VERDICT refused, with its reason: {rows[0]['refusal']}")
                else:
                    markov_verdict(rows)
            return
        protocol = MARKOV_PROTOCOLS[args.protocol]
        print(f"CRITERIA (fixed before the runs): {MARKOV_CRITERIA}; see this script's docstring", flush=True)
        print(f"PROTOCOL {args.protocol} (fixed before the runs): {protocol} then {args.extra}", flush=True)
        rows = []
        for setting in (args.only or ",".join(MARKOV)).split(","):
            for seed in (int(x) for x in (args.seeds or protocol["seeds"]).split(",")):
                wall, summary = run(setting, tmp, seed=seed, protocol=args.protocol, extra=tuple(args.extra))
                report(f"{setting}-s{seed}", wall, summary)
                rows.append(markov_row(setting, seed, wall, summary))
                (tmp / "markov_rows.json").write_text(json.dumps(rows, indent=1))
        markov_verdict(rows)


if __name__ == "__main__":
    main()
