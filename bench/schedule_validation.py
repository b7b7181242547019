"""Issue 50's pre-registered validation of branch mode's batch-size schedules (CPU, offline): does a schedule that
follows CBS(t) save optimizer steps against the fixed-batch frontier at equal loss, pooled over settings chosen
before any outcome?

**The protocol, fixed here before any run** (``--dry-run`` prints it with its estimated CPU time):

- *Settings*, by a rule that does not look at outcomes: the built-in ``markov`` language of
  ``bench/spaces/markov_lm_2tpp.yaml`` (Zipf exponent a = 1, coupling s = 3), the two points of the grid a ∈ {1, 2} ×
  s ∈ {2, 3} one knob away from it ((2, 3) and (1, 2)), and the default with a 4× longer budget (65 536 samples).
  Every run decays its LR by a cosine (``training.lr_decay=cosine``: the Seesaw rule needs a decay to halve;
  the same for every rule and control) and places its checkpoints geometrically (``branch.checkpoints=geometric``:
  1/32 … 1/2 of the budget).
- *Rules*: ``once_per_crossing`` (the rule before), ``fitted`` and ``seesaw`` (issue 50), each on every setting.
- *Seeds*: 5 validation seeds (``branch.validation_seeds=5``, offsets 1…5, held out from the trunk's 0); the
  development runs (``--development``) use another language (``data.markov_seed`` 7, not the protocol's 1234).
- *Primary endpoint*: per rule, the iso-loss steps saved (``schedule_validation.iso_loss_steps``: per seed,
  1 − schedule steps / the steps the fixed-batch frontier needs to reach the schedule's final loss), pooled over
  the settings' seeds, its mean and 95 % interval clustered by setting (``maths.iso_loss.pooled_saved_fraction``).
  **Target**: mean ≥ 25 % with the interval's lower end > 0, and the schedule non-inferior to the small batch
  (the paired one-sided 95 % bound < ε = 0.01 nats) on every setting.
- Every run is reported (``RESULT``/``TABLE`` lines), whichever rule wins.

Costs are estimated from the samples each search trains (``methods.branch.search.branch_search_samples``) at the rate
measured in issue 37 (384 s for 292 864 samples of ``markov`` on the 2-core CPU: 1.31 ms a sample; its 4-seed
follow-up ran at 0.72 ms). Starts Ray once per (setting, rule): run it under the machine's lock
(``flock /tmp/cbs-ray-ray.lock python bench/schedule_validation.py``).

    python bench/schedule_validation.py --dry-run
    python bench/schedule_validation.py --development [--rules fitted,seesaw]   # one setting, 2 seeds
    python bench/schedule_validation.py [--only default,zipf2] [--rules ...] [--keep DIR]
    python bench/schedule_validation.py --judge bench/schedule_validation_runs   # pool the kept runs; run nothing
    python bench/schedule_validation.py --judge bench/schedule_validation_runs --reread pchip   # issue 60's frontier

With ``--keep DIR`` each finished run's figures go to ``DIR/<setting>-<rule>.json`` as soon as it ends, and a run
whose file is there is not trained again: the protocol can span sessions, one locked run at a time. ``--judge``
pools whatever is kept and says which of the protocol's runs are missing; the target is judged only on all of them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPACE = "bench/spaces/markov_lm_2tpp.yaml"
COMMON = ["search.method=branch", "training.lr_decay=cosine", "branch.checkpoints=geometric"]
SETTINGS = {
    "default": [],
    "zipf2": ["data.markov_zipf_exponent=2.0"],
    "coupling2": ["data.markov_coupling=2.0"],
    "long": ["training.budget_samples=65536"],
}
"""The protocol's settings (module docstring), chosen before any run."""
DEVELOPMENT = {"dev": ["data.markov_seed=7"]}
"""The development runs' setting: another language than every protocol setting."""
RULES = ("once_per_crossing", "fitted", "seesaw")
SEEDS, DEVELOPMENT_SEEDS = 5, 2
TARGET_SAVED, MARGIN = 0.25, 0.01
SECONDS_PER_SAMPLE = 384 / 292_864
"""Issue 37's measured rate on ``markov`` (the slower of its two runs)."""
CRITERIA = (f"per rule, pooled iso-loss steps saved over the settings' seeds: mean >= {TARGET_SAVED:.0%} and the "
            f"lower end of its 95 % interval clustered by setting > 0; and non-inferior to the small batch (paired "
            f"one-sided 95 % bound < {MARGIN} nats) on every setting")


def overrides(setting: list[str], rule: str, seeds: int) -> list[str]:
    return [*COMMON, *setting, f"branch.schedule_rule={rule}", f"branch.validation_seeds={seeds}"]


def estimated_samples(sets: list[str]) -> int:
    """Samples one search with its validation trains (the plan's estimate, before any run)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from cbs_ray.methods.branch.search import branch_search_samples
    from cbs_ray.methods.branch.settings import resolve_branch_settings
    from cbs_ray.spec.load import load_spec

    spec = load_spec(SPACE, sets)
    return branch_search_samples(resolve_branch_settings(spec, spec.training.budget_samples), validate_schedule=True)


def print_protocol(settings: dict, rules: tuple, seeds: int) -> float:
    print(f"PROTOCOL: {SPACE} with {' '.join(COMMON)}; rules {', '.join(rules)}; {seeds} validation seeds")
    print(f"CRITERIA (fixed before the runs): {CRITERIA}")
    total = 0
    for tag, setting in settings.items():
        samples = estimated_samples(overrides(setting, rules[0], seeds))
        total += samples * len(rules)
        print(f"PLAN {tag}: {' '.join(setting) or '(the space as shipped)'}: {samples} samples a rule, about "
              f"{samples * SECONDS_PER_SAMPLE / 60:.0f} min a rule on 2 cores")
    seconds = total * SECONDS_PER_SAMPLE
    print(f"PLAN total: {total} samples, about {seconds / 60:.0f} min of the 2-core CPU "
          f"({total * 0.72e-3 / 60:.0f} min at issue 37's faster rate)")
    return seconds


def search(sets: list[str], tmp: Path, tag: str) -> tuple[float, dict]:
    out = tmp / tag
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "cbs_ray.search", "--space", SPACE, "--validate-schedule",
           *(a for o in sets for a in ("--set", o)), "--set", f"storage_path={tmp / 'rr'}", "--output", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode:
        sys.exit(f"{tag} search failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return time.perf_counter() - start, json.loads((out / "summary.json").read_text())


KEPT_KEYS = ("schedule_validation", "critical_batch_over_training", "batch_size_schedule")
"""What a kept run's file holds of its summary.json (with its wall time and the checkout's commit)."""


def kept_run(tag: str, rule: str, wall: float, summary: dict) -> dict:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parent).stdout.strip()
    return {"setting": tag, "rule": rule, "wall_s": round(wall), "commit": commit,
            **{key: summary.get(key) for key in KEPT_KEYS}}


def record(tag: str, rule: str, wall: float, s: dict) -> dict:
    """Print one run's figures; return its per-seed saved fractions and its non-inferiority."""
    v = s.get("schedule_validation") or {}
    iso, ni = v.get("iso_loss_steps") or {}, v.get("non_inferiority") or {}
    print(f"RESULT {tag} {rule}: wall {wall:.0f} s; CBS(t) " + ", ".join(
        f"{p['samples_seen']}: {p['batch_size']}{'' if p['resolvable'] else ' (nr)'}"
        for p in s["critical_batch_over_training"]) + f"; schedule {s['batch_size_schedule']}", flush=True)
    for c in v.get("controls", []):
        print(f"TABLE {tag} {rule}: {c['name']} B={c['batch_size'] or 'schedule'} {c['steps']} steps, "
              f"loss {c['final_loss_mean']} by seed {c['final_losses']}")
    print(f"RESULT {tag} {rule}: iso-loss saved {iso.get('saved_fraction')} {iso.get('interval_95')} per seed "
          f"{iso.get('per_seed')} censored {iso.get('censored')}; non-inferior {ni.get('holds')} "
          f"({ni.get('difference_mean')}, bound {ni.get('upper_95')}); secondary steps saved "
          f"{(v.get('steps_saved') or {}).get('fraction')}", flush=True)
    return {"per_seed": {int(k): x for k, x in (iso.get("per_seed") or {}).items()},
            "non_inferior": ni.get("holds")}


def verdict(rule: str, results: dict) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from cbs_ray.maths.iso_loss import pooled_saved_fraction

    pooled = pooled_saved_fraction({tag: r["per_seed"] for tag, r in results.items()})
    low = None if pooled.interval_95 is None else pooled.interval_95[0]
    met = (pooled.saved_fraction is not None and pooled.saved_fraction >= TARGET_SAVED and low is not None
           and low > 0 and all(r["non_inferior"] for r in results.values()))
    print(f"POOLED {rule}: saved {pooled.saved_fraction} interval {pooled.interval_95} over {pooled.seeds} seeds, "
          f"{pooled.settings} settings; non-inferior on every setting: "
          f"{all(r['non_inferior'] for r in results.values())}; target met: {met}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the protocol and its estimated CPU time")
    parser.add_argument("--development", action="store_true",
                        help=f"the development runs: one other language, {DEVELOPMENT_SEEDS} seeds")
    parser.add_argument("--only", default=None, help="comma-separated settings: " + ", ".join(SETTINGS))
    parser.add_argument("--rules", default=",".join(RULES))
    parser.add_argument("--keep", default=None, help="keep experiments, reports and each run's figures here; "
                                                     "a run whose figures are kept is not trained again")
    parser.add_argument("--judge", metavar="DIR", help="pool the runs kept in DIR; run nothing")
    parser.add_argument("--reread", choices=("pchip", "chord"), default=None,
                        help="with --judge: read each kept run's iso-loss steps again from its controls' final losses "
                             "through this interpolation (maths.iso_loss), instead of the figure it stored")
    args = parser.parse_args()
    if args.judge:
        judge_kept(Path(args.judge), args.reread)
        return
    settings = DEVELOPMENT if args.development else SETTINGS
    if args.only:
        settings = {k: settings[k] for k in args.only.split(",")}
    rules, seeds = tuple(args.rules.split(",")), DEVELOPMENT_SEEDS if args.development else SEEDS
    print_protocol(settings, rules, seeds)
    if args.dry_run:
        return
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(args.keep or name)
        by_rule: dict = {rule: {} for rule in rules}
        for tag, setting in settings.items():
            for rule in rules:
                kept = tmp / f"{tag}-{rule}.json"
                if args.keep and kept.is_file():
                    run = json.loads(kept.read_text())
                    print(f"KEPT {tag} {rule}: {kept} (commit {run['commit'][:9]}), not trained again", flush=True)
                else:
                    wall, summary = search(overrides(setting, rule, seeds), tmp, f"{tag}-{rule}")
                    run = kept_run(tag, rule, wall, summary)
                    if args.keep:
                        kept.write_text(json.dumps(run, indent=1) + "\n")
                by_rule[rule][tag] = record(tag, rule, run["wall_s"], run)
        for rule in rules:
            verdict(rule, by_rule[rule])


def reread(run: dict, interpolation: str) -> dict:
    """``run`` with its iso-loss steps read again from its controls' final losses by seed through
    ``interpolation`` (``maths.iso_loss``; the fixed batches as the validation read them: one run per batch)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from cbs_ray.maths.iso_loss import paired_saved_fraction

    v = dict(run.get("schedule_validation") or {})
    controls = v.get("controls") or []
    schedule = next((c for c in controls if c["name"] == "schedule"), None)
    fixed: dict = {}
    for c in controls:
        if c["name"] != "schedule" and c["final_loss_mean"] is not None and c["batch_size"] not in fixed:
            fixed[c["batch_size"]] = (c["steps"], {int(k): x for k, x in c["final_losses"].items()})
    if schedule is None or schedule["steps"] is None:
        return run
    out = paired_saved_fraction(schedule["steps"], {int(k): x for k, x in schedule["final_losses"].items()},
                                list(fixed.values()), interpolation=interpolation)
    v["iso_loss_steps"] = {**(v.get("iso_loss_steps") or {}), "saved_fraction": out.saved_fraction,
                           "interval_95": out.interval_95, "per_seed": out.per_seed, "censored": out.censored,
                           "interpolation": interpolation}
    return {**run, "schedule_validation": v}


def judge_kept(folder: Path, interpolation: str | None = None) -> None:
    """Pool the runs kept in ``folder``: every run's figures, each rule's pooled figure, and the runs missing;
    with ``interpolation``, each run's iso-loss steps read again through it (``reread``)."""
    runs = {(r["setting"], r["rule"]): (reread(r, interpolation) if interpolation else r)
            for r in (json.loads(p.read_text()) for p in sorted(folder.glob("*.json")))}
    missing = [f"{tag}-{rule}" for tag in SETTINGS for rule in RULES if (tag, rule) not in runs]
    for rule in RULES:
        results = {tag: record(tag, rule, runs[tag, rule]["wall_s"], runs[tag, rule])
                   for tag in SETTINGS if (tag, rule) in runs}
        if results:
            verdict(rule, results)
    print(f"RUNS kept {len(runs)} of {len(SETTINGS) * len(RULES)}; missing: {', '.join(missing) or 'none'}"
          + ("; the target is judged on all of them, so this verdict is partial" if missing else ""), flush=True)


if __name__ == "__main__":
    main()
