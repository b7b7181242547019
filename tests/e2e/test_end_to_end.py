"""End to end on a real local Ray cluster: real Tune trials, real TorchTrainer workers (gloo)."""

import json
import subprocess
import sys

import pytest

from cbs_ray import run_search
from cbs_ray.spec.load import load_spec
from helpers.network import ListenerWatch, beyond_loopback
from helpers.training import EARLIER_DEFAULT

TINY = EARLIER_DEFAULT + ["data.builtin_train_examples=2048", "data.builtin_eval_examples=512", "training.budget_samples=4096",
        "training.eval_every_samples=2048", "asha.grace_period_samples=2048", "search.batch_sizes=[8, 16]"]


@pytest.fixture(scope="module")
def ddp_search(tmp_path_factory, shared_ray):
    """Two trials, each a TorchTrainer with 2 gloo workers, one per batch size (the seeded trial of each). (Five
    until issue 25: each TorchTrainer trial costs 15-40 s on 2 cores; TPE's proposals, ASHA's stops and the
    reload with Ray's own tools are checked on in-process trials, ``asha_search``.)"""
    root = tmp_path_factory.mktemp("ddp")
    spec = load_spec(None, TINY + ["search.num_trials=2", "resources.workers_per_trial=2", "search.seed=1",
                                   f"storage_path={root / 'ray_results'}", f"output_dir={root / 'out'}"])
    return run_search(spec, verbose=0)


def test_every_trial_ran_two_data_parallel_workers(ddp_search):
    history = ddp_search.history
    assert history["trial_id"].nunique() == 2
    assert set(history["workers"]) == {2}
    assert set(history["batch_size"]) == {8, 16}
    assert (history["micro_batch"] * history["accumulation"] * history["workers"] == history["batch_size"]).all()


def test_noise_scale_measured_online_on_two_gloo_workers(ddp_search):
    history = ddp_search.history
    # Each worker's own gradient (B_small = B / 2) against the all-reduced one, via DDP's comm hook.
    assert (history["b_small"] == history["batch_size"] // 2).all()
    # A single milestone's |G|² estimate can still be <= 0 this early (B_simple NaN there), but every
    # trial yields finite positive values and the report's training averages are finite and positive.
    finite = history.dropna(subset=["b_simple"])
    assert set(finite["trial_id"]) == set(history["trial_id"])
    assert (finite["b_simple"] > 0).all() and (finite["trace_sigma"] > 0).all()
    noise = ddp_search.summary.noise_scale
    assert noise.mean > 0 and noise.early > 0
    assert all(r["b_simple_mean"] > 0 for r in ddp_search.summary.per_batch)


@pytest.fixture(scope="module")
def asha_search(tmp_path_factory, shared_ray):
    """Six in-process trials (seconds each), two batch sizes, ASHA per batch size at a 2048-sample rung."""
    root = tmp_path_factory.mktemp("asha")
    spec = load_spec(None, TINY + ["search.num_trials=6", "search.seed=1", f"storage_path={root / 'ray_results'}",
                                   f"output_dir={root / 'out'}"])
    with ListenerWatch() as watch:
        result = run_search(spec, verbose=0)
    return result, watch.sockets


def test_an_in_process_search_listens_on_loopback_only(asha_search):
    # Issue 29 row 16, on trials like the default search's (one in-process worker each): every socket the
    # search's Ray and its trials listen on binds loopback.
    _, sockets = asha_search
    assert len(sockets) >= 5, sockets
    assert beyond_loopback(sockets) == []


def test_asha_stopped_a_trial_early_and_every_batch_size_completed(asha_search):
    trials = asha_search[0].trials
    assert (trials["status"] == "stopped").sum() >= 1
    assert (trials.loc[trials["status"] == "stopped", "samples_seen"] < 4096).all()
    completed = trials[trials["status"] == "completed"]
    assert set(completed["batch_size"]) == {8, 16}  # the seeded trial of each batch size finishes


def test_summary_written_with_the_answer(ddp_search):
    summary = json.loads((ddp_search.output_dir / "summary.json").read_text())
    assert summary["critical_batch"]["batch_size"] in (8, 16)
    assert ddp_search.critical_batch == summary["critical_batch"]["batch_size"]
    assert {r["batch_size"] for r in summary["per_batch"]} == {8, 16}
    assert len(summary["pareto"]) >= 1
    assert (ddp_search.output_dir / "trials.csv").is_file()


def test_results_reload_with_rays_own_tools(asha_search):
    from ray import tune
    from ray.tune import ExperimentAnalysis

    experiment_path = asha_search[0].experiment_path
    analysis = ExperimentAnalysis(experiment_path)
    assert len(analysis.trials) == 6
    finals = {t.trial_id: t.last_result["samples_seen"] for t in analysis.trials}
    assert max(finals.values()) == 4096 and min(finals.values()) < 4096

    from cbs_ray.train.trial import run_trial

    grid = tune.Tuner.restore(experiment_path, trainable=run_trial).get_results()
    assert len(grid) == 6 and not grid.errors


def test_default_cli_path_in_process_trials(tmp_path):
    """The CLI as a user types it, shrunk: single-worker trials run in-process inside Tune trials."""
    out = tmp_path / "out"
    args = [a for o in TINY + ["search.num_trials=3", "search.repeats=2", f"storage_path={tmp_path / 'rr'}"]
            for a in ("--set", o)]
    proc = subprocess.run([sys.executable, "-m", "cbs_ray.search", *args, "--output", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Critical batch, turning point" in proc.stdout and "Critical batch, steps/samples tradeoff" in proc.stdout
    assert "Recommendation: batch" in proc.stdout and (out / "report.html").is_file()
    assert "B=8 = 8 micro × 1 accum × 1 workers" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert {"critical_batch", "pareto", "per_batch"} <= set(summary)
    # 3 search trials, then each batch size's best re-trained once more with another seed (repeats: 2).
    assert len(summary["trials"]) == 5 and sum(t["repeat"] for t in summary["trials"]) == 2
    # Not a terminal: the progress display's one line per finished trial (5), none of Tune's tables, and the
    # whole run in as many lines as the default search's budget of 50 allows for its 18 trials (issue 28).
    out_lines = (proc.stdout + proc.stderr).splitlines()
    assert sum(" trial B=" in line for line in out_lines) == 5
    assert not any("Configuration for experiment" in line or "Trial status" in line for line in out_lines)
    assert len(out_lines) <= 50 - 18 + 5, "\n".join(out_lines)
    assert all(r["runs"] == 2 for r in summary["per_batch"])
    verdict = summary["critical_batch"]["turning_point"]["uncertainty"]["verdict"]
    assert verdict["text"].startswith(("resolved", "not resolvable")) and "  noise: " in proc.stdout


def test_search_ends_with_a_full_report(ddp_search):
    out = ddp_search.output_dir
    for name in ("report.html", "report.md", "metric_vs_batch.png", "steps_vs_samples.png", "pareto.png",
                 "lr_vs_batch.png", "noise_scale.png"):
        assert (out / name).is_file(), name
    assert ddp_search.summary.recommendation.batch_size in (8, 16)
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 5


def test_report_cli_on_the_experiment_and_on_a_partial_copy(ddp_search, tmp_path):
    import shutil

    from cbs_ray.cli import report_main
    from cbs_ray.methods.scratch.report import analyze

    assert report_main([ddp_search.experiment_path, "--output", str(tmp_path / "full"), "--tolerance", "0.5"]) == 0
    full = json.loads((tmp_path / "full" / "summary.json").read_text())
    # With a 50 % tolerance every batch size is "as good as the best": the largest batch is critical.
    assert full["critical_batch"]["turning_point"]["batch_size"] == 16

    # A partially finished experiment: every trial's results cut after its first milestone.
    partial = tmp_path / "partial"
    shutil.copytree(ddp_search.experiment_path, partial)
    for result in partial.glob("*/result.json"):
        result.write_text(result.read_text().splitlines()[0] + "\n")
    for progress in partial.glob("*/progress.csv"):
        progress.write_text("\n".join(progress.read_text().splitlines()[:2]) + "\n")
    report = analyze(partial)
    assert report.critical_batch.batch_size is None
    assert "no batch size has a trial that reached the full budget" in report.critical_batch.reason
    assert report.recommendation is None
    assert report.write(tmp_path / "partial_out").is_file()


@pytest.mark.slow  # ≈ 50 s, its own Ray on 2 cores: CI runs it in its `pytest -m slow` step, beside plain pytest (issue 25)
def test_probe_prints_b_simple_and_a_grid(tmp_path):
    """--probe: one short in-process run with gradient accumulation measures B_simple."""
    args = [a for o in TINY + [f"storage_path={tmp_path / 'rr'}", "data.builtin_train_examples=4096",
                               "search.batch_sizes=[16, 32, 64]", "training.budget_samples=8192",
                               "asha.grace_period_samples=4096"] for a in ("--set", o)]
    proc = subprocess.run([sys.executable, "-m", "cbs_ray.search", *args, "--probe"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "B=32 = 8 micro × 4 accum × 1 workers" in proc.stdout   # the middle of the grid, accumulating
    line = next(s for s in proc.stdout.splitlines() if s.startswith("probe: B_simple = "))
    assert float(line.split("=")[1].split()[0]) > 0
    assert "proposed batch sizes [" in line and "use it: --set 'search.batch_sizes=[" in proc.stdout


def test_diverging_trials_do_not_take_the_search_down(tmp_path, shared_ray):
    """An LR of 1e30: the first step sends the weights past what fp32 holds, so every trial reads a non-finite
    loss on every CPU (lr 2.0, the old value, left B=8 finite on a fresh install of 2026-12-05, where CI had
    passed before); the search completes and the report counts them."""
    spec = load_spec(None, TINY + ["search.num_trials=2", "training.base_lr=1e30", "training.grad_clip_norm=null",
                                   f"storage_path={tmp_path / 'rr'}", f"output_dir={tmp_path / 'out'}"])
    result = run_search(spec, verbose=0)
    assert set(result.trials["status"]) == {"diverged"}
    assert [r["diverged"] for r in result.summary.per_batch] == [1, 1]
    assert result.critical_batch is None and "no batch size" in result.summary.critical_batch.reason
    assert (result.output_dir / "report.html").is_file()


@pytest.mark.slow  # ≈ 65 s, its own Ray on 2 cores: CI runs it in its `pytest -m slow` step, beside plain pytest (issue 25)
def test_a_model_that_fits_nowhere_ends_the_search_at_the_first_trial(tmp_path):
    """A memory limit below what the worker holds: the first trial's probe finds nothing fits, which
    every trial shares, so the search stops there (not after 4 trials × 3 attempts) with one line."""
    args = [a for o in TINY + ["search.num_trials=4", "training.probe_micro_batch=true",
                               "training.memory_limit_gb=0.001", f"storage_path={tmp_path / 'rr'}"]
            for a in ("--set", o)]
    # --verbose: the attempts are counted from the workers' log lines, which reach the console only with it.
    proc = subprocess.run([sys.executable, "-m", "cbs_ray.search", *args, "--output", str(tmp_path / "out"),
                           "--verbose"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: not even a micro-batch of 1 fits in memory (cpu<=0.001GiB, sequence length")
    assert "raise training.memory_limit_gb" in last and "Traceback" not in proc.stderr.split("error: ")[-1]
    # Each attempt's probe prints its first size. Two trials start at once on 2 CPUs, and a retry may start
    # before the stop lands: at most 4 attempts, against 4 trials × 3 attempts = 12 without the stop.
    attempts = (proc.stdout + proc.stderr).count("micro-batch probe: micro-batch 2:")
    assert 1 <= attempts <= 4, attempts
    # The report on that experiment says why there is nothing to report.
    experiment = last.rsplit("(experiment: ", 1)[1].rstrip(")")
    report = subprocess.run([sys.executable, "-m", "cbs_ray.report", experiment], capture_output=True, text=True,
                            timeout=300)
    assert report.returncode != 0 and report.stderr.strip().splitlines()[-1].endswith(
        "trials failed, the first with: MemoryError: not even a micro-batch of 1 fits in memory "
        "(cpu<=0.001GiB, sequence length 32, fp32)"), report.stderr[-2000:]
    # Resumed, the trials fail alike and the resumed search says so in the same line.
    resumed = subprocess.run([sys.executable, "-m", "cbs_ray.search", "--resume", experiment, "--output",
                              str(tmp_path / "out")], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 1, resumed.stderr[-2000:]
    assert resumed.stderr.strip().splitlines()[-1].startswith(
        "error: not even a micro-batch of 1 fits in memory (cpu<=0.001GiB"), resumed.stderr[-2000:]
