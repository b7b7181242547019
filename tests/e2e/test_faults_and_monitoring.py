"""Faults and monitoring on a real local Ray cluster: a Train worker killed mid-trial, the driver killed
mid-search and ``--resume``, the dashboard's HTTP API on 127.0.0.1 and the trial gauges in Ray's metrics."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from cbs_ray.spec.load import load_spec
from cbs_ray.tune.api import run_search
from cbs_ray.tune.runner import ray_session
from helpers.network import Poller, beyond_loopback, listening_sockets
from helpers.training import EARLIER_DEFAULT

TINY = EARLIER_DEFAULT + ["data.builtin_train_examples=2048", "data.builtin_eval_examples=512", "training.eval_every_samples=2048",
        "asha.grace_period_samples=2048"]


def _get(url: str, timeout: float = 5.0, authenticated: bool = True):
    """GET with Ray's bearer token when Ray's token authentication is on (the default in Ray 2.60)."""
    from ray._private.authentication.http_token_authentication import get_auth_headers_if_auth_enabled

    headers = get_auth_headers_if_auth_enabled({}) if authenticated else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
        body = response.read().decode()
    return json.loads(body) if body[:1] in "[{" else body


def _actors(dashboard: str) -> list[dict]:
    reply = _get(f"http://{dashboard}/api/v0/actors?limit=10000")
    return reply["data"]["result"]["result"]


class Watcher(Poller):
    """Polls the dashboard, the node's metrics endpoint and the listening sockets while a search runs (what
    the API does not answer yet is kept in ``errors``); kills one Train worker once the trial's first
    checkpointed result has reached Tune."""

    def __init__(self, dashboard: str, storage: Path):
        super().__init__()
        self.dashboard, self.storage = dashboard, storage
        self.api_answered, self.job_types, self.actor_classes, self.gauges = False, set(), set(), set()
        self.anonymous_status = None
        self.killed_pid = None
        self.listeners = set()

    def poll(self):
        import ray

        # The kill first, from its own actor list: a slower call below that fails (the metrics endpoint not up yet)
        # must not skip it while the trial's milestones pass.
        actors = _actors(self.dashboard)
        self._kill_one_worker_once_checkpointed(actors)
        self.listeners |= listening_sockets()
        if self.anonymous_status is None:
            try:
                _get(f"http://{self.dashboard}/api/jobs/", authenticated=False)
                self.anonymous_status = 200
            except urllib.error.HTTPError as e:
                self.anonymous_status = e.code
        self.api_answered |= "ray_version" in _get(f"http://{self.dashboard}/api/version")
        self.job_types |= {job.get("type") for job in _get(f"http://{self.dashboard}/api/jobs/")}
        self.actor_classes |= {a["class_name"] for a in actors}
        node = ray.nodes()[0]
        text = _get(f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics")
        self.gauges |= {name for name in ("cbs_ray_samples_per_s", "cbs_ray_samples_seen", "cbs_ray_metric")
                        if name in text}

    def _kill_one_worker_once_checkpointed(self, actors: list[dict]):
        # Once Tune has the trial's first result, Train has registered the checkpoint that came with it.
        if self.killed_pid is None and any(p.stat().st_size for p in self.storage.glob("*/B*/result.json")):
            workers = [a for a in actors if a["class_name"] == "RayTrainWorker" and a["state"] == "ALIVE"]
            if workers:
                self.killed_pid = int(workers[-1]["pid"])
                os.kill(self.killed_pid, signal.SIGKILL)


WATCHED_BUDGET = 8192  # 4 milestones: the kill lands after the first, the restarted workers report the other 3


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    """One trial of two gloo workers, 4 milestones; one worker is SIGKILLed after the first checkpoint. Its
    own Ray, started by ``ray_session`` as a search does (not the tests' shared one): the dashboard and the
    actors it lists are this search's."""
    root = tmp_path_factory.mktemp("faults")
    spec = load_spec(None, TINY + ["search.batch_sizes=[8]", "search.num_trials=1", "resources.workers_per_trial=2",
                                   f"training.budget_samples={WATCHED_BUDGET}", f"storage_path={root / 'ray_results'}",
                                   f"output_dir={root / 'out'}"])
    with ray_session() as context:
        with Watcher(context.dashboard_url, root / "ray_results") as watcher:
            result = run_search(spec, verbose=0)
    return context, watcher, result


def test_dashboard_api_answers_on_localhost_and_lists_the_job_and_actors(watched):
    context, watcher, _ = watched
    assert context.dashboard_url.startswith("127.0.0.1:")
    assert watcher.api_answered, watcher.errors[-3:]
    from ray._private.authentication.authentication_utils import is_token_auth_enabled

    if is_token_auth_enabled():  # Ray's token authentication stays on: no token, no answer
        assert watcher.anonymous_status == 401
    assert "DRIVER" in watcher.job_types
    # The Tune trial (a function trainable), its Train controller and the Train workers.
    assert {"TrainController", "RayTrainWorker"} <= watcher.actor_classes, watcher.actor_classes
    assert any("ImplicitFunc" in c for c in watcher.actor_classes), watcher.actor_classes


def test_a_local_search_listens_on_loopback_only_but_for_torchs_rendezvous(watched):
    # Issue 29 row 16: every server Ray starts for a local search binds 127.0.0.1 (tune.runner.start_local_ray).
    # The one exception is torch's: a 2-worker trial's process group meets at rank 0's TCPStore, which binds every
    # interface whatever host it is given (torch 2.13, both backends; docs/resume-and-faults.md). The in-process
    # trials of the default search start none (test_end_to_end.py checks that search has no exception at all).
    _, watcher, _ = watched
    assert len(watcher.listeners) >= 5, watcher.listeners  # the GCS, the raylet, the agents, the dashboard...
    beyond = beyond_loopback(watcher.listeners)
    # A Train worker's process is named for the task it runs (ray::RayTrainWorker, ray::execute._setup_...).
    train_worker = ("ray::RayTrainWorker", "ray::execute.")
    assert [s for s in beyond if not s[2].startswith(train_worker)] == [], beyond
    assert len({port for _, port, _ in beyond}) <= 2  # one trial: its store, and its restart's after the kill


def test_a_local_searchs_ray_files_are_private_to_the_user(watched):
    # Issue 29 row 17: Ray makes its session's subdirectories 0777; the directory above them is 0700.
    context, _, _ = watched
    session = Path(context.address_info["session_dir"])
    root = session.parent.parent  # <tmp>/cbs-ray-<uid>/ray/session_...: Ray makes ray/ 0777, its parent is ours
    assert root.stat().st_uid == os.getuid() and root.stat().st_mode & 0o777 == 0o700, oct(root.stat().st_mode)
    for ancestor in root.parents:  # nothing above it lets another user swap it out
        mode = ancestor.stat().st_mode
        assert not mode & 0o002 or mode & 0o1000, f"{ancestor} is world-writable without the sticky bit"


def test_trial_gauges_reach_rays_metrics(watched):
    _, watcher, _ = watched
    assert watcher.gauges == {"cbs_ray_samples_per_s", "cbs_ray_samples_seen", "cbs_ray_metric"}, watcher.errors[-3:]


def test_a_killed_train_worker_restarts_the_trial_from_its_checkpoint(watched):
    _, watcher, result = watched
    assert watcher.killed_pid is not None, ("no worker was killed", watcher.errors[-3:])
    trial = result.trials.iloc[0]
    assert trial["status"] == "completed" and trial["samples_seen"] == WATCHED_BUDGET
    history = result.history.sort_values("samples_seen")
    resumed = history[history["resumed_from_samples"] > 0]
    assert len(resumed) >= 1, "the trial never reported after a restart from its checkpoint"
    assert resumed["resumed_from_samples"].min() >= 2048  # continued from a milestone, not from zero
    assert (history.loc[history["resumed_from_samples"] == 0, "samples_seen"] < resumed["samples_seen"].min()).all()


# ---- the driver killed mid-search, then --resume ----------------------------------------------------

def _trial_results(experiment: Path) -> dict[str, list[dict]]:
    """Every trial directory's reports as Tune wrote them, in order."""
    out = {}
    for path in experiment.glob("*/result.json"):
        out[path.parent.name] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def _kill_session(session_id: int) -> None:
    """SIGKILL every process of the session the driver leads (it was started with start_new_session):
    the driver and the local Ray it started (GCS, raylet, dashboard, workers), as a crashed head would."""
    def members() -> list[int]:
        pids = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == session_id and fields[0] != "Z":  # after pid and (comm): state, ppid, pgrp, session
                pids.append(int(stat.parent.name))
        return pids

    for _ in range(50):
        alive = members()
        if not alive:
            return
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    raise AssertionError(f"processes of the killed search still alive: {members()}")


BUDGET = 8192  # 4 milestones of 2048: a trial mid-way has a checkpoint, and more reports to resume into
TRIALS = 3  # 2 at once on 2 CPUs: one finishes while another is mid-way


def _start_search(tmp_path: Path, *more: str, budget: int = BUDGET) -> tuple[subprocess.Popen, Path]:
    """The CLI in its own process session: TRIALS in-process trials of ``budget`` samples, no early stopping."""
    argv = [sys.executable, "-m", "cbs_ray.search", "--output", str(tmp_path / "out")]
    for override in TINY + ["search.batch_sizes=[8, 16]", f"search.num_trials={TRIALS}", "search.early_stopping=false",
                            f"training.budget_samples={budget}", f"storage_path={tmp_path / 'ray_results'}", *more]:
        argv += ["--set", override]
    log = tmp_path / "driver.log"
    # Tune snapshots the experiment every second here (default: every 10 s or more), so a kill lands
    # after a snapshot that knows the finished trial.
    env = {**os.environ, "TUNE_GLOBAL_CHECKPOINT_S": "1"}
    with open(log, "w") as out:
        driver = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return driver, log


def _saved_trials(experiment: Path) -> dict[str, tuple[str, int]]:
    """What a restore would see: each trial's status and the samples of its latest checkpoint (0: none),
    read from Tune's newest experiment snapshot in storage. Reports in result.json can be newer than that
    snapshot, so they cannot tell what a resume will continue from."""
    from ray.tune.trainable.metadata import _TrainingRunMetadata

    snapshots = sorted(experiment.glob("experiment_state-*.json"))
    try:
        trial_data = json.loads(snapshots[-1].read_text())["trial_data"]
    except (IndexError, OSError, ValueError):  # no snapshot yet, or one being copied in
        return {}
    saved = {}
    for trial_json, run_json in trial_data:
        trial = json.loads(trial_json)
        latest = _TrainingRunMetadata.from_json_state(run_json).checkpoint_manager.latest_checkpoint_result
        saved[trial["trial_id"]] = (trial["status"], latest.metrics["samples_seen"] if latest else 0)
    return saved


def _wait_until_one_finished_and_one_checkpointed(driver, log: Path, budget: int = BUDGET) -> tuple[Path, dict]:
    """The experiment directory and its snapshot (see _saved_trials), once Tune has snapshotted one trial
    finished and another mid-way with a checkpoint."""
    deadline = time.time() + 300
    while time.time() < deadline and driver.poll() is None:
        time.sleep(0.5)
        lines = [line for line in log.read_text().splitlines() if line.startswith("experiment: ")]
        if not lines:
            continue
        experiment = Path(lines[0].split(": ", 1)[1])
        saved = _saved_trials(experiment)
        finished = [t for t, (status, _) in saved.items() if status == "TERMINATED"]
        midway = [t for t, (status, samples) in saved.items() if status == "RUNNING" and 0 < samples < budget]
        if finished and midway:
            return experiment, saved
    raise AssertionError(f"no snapshot with a trial finished while another ran (driver exit {driver.poll()}):\n"
                         f"{log.read_text()[-2000:]}")


@pytest.mark.slow  # ≈ 40 s on 2 cores, its own Ray: CI runs it in its `pytest -m slow` step beside plain pytest (issue 25)
def test_ctrl_c_stops_the_search_and_prints_the_resume_command(tmp_path):
    budget = BUDGET // 2  # nothing resumes here: 2 milestones are enough for a trial mid-way
    driver, log = _start_search(tmp_path, budget=budget)
    try:
        experiment, _ = _wait_until_one_finished_and_one_checkpointed(driver, log, budget)
        driver.send_signal(signal.SIGINT)
        assert driver.wait(timeout=120) == 130
    finally:
        _kill_session(driver.pid)
        driver.wait()
    assert f"continue with: cbs-ray search --resume {shlex.quote(str(experiment))}" in log.read_text()
    assert "Tuner.restore(" not in log.read_text()  # Tune's own advice (Python) is not printed (issue 40 row 13)
    assert not (tmp_path / "out" / "summary.json").exists()  # no report of a half-run search as if done


@pytest.mark.slow  # ≈ 80-100 s on 2 cores, its own Ray twice: CI runs it in its `pytest -m slow` step beside plain pytest (issue 25)
def test_a_killed_driver_resumes_with_every_finished_trial_once(tmp_path):
    budget = BUDGET
    study_storage = f"sqlite:///{tmp_path / 'cbs.db'}"  # the Optuna study must stay consistent too
    driver, log = _start_search(tmp_path, f"search.study_storage={study_storage}")
    try:
        experiment, saved = _wait_until_one_finished_and_one_checkpointed(driver, log)
    finally:
        killed_at = time.time()
        _kill_session(driver.pid)
        driver.wait()
    finished = {t for t, (status, _) in saved.items() if status == "TERMINATED"}
    checkpointed = {t: samples for t, (status, samples) in saved.items() if status == "RUNNING" and samples}
    assert finished and checkpointed

    resumed = subprocess.run([sys.executable, "-m", "cbs_ray.search", "--resume", str(experiment),
                              "--output", str(tmp_path / "out")], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    trials = summary["trials"]
    ids = [t["trial_id"] for t in trials]
    assert len(ids) == len(set(ids)) == TRIALS  # every trial once, none lost, none added twice
    assert all(t["status"] == "completed" and t["samples_seen"] == budget for t in trials)
    assert finished <= set(ids)
    after = {name.split("_", 1)[1]: rows for name, rows in _trial_results(experiment).items()}  # B<batch>_<id>
    # Each trial the snapshot knew mid-way continues from that checkpoint (or a later one, if a newer
    # snapshot landed before the kill). A trial it knew no checkpoint of rightly starts again from zero.
    for trial_id, samples in checkpointed.items():
        resumed_rows = [r for r in after[trial_id] if r["reported_at"] > killed_at]
        assert resumed_rows, f"{trial_id} reported nothing after the resume"
        first = resumed_rows[0]
        assert first["samples_seen"] > first["resumed_from_samples"] >= samples, \
            f"{trial_id} did not continue from its checkpoint at {samples} samples: {first}"
    # The study: each Tune trial exactly once, complete with its final value; a trial the killed driver
    # had asked for after Tune's last snapshot never ran and is marked failed and orphaned.
    import optuna

    study = optuna.load_study(study_name=experiment.name, storage=study_storage)
    told = [t for t in study.trials if t.state != optuna.trial.TrialState.FAIL]
    assert sorted(t.user_attrs["tune_trial_id"] for t in told) == sorted(ids)
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in told)
    final = {t["trial_id"]: t["accuracy"] for t in trials}  # a trial rerun after the resume keeps its first value
    assert all(t.value == final[t.user_attrs["tune_trial_id"]] for t in told if t.user_attrs["tune_trial_id"] in finished)
    assert all("orphaned" in t.user_attrs for t in study.trials if t.state == optuna.trial.TrialState.FAIL)
