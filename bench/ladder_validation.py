"""Issue 27's targets: the ladder's prediction of the full run's critical batch against a measurement, on two
tasks, as a user runs it (``--set search.method=ladder --validate-prediction``).

The success criteria are the code's, fixed before any of these runs (``analysis.ladder_summary``): the measured
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
* ``sst2bert`` — ``search_spaces/sst2_tiny_cpu.yaml`` as shipped, its eval loss, batches 16…256: held out (run
  once, after ``sst2lm``'s settings were fixed).

Tune experiments go to a temporary directory; one Ray per task, one after the other: run it under the machine's
Ray lock (``flock /tmp/ray.lock python bench/ladder_validation.py``).

    python bench/ladder_validation.py [--only lm,bert,sst2lm,sst2bert] [--keep DIR]
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
    # held out (run once, its settings fixed before: the space as shipped, its eval loss, D its own budget, the
    # batches the ladder's floor allows at a quarter of D: 16 steps at 256)
    "sst2bert": ("search_spaces/sst2_tiny_cpu.yaml",
                 ["search.batch_sizes=[16, 32, 64, 128, 256]", "search.metric=eval_loss", "search.mode=min"]),
}


def run(task: str, tmp: Path) -> tuple[float, dict]:
    space, sets = TASKS[task]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(TASKS))
    parser.add_argument("--keep", help="write the reports under this directory instead of a temporary one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(args.keep or name)
        for task in args.only.split(","):
            wall, summary = run(task, tmp)
            report(task, wall, summary)


if __name__ == "__main__":
    main()
