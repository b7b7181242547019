"""Issue 60's pre-registered validation of branch mode's batch-size schedules against the best tuned fixed batch, on
the pre-training-regime testbed (CPU, offline). Nothing below may change once a run has been made; a miss is reported,
not tuned away. ``--dry-run`` prints the protocol (settings, tokens per parameter, cost) and stops.

**Settings, by a rule that does not look at outcomes** (``settings``): six fresh markov languages, ``data.markov_seed``
drawn by ``numpy.random.default_rng(60).integers(10_000, 1_000_000, size=6)`` (the development data used 1234 and 7),
the knobs (Zipf exponent a, coupling s) taking each point of a ∈ {1, 1.5, 2} × s ∈ {2, 3} once, in that order, and the
budget following ``MARKOV_BUDGET_OF_DRAW`` (D₁ or D₂ = 2·D₁, each a and each s at both); and the Python standard
library's sources (``search_spaces/python_source_lm.yaml``) at D₁ and D₂: 8 settings. The models are the testbed's
small ones, a 1-layer GPT-2 with ``n_embd`` 8 on the markov language (5 112 parameters) and 16 on the Python sources
(8 432; ``WIDTHS``), so that the protocol fits its cost at ≥ 20 tokens per parameter (``BUDGETS``: 21.6 and 43.3 on
the markov language, 23.3 and 46.6 on the Python sources; ``--dry-run`` prints each). Every run decays its LR by a
cosine (``training.lr_decay=cosine``: the schedule rules need a decay), branches at the spaces' checkpoints (1/8, 1/4
and 1/2 of the budget: geometric ones collide on the Python sources' D₁ in whole batches of 128), and reports every
``CADENCE`` = 384 = 3·128 samples, so that the dense frontier's batches between powers of two (12, 24, 48, 96, 192)
land on every report. Batches 8…128 (the trunk at 8, the branches 16…128).

**Controls** (issue 60, items 1 and 3): per setting, one from-scratch search at the same budget tunes each batch 8…128
over alpha ∈ {0.25, 0.75} × warmup ∈ {0.02, 0.1} (``TUNING``: ``search.strategy=grid``, ``grid_points`` 2): the first
rule runs it as its ``controls`` stage (``branch.controls_from: scratch``), the others name that stage's experiment
(``branch.controls_from: <path>``), so every rule reads the same tuned configurations and B* (the best tuned fixed
batch). The fixed-batch controls are the **dense tuned frontier** (``branch.frontier=dense``): batches √2 apart around
B* to rounding, each at its tuned configuration (interpolated in log B between tuned batches where not searched), the
same set for every rule of a setting. Iso-loss steps are read through PCHIP in log(steps); a seed whose schedule
beat every fixed batch is censored and its figure a lower bound, named as one.

**Rules**: ``fitted`` (the default), ``once_per_crossing`` (the paper's), and ``seesaw`` from the best tuned batch
(``branch.seesaw_start=tuned``); 5 validation seeds each (offsets 1…5, held out from the trunk's).

**Endpoints** (``judge``), per rule:
- **Primary**: the schedule non-inferior to the best tuned fixed batch (``schedule_validation.non_inferiority_vs_tuned``:
  paired by seed, one-sided 95 % bound < ε = 0.01 nats) on **every** setting.
- **Secondary**: the iso-loss steps saved against the dense tuned frontier (per seed 1 − schedule steps / frontier
  steps at the schedule's loss), pooled over the settings' seeds: mean ≥ 25 % with its 95 % interval clustered by
  setting (``maths.iso_loss.pooled_saved_fraction``) above 0 at the lower end.
- Every run is reported (``RESULT``/``TABLE`` lines), whichever rule wins; a setting whose rules trained different
  fixed batches is said (``CONTROLS``).

**Cost** (``print_protocol``): the samples each search trains (``methods.branch.search.branch_search_samples`` with
the dense set's size at B* = 16, plus the controls stage once per setting) at the whole-search rate measured on the
issue-50 runs kept in ``bench/schedule_validation_runs`` (0.35–0.78 ms a sample of 16 tokens on the shared 2 cores,
Ray's per-trial overhead included; ``SECONDS_PER_SAMPLE`` takes 0.6 ms, and 4× that for the Python sources' 64-token
samples), plus each search's start-up, the wall time of one ``--dry-run`` per setting kind (``--check`` times it;
``DRY_RUN_SECONDS``). **Estimate: about 3.3 hours of the 2-core CPU** (4.3 at the slowest measured rate), against a
budget of 4: 24 searches, one per (setting, rule). Run under the machine's Ray lock, one setting (all its rules) per
locked job, each run kept as it ends:

    python bench/schedule_validation_regime.py --dry-run
    python bench/schedule_validation_regime.py --check          # every setting's search passes --dry-run, timed
    flock /tmp/cbs-ray-ray.lock python bench/schedule_validation_regime.py --only m0 --keep bench/schedule_validation_regime_runs
    python bench/schedule_validation_regime.py --judge bench/schedule_validation_regime_runs   # pool; run nothing

**Amendment, after the first run and before any scored one** (no setting, rule or criterion changed): the first run
(m0, ``fitted``, at 56a3395) read CBS(t) ≤ 8 → 32 → ≤ 8, so its schedule kept the trunk's batch 8 throughout, and the
search skipped the validation as "nothing to validate": no schedule run, no tuned controls, no endpoint. Against tuned
controls that skip is wrong (the schedule trains at the trunk's configuration, the controls at their tuned ones; a
seesaw from B* ≠ 8 with no doubling was skipped too), so ``methods.branch.search`` now validates every schedule but the
one that would repeat an untuned control. That run is kept as it came, unscored, in
``bench/schedule_validation_regime_gap/``; every scored run is at the fix or later.
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

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SPACES = {"markov": "search_spaces/markov_lm.yaml", "python_source": "search_spaces/python_source_lm.yaml"}
KNOBS = [(a, s) for a in (1, 1.5, 2) for s in (2, 3)]
MARKOV_BUDGET_OF_DRAW = (1, 2, 2, 1, 1, 2)
"""Draw i trains at D₁ (1) or D₂ (2): each Zipf exponent and each coupling at both budgets."""
CADENCE = 384
"""``training.eval_every_samples``: 3·128, a multiple of the largest batch whose divisors hold the batches √2 apart."""
BUDGETS = {"markov": 6912, "python_source": 3072}
"""D₁ in samples (a multiple of ``CADENCE``): 6 912 × 16 tokens / 5 112 parameters = 21.6 tokens per parameter;
3 072 × 64 / 8 432 = 23.3. D₂ = 2·D₁."""
WIDTHS = {"markov": 8, "python_source": 16}
"""``model.config.n_embd`` (1 layer, 2 heads): the testbed's smallest on the markov language; 16 on the Python
sources, whose 8-wide model's D₁ (1 152 samples) would leave the branches' window (8 steps of B=128) most of the
budget."""
COMMON = ("search.method=branch", "training.lr_decay=cosine", f"training.eval_every_samples={CADENCE}", f"asha.grace_period_samples={CADENCE}",
          "search.batch_sizes=[8,16,32,64,128]", "branch.trunk_batch_size=8", "branch.frontier=dense",
          "branch.validation_seeds=5", "branch.tolerance=0.01")
TUNING = ("search.strategy=grid", "search.grid_points=2", "search.alpha_range=[0.25,0.75]",
          "search.warmup_fraction_range=[0.02,0.1]", "search.num_trials=20", "search.early_stopping=false")
"""The controls stage's from-scratch search: 5 batches × 2 alphas × 2 warmups, every point to the full budget."""
RULES = {"fitted": (), "once_per_crossing": (), "seesaw": ("branch.seesaw_start=tuned",)}
"""The rules, the first of which runs the controls stage (its extra sets beside ``branch.schedule_rule``)."""
TARGET_SAVED, MARGIN, MIN_TOKENS_PER_PARAMETER = 0.25, 0.01, 20.0
SECONDS_PER_SAMPLE = {"markov": 0.6e-3, "python_source": 2.4e-3}
SLOWEST_MEASURED = 0.78 / 0.6
"""The slowest rate of the issue-50 runs over the one assumed (printed beside the estimate, not planned on)."""
DRY_RUN_SECONDS = {"markov": 11.0, "python_source": 20.0}
"""One search's start-up: a ``--dry-run``'s wall time per setting kind, measured by ``--check`` at the commit that
holds this protocol on the shared 2 cores (markov 7.4–27 s, median about 11; Python sources 10.5–22 s)."""
PARAMETERS = {"markov": 5112, "python_source": 8432}
TOKENS_PER_SAMPLE = {"markov": 16, "python_source": 64}
CRITERIA = (f"per rule: PRIMARY non-inferior to the best tuned fixed batch (paired one-sided 95 % bound < {MARGIN} "
            f"nats) on every setting; SECONDARY pooled iso-loss steps saved against the dense tuned frontier (PCHIP) "
            f"over the settings' seeds >= {TARGET_SAVED:.0%} with the lower end of its 95 % interval clustered by "
            f"setting > 0")


def settings() -> dict[str, tuple[str, int, list[str]]]:
    """Every setting: its name → (corpus, budget factor, sets beside ``COMMON``)."""
    seeds = np.random.default_rng(60).integers(10_000, 1_000_000, size=len(KNOBS))
    out = {}
    for i, language in enumerate(seeds):
        a, s = KNOBS[i]
        out[f"m{i}"] = ("markov", MARKOV_BUDGET_OF_DRAW[i], [f"data.markov_seed={int(language)}",
                                                            f"data.markov_zipf_exponent={a}",
                                                            f"data.markov_coupling={s}"])
    for factor in (1, 2):
        out[f"py{factor}"] = ("python_source", factor, [])
    return out


def budget_samples(corpus: str, factor: int) -> int:
    return BUDGETS[corpus] * factor


def tokens_per_parameter(corpus: str, factor: int) -> float:
    return budget_samples(corpus, factor) * TOKENS_PER_SAMPLE[corpus] / PARAMETERS[corpus]


def overrides(name: str, rule: str, controls_from: str = "scratch") -> list[str]:
    corpus, factor, sets = settings()[name]
    return [*COMMON, *TUNING, *sets, f"model.config.n_embd={WIDTHS[corpus]}",
            f"training.budget_samples={budget_samples(corpus, factor)}",
            f"branch.schedule_rule={rule}", *RULES[rule], f"branch.controls_from={controls_from}"]


def estimated_samples(name: str) -> tuple[int, int, int]:
    """(samples of one rule's search with its validation, of the controls stage, dense controls at B* = 16)."""
    sys.path.insert(0, str(ROOT))
    from cbs_ray.maths.budget import scratch_grid_samples
    from cbs_ray.methods.branch.fair_controls import TunedControls, frontier_batches
    from cbs_ray.methods.branch.search import branch_search_samples
    from cbs_ray.methods.branch.settings import resolve_branch_settings
    from cbs_ray.spec.load import load_spec

    corpus = settings()[name][0]
    spec = load_spec(SPACES[corpus], overrides(name, "fitted"))
    br = resolve_branch_settings(spec, spec.training.budget_samples)
    assumed = TunedControls("plan", {16: {spec.search.metric: 0.0}}, spec.search.metric, spec.search.mode)
    dense = frontier_batches(spec, br, assumed)  # the plan's estimate assumes B* = 16
    stage = spec.search.num_trials * br.budget_samples
    assert stage == scratch_grid_samples(br.budget_samples, (), ()) * spec.search.num_trials
    return branch_search_samples(br, validate_schedule=True, controls=len(dense)), stage, len(dense)


def print_protocol(names: list[str], rules: list[str]) -> float:
    print(f"PROTOCOL issue 60 (fixed before any run): sets {' '.join(COMMON)}; controls stage {' '.join(TUNING)}; "
          f"rules {', '.join(rules)}")
    print(f"CRITERIA (fixed before the runs): {CRITERIA}")
    total = 0.0
    for name in names:
        corpus, factor, sets = settings()[name]
        per_rule, stage, dense = estimated_samples(name)
        seconds = ((per_rule * len(rules) + stage) * SECONDS_PER_SAMPLE[corpus]
                   + DRY_RUN_SECONDS[corpus] * len(rules))
        total += seconds
        print(f"PLAN {name}: {corpus} D{factor} = {budget_samples(corpus, factor)} samples, "
              f"{tokens_per_parameter(corpus, factor):.1f} tokens per parameter; {' '.join(sets) or '(the corpus)'}; "
              f"{per_rule} samples a rule ({dense} dense controls at B* = 16) + the controls stage {stage}: about "
              f"{seconds / 60:.0f} min on 2 cores")
    print(f"PLAN total: about {total / 3600:.1f} hours of the 2-core CPU (budget 4; "
          f"{total * SLOWEST_MEASURED / 3600:.1f} at the slowest whole-search rate measured, 0.78 ms a sample)")
    return total


def search(name: str, rule: str, controls_from: str, tmp: Path) -> tuple[float, dict]:
    corpus = settings()[name][0]
    out = tmp / f"{name}-{rule}"
    cmd = [sys.executable, "-m", "cbs_ray.search", "--space", SPACES[corpus], "--validate-schedule",
           *(a for o in overrides(name, rule, controls_from) for a in ("--set", o)),
           "--set", f"storage_path={tmp / 'rr'}", "--output", str(out)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode:
        sys.exit(f"{name} {rule} search failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return time.perf_counter() - start, json.loads((out / "summary.json").read_text())


KEPT_KEYS = ("schedule_validation", "critical_batch_over_training", "batch_size_schedule", "controls_from")


def kept_run(name: str, rule: str, wall: float, summary: dict) -> dict:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return {"setting": name, "rule": rule, "wall_s": round(wall), "commit": commit,
            **{key: summary.get(key) for key in KEPT_KEYS}}


def record(run: dict) -> dict:
    """Print one run's figures; return what the verdict pools."""
    name, rule, v = run["setting"], run["rule"], run.get("schedule_validation") or {}
    iso, vs = v.get("iso_loss_steps") or {}, v.get("non_inferiority_vs_tuned") or {}
    front = v.get("frontier_controls") or {}
    print(f"RESULT {name} {rule}: wall {run['wall_s']} s; CBS(t) " + ", ".join(
        f"{p['samples_seen']}: {p['batch_size']}{'' if p['resolvable'] else ' (nr)'}"
        for p in run.get("critical_batch_over_training") or []) + f"; schedule {run.get('batch_size_schedule')}; "
        f"frontier B in {front.get('batches')}", flush=True)
    for c in v.get("controls", []):
        print(f"TABLE {name} {rule}: {c['name']} B={c['batch_size'] or 'schedule'} {c['steps']} steps, "
              f"loss {c['final_loss_mean']} by seed {c['final_losses']}")
    print(f"RESULT {name} {rule}: vs the best tuned fixed batch B={vs.get('best_fixed_batch')}: difference "
          f"{vs.get('difference')}, bound {vs.get('bound')}, non-inferior {vs.get('holds')} (tuned {vs.get('tuned')}); "
          f"iso-loss saved {iso.get('saved_fraction')} {iso.get('interval_95')} per seed {iso.get('per_seed')} "
          f"censored {iso.get('censored')} ({iso.get('bound') or 'an estimate'})", flush=True)
    return {"per_seed": {int(k): x for k, x in (iso.get("per_seed") or {}).items()},
            "non_inferior": vs.get("holds"), "batches": front.get("batches")}


def verdict(rule: str, results: dict, expected: int) -> None:
    sys.path.insert(0, str(ROOT))
    from cbs_ray.maths.iso_loss import pooled_saved_fraction

    pooled = pooled_saved_fraction({tag: r["per_seed"] for tag, r in results.items()})
    low = None if pooled.interval_95 is None else pooled.interval_95[0]
    primary = len(results) == expected and all(r["non_inferior"] for r in results.values())
    secondary = (pooled.saved_fraction is not None and pooled.saved_fraction >= TARGET_SAVED and low is not None
                 and low > 0)
    misses = [tag for tag, r in results.items() if not r["non_inferior"]]
    print(f"POOLED {rule}: PRIMARY non-inferior to the best tuned fixed batch on every setting: {primary}"
          f"{' (not on ' + ', '.join(misses) + ')' if misses else ''}; SECONDARY iso-loss saved "
          f"{pooled.saved_fraction} interval {pooled.interval_95} over {pooled.seeds} seeds, {pooled.settings} "
          f"settings: met {secondary}", flush=True)


def judge_kept(folder: Path) -> None:
    """Pool the runs kept in ``folder``: every run's figures, each rule's verdict, the runs missing, and any setting
    whose rules trained different fixed batches."""
    runs = {(r["setting"], r["rule"]): r for r in (json.loads(p.read_text()) for p in sorted(folder.glob("*.json")))}
    names = list(settings())
    by_rule = {rule: {name: record(runs[name, rule]) for name in names if (name, rule) in runs} for rule in RULES}
    for name in names:
        sets = {rule: r[name]["batches"] for rule, r in by_rule.items() if name in r}
        if len({json.dumps(b) for b in sets.values()}) > 1:
            print(f"CONTROLS {name}: the rules trained different fixed batches: {sets}", flush=True)
    for rule, results in by_rule.items():
        if results:
            verdict(rule, results, len(names))
    missing = [f"{n}-{r}" for n in names for r in RULES if (n, r) not in runs]
    print(f"RUNS kept {len(runs)} of {len(names) * len(RULES)}; missing: {', '.join(missing) or 'none'}"
          + ("; the verdict is judged on all of them, so this one is partial" if missing else ""), flush=True)


def check_dry_runs(names: list[str]) -> None:
    """Every setting's search (each rule) passes ``--dry-run``; the wall time of each printed."""
    for name in names:
        corpus = settings()[name][0]
        for rule in RULES:
            cmd = [sys.executable, "-m", "cbs_ray.search", "--space", SPACES[corpus], "--validate-schedule",
                   "--dry-run", *(a for o in overrides(name, rule) for a in ("--set", o))]
            start = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            said = [line for line in proc.stdout.splitlines() if "tokens per parameter" in line]
            print(f"DRY-RUN {name} {rule}: exit {proc.returncode} in {time.perf_counter() - start:.1f} s; "
                  f"{said[-1].strip() if said else proc.stderr.strip()[-300:]}", flush=True)
            if proc.returncode:
                sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the protocol and its estimated cost; run nothing")
    parser.add_argument("--check", action="store_true", help="run every setting's search with --dry-run, timed")
    parser.add_argument("--only", default=None, help="comma-separated settings: " + ", ".join(settings()))
    parser.add_argument("--keep", default=None, help="keep experiments and each run's figures here; a run whose "
                                                     "figures are kept is not trained again")
    parser.add_argument("--judge", metavar="DIR", help="pool the runs kept in DIR; run nothing")
    args = parser.parse_args()
    if args.judge:
        judge_kept(Path(args.judge))
        return
    names = args.only.split(",") if args.only else list(settings())
    unknown = [n for n in names if n not in settings()]
    if unknown:
        sys.exit(f"--only: unknown setting(s) {', '.join(unknown)} (known: {', '.join(settings())})")
    print_protocol(names, list(RULES))
    if args.check:
        check_dry_runs(names)
    if args.dry_run or args.check:
        return
    with tempfile.TemporaryDirectory() as scratch_dir:
        tmp = Path(args.keep or scratch_dir).resolve()
        tmp.mkdir(parents=True, exist_ok=True)
        for name in names:
            controls_from = "scratch"
            for rule in RULES:
                kept = tmp / f"{name}-{rule}.json"
                if args.keep and kept.is_file():
                    run = json.loads(kept.read_text())
                    print(f"KEPT {name} {rule}: {kept} (commit {run['commit'][:9]}), not trained again", flush=True)
                else:
                    wall, summary = search(name, rule, controls_from, tmp)
                    run = kept_run(name, rule, wall, summary)
                    if args.keep:
                        kept.write_text(json.dumps(run, indent=1) + "\n")
                record(run)
                # the rules after the first read the first's controls stage: the same tuned configurations and B*
                controls_from = run.get("controls_from") or controls_from
        if args.keep:
            judge_kept(tmp)


if __name__ == "__main__":
    main()
