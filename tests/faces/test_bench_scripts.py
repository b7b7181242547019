"""The GPU benches are run in device sessions of a few minutes; a crash there wastes the session. Their
code paths (model from config, bf16 autocast, timing, accumulation, MFU arithmetic, the trial loop on a
device session) are checked here on the CPU with a tiny BERT (``--smoke``); only the CUDA probe and the
device itself are left to the GPU."""

import os
import re
import subprocess
import sys

import pytest

from helpers.paths import ROOT

# Benchmarks as tests (≈ 25 s): the slow tier, which CI runs as its own step (issue 25).
pytestmark = pytest.mark.slow


def test_the_gpu_bench_runs_end_to_end_on_the_cpu():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_bert_base.py"), "--smoke", "--no-compile", "--profile"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert len(results) == 3, done.stdout  # throughput at the micro-batch, then 2 and 4 micro-steps
    assert re.search(r"micro 16 eager: \d+ samples/s, MFU", results[0])
    assert "as 2 x 8 / 1 x 16" in results[1] and "as 4 x 4 / 1 x 16" in results[2]
    profile = [line for line in done.stdout.splitlines() if line.startswith("PROFILE")]
    assert "1 x 16" in profile[0] and "4 x 4" in profile[0] and len(profile) > 5
    # Which operators rank highest by growth varies run to run on a tiny model: that it lists operators.
    assert len(profile) == 16 and sum("aten::" in line for line in profile[1:]) >= 5


def test_the_gpu_trial_loop_bench_runs_end_to_end_on_the_cpu():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_trial_loop.py"), "--smoke"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert len(results) == 2, done.stdout
    assert re.search(r"micro 16 eager: \d+ samples/s, MFU \d+\.\d%", results[0])
    assert re.search(r"as 4 x 4 / 1 x 16: \d\.\d{3} \(overhead", results[1])


def test_every_bench_script_whose_help_loads_torch_or_ray_answers_it():
    """The scripts ``test_bench_help.py`` leaves out of the quick tier (their module-level imports load torch, Ray
    or transformers: 20-40 s each here), two at a time."""
    from concurrent.futures import ThreadPoolExecutor

    from test_bench_help import LIGHT, SCRIPTS

    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def helped(script):
        done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, env=env,
                              timeout=240, cwd=ROOT)
        return script.name, done.returncode, done.stderr[-500:] if done.returncode else done.stdout[:6]

    heavy = [p for p in SCRIPTS if p not in LIGHT]
    assert heavy, "every script's --help is light: test_bench_help.py covers them all"
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(helped, heavy))
    assert [(name, rc, out) for name, rc, out in results if rc != 0 or out != "usage:"] == []
