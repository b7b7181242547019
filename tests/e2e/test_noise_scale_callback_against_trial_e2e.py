"""Issue 39's last target: ``NoiseScaleCallback`` in HF Trainer under 2-process DDP reads a B_simple inside the
interval cbs-ray's own trial measures on the same data.

The same run (``noise_runs``: a tiny GPT-2 on a Markov language, batch 32, the same LR, warmup, decay and
clipping) is trained twice over: by cbs-ray's trial, 2 gloo workers (B_small = a worker's 16 samples, B_big = the
all-reduced 32), on 4 seeds (``search.repeats``); and by an unmodified HF Trainer under ``torchrun
--nproc-per-node 2`` with the callback (B_small = the first micro-batch's 4 samples, B_big = the step's 32), on 3
seeds. Each run's B_simple over training is read as the report reads a trial's: the ratio of the mean tr Σ to
the mean |G|² over its 8 readings (one per 512 samples).

The criterion, fixed before the first run: every one of the callback's seeds inside the 95 % prediction
interval of one more run of cbs-ray's trial, on the log scale (mean ± t(0.975, n − 1) · sd · √(1 + 1/n) over
the trial's n = 4 seeds): the interval a new measurement of the same quantity falls in, so it is the trial's
own seed-to-seed spread that decides, not a margin chosen here. A callback that mistook its B_small (the
first micro-batch's 4 samples read as a process's 16) would read tr Σ about 7 times too large and fail."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("accelerate")
pytestmark = [pytest.mark.slow, pytest.mark.multiproc]  # Ray's 2 workers, then torchrun's 2 processes

from noise_runs import (  # noqa: E402
    ALPHA,
    BASE_BATCH,
    BASE_LR,
    BATCH,
    BUDGET_SAMPLES,
    EVERY_SAMPLES,
    WARMUP_FRACTION,
    collate,
    datasets_pair,
    gpt2,
    ratio_of_means,
)

TRIAL_SEEDS, CALLBACK_SEEDS = 4, [1, 2, 3]
HERE = Path(__file__).parent


def trial_readings(tmp_path) -> list[float]:
    """cbs-ray's own trial on the run, ``TRIAL_SEEDS`` seeds: each trial's B_simple over training."""
    from ray import cloudpickle

    from cbs_ray import run_search
    from cbs_ray.spec.load import load_spec

    cloudpickle.register_pickle_by_value(sys.modules["noise_runs"])  # Ray's workers need not import it
    spec = load_spec(None, [
        "task=causal-lm", "search.metric=eval_loss", "search.mode=min", f"search.batch_sizes=[{BATCH}]",
        f"search.alpha_range=[{ALPHA}, {ALPHA}]", f"search.warmup_fraction_range=[{WARMUP_FRACTION}, {WARMUP_FRACTION}]",
        "search.num_trials=1", f"search.repeats={TRIAL_SEEDS}", "search.early_stopping=false",
        f"training.budget_samples={BUDGET_SAMPLES}", f"training.eval_every_samples={EVERY_SAMPLES}",
        f"training.base_lr={BASE_LR}", f"training.base_batch={BASE_BATCH}", "training.lr_decay=linear",
        "training.micro_batch_size=16", "training.noise_scale=true", "resources.workers_per_trial=2",
        "resources.cpus_per_worker=1", f"storage_path={tmp_path / 'ray_results'}"])
    train, evaluation = datasets_pair()
    result = run_search(spec, model_init=gpt2, train_dataset=train, eval_dataset=evaluation, data_collator=collate,
                        output_dir=str(tmp_path / "out"), verbose=0)
    history = result.history.dropna(subset=["grad_sq", "trace_sigma"])
    readings = [ratio_of_means(list(group["grad_sq"]), list(group["trace_sigma"]))
                for _, group in history.groupby("trial_id")]
    assert len(readings) == TRIAL_SEEDS and all(len(g) == 8 for _, g in history.groupby("trial_id"))
    return readings


def callback_readings(tmp_path) -> dict:
    out = tmp_path / "callback.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parents[1]),
                                                        os.environ.get("PYTHONPATH", "")]), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(HERE / "noise_scale_ddp_script.py"), str(out), str(tmp_path / "hf"), *map(str, CALLBACK_SEEDS)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    start = done.stderr.find("Traceback")
    assert done.returncode == 0, done.stderr[start:start + 4000] if start >= 0 else done.stderr[-4000:]
    return json.loads(out.read_text())


def prediction_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """The interval one more draw falls in with probability ``level``, for log-normal draws: on the log scale
    mean ± t(1 − (1 − level)/2, n − 1) · sd · √(1 + 1/n)."""
    from scipy import stats

    logs = [math.log(v) for v in values]
    n = len(logs)
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = stats.t.ppf(1 - (1 - level) / 2, n - 1) * sd * math.sqrt(1 + 1 / n)
    return math.exp(mean - half), math.exp(mean + half)


def test_prediction_interval_of_known_draws():
    # log values 0, 1, 2, 3: mean 1.5, sd 1.291, t(0.975, 3) = 3.182, √(1 + 1/4) = 1.118: half-width 4.593.
    low, high = prediction_interval([math.exp(k) for k in range(4)])
    assert math.log(low) == pytest.approx(1.5 - 4.5930, abs=1e-3) and math.log(high) == pytest.approx(6.093, abs=1e-3)


def test_the_callback_under_ddp_reads_inside_the_interval_of_cbs_rays_own_trial(tmp_path, shared_ray):
    trial = trial_readings(tmp_path)
    callback = callback_readings(tmp_path)
    low, high = prediction_interval(trial)
    print(f"\ncbs-ray's trial (2 gloo workers, B_small 16, B_big 32), {TRIAL_SEEDS} seeds: B_simple "
          + ", ".join(f"{b:.1f}" for b in trial) + f"; 95 % prediction interval [{low:.1f}, {high:.1f}]")
    for seed, run in callback.items():
        assert run["world_size"] == 2 and run["steps"] == BUDGET_SAMPLES // BATCH and len(run["grad_sq"]) == 8
        b = ratio_of_means(run["grad_sq"], run["trace_sigma"])
        print(f"NoiseScaleCallback (torchrun 2 processes, B_small 4, B_big 32), seed {seed}: B_simple {b:.1f} "
              f"(|G|² {sum(run['grad_sq']) / 8:.4g}, tr Σ {sum(run['trace_sigma']) / 8:.4g}), "
              f"{'inside' if low <= b <= high else 'OUTSIDE'}")
        run["reading"] = b
    for seed, run in callback.items():
        assert low <= run["reading"] <= high, (seed, run["reading"], (low, high), trial)
