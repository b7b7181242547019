"""The cluster path, on one machine (issue 20): a head with ``CPU: 0`` (as cluster.yaml has) and two worker
nodes of one CPU each, one with a custom resource standing in for the GPU node type, each a ``ray start
--block`` process with its own ports, token authentication on (as a cluster that ``ray start`` brings up
with a token has it). A search is submitted as a Ray Job exactly as docs/clusters.md says, with its
storage on a directory every node sees. Every process is stopped by its process ID at the end, its children
included; nothing is written to /tmp/ray, and no ``ray stop``.

While the search runs, headless Chromium (Debian's ``chromium``; skipped where absent) opens the dashboard's
Jobs and Actors pages as a signed-in user would, through a local proxy that adds the token, and screenshots them
(docs/dashboard_jobs.png and docs/dashboard_actors.png are such a pair).

Last, a worker node is killed mid-search (node loss): its trials continue from their checkpoints on the other.

Run: ``pytest -m cluster`` (opt-in, like slow and gpu: .ci/run runs it as its own step after ``pytest``;
≈ 5½ min on 2 cores).
"""

import http.client
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional

import pandas as pd
import pytest

from helpers.paths import ROOT as REPO
from helpers.training import EARLIER_DEFAULT

pytestmark = pytest.mark.cluster  # and e2e, as every test under tests/e2e/

# test_end_to_end's TINY, in-process trials (one CPU each): two at a time, one per worker node.
SEARCH = EARLIER_DEFAULT + ["data.builtin_train_examples=2048", "data.builtin_eval_examples=512",
                            "training.budget_samples=4096", "training.eval_every_samples=2048",
                            "asha.grace_period_samples=2048", "search.batch_sizes=[8, 16]", "search.num_trials=4"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) for every process, from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            table[int(entry)] = (int(fields[1]), fields[19])
    return table


def _descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, start time) of every process below ``pid``: the raylets, GCS, dashboard, workers, job drivers."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append((child, table[child][1]))
            todo.append(child)
    return found


class LocalCluster:
    """Ray nodes on this host, each a ``ray start --block`` process; ``stop`` ends them by process ID."""

    def __init__(self):
        # Short: Ray's unix sockets live under it (a path limit of 107 bytes). Its ray_current_cluster keeps
        # this cluster out of /tmp/ray, where other drivers' ray.init() would find it.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="cbsray-", dir="/tmp"))
        self.token = secrets.token_hex(32)
        (self.temp_dir / "auth_token").write_text(self.token)
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.temp_dir / "auth_token"),
                    "RAY_USAGE_STATS_ENABLED": "0",
                    # README's `python -m …` and `ray …` are this environment's.
                    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        self.env.pop("RAY_ADDRESS", None)
        self.gcs_port, self.dashboard_port = _free_port(), _free_port()
        self.processes: list[subprocess.Popen] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _start(self, name: str, args: list[str], nodes: int) -> None:
        ports = [f"--{flag}={_free_port()}" for flag in ("node-manager-port", "object-manager-port",
                                                          "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                                                          "metrics-export-port", "runtime-env-agent-port")]
        log = open(self.temp_dir / f"{name}.log", "w")
        # A temp dir per node, as separate machines have: nodes sharing one also share runtime_resources,
        # and a worker node's runtime-env agent then deletes the job driver's working directory on the head.
        self.processes.append(subprocess.Popen(["ray", "start", "--block", f"--temp-dir={self.temp_dir / name}",
                                                *args, *ports], env=self.env, stdout=log, stderr=subprocess.STDOUT))
        self.wait_for_nodes(nodes)

    def start(self) -> "LocalCluster":
        self._start("head", ["--head", f"--port={self.gcs_port}", "--num-cpus=0", "--dashboard-host=127.0.0.1",
                             f"--dashboard-port={self.dashboard_port}", f"--ray-client-server-port={_free_port()}",
                             "--disable-usage-stats"], nodes=1)
        # One at a time: raylets starting together on one host race for their socket names.
        self._start("worker1", [f"--address={self.address}", "--num-cpus=1", '--resources={"fake_gpu": 1}'], nodes=2)
        self._start("worker2", [f"--address={self.address}", "--num-cpus=1"], nodes=3)
        return self

    def api(self, path: str):
        request = urllib.request.Request(f"{self.dashboard}{path}", headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)

    def nodes(self) -> list[dict]:
        return [n for n in self.api("/api/v0/nodes?limit=100")["data"]["result"]["result"] if n["state"] == "ALIVE"]

    def wait_for_nodes(self, count: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.processes):
                raise RuntimeError(f"a ray start process exited; see {self.temp_dir}/*.log")
            try:
                if len(self.nodes()) >= count:
                    return
            except OSError:  # the dashboard is not up yet
                pass
            time.sleep(1)
        raise TimeoutError(f"{count} Ray nodes did not come up in {timeout} s; see {self.temp_dir}/*.log")

    def stop(self) -> None:
        """SIGTERM each ``ray start --block`` (it stops what it started), then SIGKILL whatever of their
        process trees is left (a job driver, a worker), each by its pid and start time."""
        tree = [proc for p in self.processes for proc in _descendants(p.pid)]
        for p in reversed(self.processes):
            p.send_signal(signal.SIGTERM)
        for p in self.processes:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        alive = _process_table()
        for pid, started in tree:
            if alive.get(pid, (None, None))[1] == started:
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    local = LocalCluster()
    try:
        yield local.start()
    finally:
        local.stop()


CHROMIUM = shutil.which("chromium")
# Ray's dashboard opens this dialog when an API call is refused for want of a token.
SIGN_IN_DIALOG = "Authentication Token Required"


def _signed_in_proxy(cluster: LocalCluster) -> ThreadingHTTPServer:
    """A browser's way in with the token: each request forwarded to the dashboard with ``Authorization:
    Bearer <token>`` added, as the cookie the sign-in dialog sets would send it (a Chromium command line can
    set neither). Served from a thread; ``shutdown()`` it."""

    class Forward(BaseHTTPRequestHandler):
        def _forward(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection", "keep-alive")}
            headers["Authorization"] = f"Bearer {cluster.token}"
            upstream = http.client.HTTPConnection("127.0.0.1", cluster.dashboard_port, timeout=30)
            try:
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                response = upstream.getresponse()
                data = response.read()
            finally:
                upstream.close()
            self.send_response(response.status, response.reason)
            for k, v in response.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "keep-alive", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _forward

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _screenshot_dashboard(cluster: LocalCluster, out: Path) -> dict[str, tuple[Path, str]]:
    """The Jobs and Actors pages as headless Chromium renders them (1280×800): page -> (PNG, DOM)."""
    out.mkdir(parents=True, exist_ok=True)
    proxy = _signed_in_proxy(cluster)
    pages = {}
    try:
        for page in ("jobs", "actors"):
            png = out / f"dashboard_{page}.png"
            dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                  f"--user-data-dir={out / 'profile'}", "--window-size=1280,800",
                                  "--virtual-time-budget=10000", f"--screenshot={png}", "--dump-dom",
                                  f"http://127.0.0.1:{proxy.server_address[1]}/#/{page}"],
                                 capture_output=True, text=True, timeout=90).stdout
            pages[page] = (png, dom)
    finally:
        proxy.shutdown()
        proxy.server_close()
    return pages


def _run(cluster: LocalCluster, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=REPO, env=cluster.env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def submitted(cluster, tmp_path_factory):
    """docs/clusters.md's command: ``ray job submit --address <dashboard> --working-dir . -- python -m cbs_ray.search
    --address auto --set storage_path=… --output …``, from the checkout, waiting for the job to end. Once
    a trial runs, the dashboard's Jobs and Actors pages are screenshotted (where Chromium is installed)."""
    root = tmp_path_factory.mktemp("submitted")
    started = time.monotonic()
    args = ["ray", "job", "submit", "--address", cluster.dashboard, "--working-dir", ".", "--",
            "python", "-m", "cbs_ray.search", "--address", "auto",
            *[arg for setting in SEARCH for arg in ("--set", setting)],
            "--set", f"storage_path={root / 'storage'}", "--output", str(root / "out")]
    pages, trials_seen = {}, False
    with open(root / "submit.out", "w") as stdout, open(root / "submit.err", "w") as stderr:
        process = subprocess.Popen(args, cwd=REPO, env=cluster.env, stdout=stdout, stderr=stderr)
        try:
            while CHROMIUM and process.poll() is None and time.monotonic() - started < 300:
                try:
                    actors = cluster.api("/api/v0/actors?limit=1000")["data"]["result"]["result"]
                except OSError:  # a slow answer on a busy machine: ask again
                    actors = []
                if any("ImplicitFunc" in a["class_name"] and a["state"] == "ALIVE" for a in actors):
                    trials_seen = True
                    pages = _screenshot_dashboard(cluster, root / "dashboard")
                    break
                time.sleep(1)
            process.wait(timeout=max(1.0, 420 - (time.monotonic() - started)))
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    job = subprocess.CompletedProcess(args, process.returncode, (root / "submit.out").read_text(),
                                      (root / "submit.err").read_text())
    return {"job": job, "root": root, "seconds": time.monotonic() - started, "pages": pages,
            "trials_seen": trials_seen}


def test_the_submitted_search_succeeds_and_writes_its_report(cluster, submitted):
    job, out = submitted["job"], submitted["root"] / "out"
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    jobs = cluster.api("/api/jobs/")
    assert [j["status"] for j in jobs] == ["SUCCEEDED"]
    assert (out / "summary.json").is_file() and (out / "report.html").is_file() and (out / "trials.csv").is_file()
    # At start, the driver said where to watch it and how to sign in.
    assert f"dashboard: http://127.0.0.1:{cluster.dashboard_port} on the cluster's head" in job.stdout
    assert "sign in with the token the cluster was started with" in job.stdout
    assert f"Jobs: this search, {jobs[0]['submission_id']}" in job.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
def test_the_dashboard_shows_the_job_and_its_trials_to_a_signed_in_browser(cluster, submitted):
    """Issue 20, as a user sees it: with the token, the Jobs page lists the submitted search and the Actors
    page its trials (Tune's function trainables, class ImplicitFunc), mid-search; no sign-in dialog."""
    assert submitted["trials_seen"], "no trial actor came up while the job ran"
    (submission_id,) = [j["submission_id"] for j in cluster.api("/api/jobs/")]
    for page, shown in (("jobs", submission_id), ("actors", "ImplicitFunc")):
        png, dom = submitted["pages"][page]
        assert SIGN_IN_DIALOG not in dom and shown in dom, f"{page}: {dom[-3000:]}"
        image = png.read_bytes()
        assert image.startswith(b"\x89PNG") and len(image) > 20_000, (png, len(image))


def test_trials_ran_on_both_worker_nodes(cluster, submitted):
    workers = {n["node_id"] for n in cluster.nodes() if n["resources_total"].get("CPU", 0) > 0}
    assert len(workers) == 2
    trials = pd.read_csv(submitted["root"] / "out" / "trials.csv")
    assert len(trials) == 4
    assert set(trials["node_id"]) == workers  # node IPs are alike on one host; node IDs are not
    summary = json.loads((submitted["root"] / "out" / "summary.json").read_text())
    assert {t["node_id"] for t in summary["trials"]} == workers


def test_the_report_rebuilds_the_same_summary_from_the_shared_storage(submitted, tmp_path):
    summary = json.loads((submitted["root"] / "out" / "summary.json").read_text())
    assert summary["experiment_path"].startswith(str(submitted["root"] / "storage"))
    report = subprocess.run([sys.executable, "-m", "cbs_ray.report", summary["experiment_path"],
                             "--output", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert json.loads((tmp_path / "summary.json").read_text()) == summary


@pytest.mark.parametrize("setting, field, asked", [
    ("resources.workers_per_trial=4", "resources.workers_per_trial", "4 workers × {CPU: 1}, and the nodes hold 2"),
    ("resources.use_gpu=true", "resources.use_gpu", "1 worker × {CPU: 1, GPU: 1}, and no node has a GPU"),
])
def test_resources_no_node_can_hold_end_with_one_line(cluster, setting, field, asked):
    started = time.monotonic()
    run = _run(cluster, [sys.executable, "-m", "cbs_ray.search", "--address", cluster.address,
                         *[arg for s in SEARCH for arg in ("--set", s)], "--set", setting,
                         "--set", f"storage_path={cluster.temp_dir / 'unused'}"], timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert errors == [errors[0]] and errors[0].startswith(f"error: {field}: a trial asks for {asked}")
    assert "{CPU: 0" in errors[0] and "no autoscaler" in errors[0]
    assert time.monotonic() - started < 60


# One trial of two gloo workers (a TorchTrainer, 1 CPU each): one per worker node.
TRAIN = SEARCH + ["search.batch_sizes=[8]", "search.num_trials=1", "resources.workers_per_trial=2",
                  "training.budget_samples=2048"]
WAITING = ("DEPENDENCIES_UNREADY", "PENDING_CREATION", "RESTARTING")


def _asked(required: dict) -> dict:
    """An actor's ``required_resources`` as it asked them: a placement group rewrites ``CPU: 1`` as
    ``CPU_group_<i>_<pg>`` and ``CPU_group_<pg>`` and adds ``bundle_group_…``; those become ``CPU: 1, pg: 1``."""
    asked = {}
    for key, value in sorted(required.items()):
        name, _, group = key.partition("_group_")
        if group and re.fullmatch(r"(\d+_)?[0-9a-f]{20,}", group):
            asked["pg" if name == "bundle" else name] = 1 if name == "bundle" else value
        else:
            asked[key] = value
    return asked


def test_a_cpu_0_head_leaves_no_actor_of_a_train_trial_waiting(cluster, tmp_path):
    """Issue 20, cluster.yaml's ``CPU: 0`` head: which resources each actor of a 2-worker TorchTrainer trial
    asks for (``required_resources``, placement-group names folded back to the resource asked), and where it
    runs. Measured on this cluster (head CPU 0, two 1-CPU workers; "pg": in a placement group's bundle):

    - ``JobSupervisor`` (Ray Jobs; entrypoint_num_cpus 0): nothing; head.
    - ``ImplicitFunc`` (the Tune trial, ``trial_resources``): ``{memory: 1 MB}``, pg; head.
    - ``TrainController``, ``SynchronizationActor`` (Ray Train; num_cpus=0, pinned to the trial's node) and
      Tune's ``_QueueActor``, ``PreemptionWatcher``: nothing, in the trial's pg; head.
    - ``RayTrainWorker`` × 2 (``worker_resources``): ``{CPU: 1}`` each, in the Train run's pg; one per worker node.
    - ``PlacementGroupCleaner`` (``node:__internal_head__``), ``DatasetManager``, ``_AutoscalingCoordinatorActor``:
      nothing; head.

    Every actor on the head asks for no CPU, so none waits for one; each was created within seconds."""
    known = {a["actor_id"] for a in cluster.api("/api/v0/actors?limit=1000")["data"]["result"]["result"]}
    names = {n["node_id"]: "head" if not n["resources_total"].get("CPU") else
             "worker1" if n["resources_total"].get("fake_gpu") else "worker2" for n in cluster.nodes()}
    log = open(tmp_path / "job.log", "w")
    started = time.monotonic()
    job = subprocess.Popen(["ray", "job", "submit", "--address", cluster.dashboard, "--working-dir", ".",
                            "--submission-id", "cbs-train-actors", "--", "python", "-m", "cbs_ray.search",
                            "--address", "auto", *[arg for setting in TRAIN for arg in ("--set", setting)],
                            "--set", f"storage_path={tmp_path / 'storage'}", "--output", str(tmp_path / "out")],
                           cwd=REPO, env=cluster.env, stdout=log, stderr=subprocess.STDOUT)
    actors, waiting_since, waited = {}, {}, {}
    try:
        while job.poll() is None and time.monotonic() - started < 240:
            try:
                seen = cluster.api("/api/v0/actors?limit=1000&detail=true")["data"]["result"]["result"]
            except OSError:  # a slow answer on a busy machine: ask again
                seen = []
            now = time.monotonic()
            for actor in seen:
                if actor["actor_id"] in known:
                    continue
                actors[actor["actor_id"]] = actor
                if actor["state"] in WAITING:
                    waiting_since.setdefault(actor["actor_id"], now)
                    waited[actor["actor_id"]] = now - waiting_since[actor["actor_id"]]
                else:
                    waiting_since.pop(actor["actor_id"], None)
            time.sleep(0.5)
        job.wait(timeout=max(1.0, 240 - (time.monotonic() - started)))
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        log.close()
    seconds = time.monotonic() - started
    rows = sorted(((a["class_name"], a["state"], json.dumps(_asked(a.get("required_resources") or {})),
                    names.get(a["node_id"], a["node_id"]), waited.get(i, 0.0)) for i, a in actors.items()))
    print(f"\nactors of a 2-worker TorchTrainer trial, job {seconds:.0f} s:")
    print(f"{'class':<29} {'state':<6} {'required_resources':<32} {'node':<8} waited")
    for row in rows:
        print(f"{row[0]:<29} {row[1]:<6} {row[2]:<32} {row[3]:<8} {row[4]:.1f} s")

    assert job.returncode == 0, (tmp_path / "job.log").read_text()[-4000:]
    statuses = {j.get("submission_id"): j["status"] for j in cluster.api("/api/jobs/")}
    assert statuses["cbs-train-actors"] == "SUCCEEDED"
    by_class = {}
    for cls, _, resources, node, _ in rows:
        by_class.setdefault(cls, []).append((json.loads(resources), node))
    for cls in ("JobSupervisor", "ImplicitFunc", "TrainController", "RayTrainWorker"):
        assert any(cls in c for c in by_class), (cls, rows)
    workers = [node for c, found in by_class.items() if "RayTrainWorker" in c for _, node in found]
    assert sorted(workers) == ["worker1", "worker2"], rows
    assert all(not resources.get("CPU") for found in by_class.values() for resources, node in found
               if node == "head"), rows
    assert max(waited.values(), default=0.0) < 20, rows
    assert not [row for row in rows if row[1] in WAITING], rows


# Eight milestones per trial and no early stopping, so a driver or a node is killed between a trial's
# first checkpoint and its end.
NODE_LOSS = SEARCH + ["training.budget_samples=16384", "search.early_stopping=false"]


def _reports(storage: Path) -> dict[str, list[dict]]:
    """Each trial's reports so far, from the result.json Tune writes under the experiment."""
    found = {}
    for result in storage.glob("*/*/result.json"):
        lines = [line for line in result.read_text().splitlines() if line.strip()]
        if not lines:  # created, nothing reported yet
            continue
        try:
            found[result.parent.name] = [json.loads(line) for line in lines]
        except json.JSONDecodeError:  # a line being written
            continue
    return found


def _first_checkpointed_mid_run(storage: Path, job: subprocess.Popen, timeout: float = 240) -> Optional[dict]:
    """The first report, polled from the shared storage, of a trial that checkpointed and has not finished."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and job.poll() is None:
        for reports in _reports(storage).values():
            if 2048 <= reports[-1]["samples_seen"] < 16384 and reports[-1].get("checkpoint_dir_name"):
                return reports[-1]
        time.sleep(0.2)
    return None


def test_a_stopped_driver_s_search_finishes_with_a_resume_job(cluster, tmp_path):
    """Issue 20: the job's driver is stopped (``ray job stop``: SIGTERM, then SIGKILL) mid-search; a second
    job with ``--resume <experiment>`` finishes it, every trial once and no milestone reported twice."""
    storage = tmp_path / "storage"
    submit = ["ray", "job", "submit", "--address", cluster.dashboard, "--working-dir", "."]
    log = open(tmp_path / "job1.log", "w")
    job = subprocess.Popen([*submit, "--submission-id", "cbs-driver-loss", "--", "python", "-m", "cbs_ray.search",
                            "--address", "auto", *[arg for setting in NODE_LOSS for arg in ("--set", setting)],
                            "--set", f"storage_path={storage}", "--output", str(tmp_path / "out1")],
                           cwd=REPO, env=cluster.env, stdout=log, stderr=subprocess.STDOUT)
    try:
        assert _first_checkpointed_mid_run(storage, job), f"no trial checkpointed mid-run; see {log.name}"
        stop = _run(cluster, ["ray", "job", "stop", "--address", cluster.dashboard, "cbs-driver-loss"], timeout=60)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        job.wait(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
        log.close()
    assert not (tmp_path / "out1" / "summary.json").exists()
    (experiment,) = [p for p in storage.iterdir() if p.is_dir()]
    resumed = _run(cluster, [*submit, "--", "python", "-m", "cbs_ray.search", "--resume", str(experiment),
                             "--address", "auto", "--output", str(tmp_path / "out2")], timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-2000:]
    statuses = {j.get("submission_id"): j["status"] for j in cluster.api("/api/jobs/")}
    assert statuses["cbs-driver-loss"] == "STOPPED"
    trials = pd.read_csv(tmp_path / "out2" / "trials.csv")
    history = pd.read_csv(tmp_path / "out2" / "history.csv")
    assert len(trials) == 4 and trials["trial_id"].is_unique and set(trials["status"]) == {"completed"}
    assert all(h["samples_seen"].is_unique for _, h in history.groupby("trial_id"))
    assert trials["restarts"].sum() >= 1  # the trials the stopped driver left continued from checkpoints


# Last in the module: it kills a worker node.
def test_a_lost_node_s_trials_restart_from_their_checkpoints_on_the_other(cluster, submitted, tmp_path):
    """Issue 20: a whole worker node dies mid-search (its ``ray start`` process, raylet, agents and
    workers SIGKILLed, as a spot reclaim takes them); its trials continue from their last checkpoints on
    the other node (Tune's ``max_failures``), and the search ends with every trial once."""
    storage, out = tmp_path / "storage", tmp_path / "out"
    log = open(tmp_path / "job.log", "w")
    job = subprocess.Popen(["ray", "job", "submit", "--address", cluster.dashboard, "--working-dir", ".", "--",
                            "python", "-m", "cbs_ray.search", "--address", "auto",
                            *[arg for setting in NODE_LOSS for arg in ("--set", setting)],
                            "--set", f"storage_path={storage}", "--output", str(out)],
                           cwd=REPO, env=cluster.env, stdout=log, stderr=subprocess.STDOUT)
    try:
        report = _first_checkpointed_mid_run(storage, job)
        assert report, f"no trial checkpointed mid-run; see {tmp_path / 'job.log'}"
        victim = report["node_id"]
        nodes = {n["node_id"]: n for n in cluster.nodes()}
        # worker1 carries the fake GPU; its `ray start` is processes[1], worker2's processes[2].
        process = cluster.processes[1 if nodes[victim]["resources_total"].get("fake_gpu") else 2]
        for pid in [process.pid] + [pid for pid, _ in _descendants(process.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:  # a short-lived child that has just exited
                pass
        process.wait()
        killed_at = time.monotonic()
        job.wait(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
        log.close()
    output = (tmp_path / "job.log").read_text()
    assert job.returncode == 0, output[-4000:]
    survivor = ({n["node_id"] for n in cluster.nodes() if n["resources_total"].get("CPU", 0) > 0}) - {victim}
    assert len(survivor) == 1

    trials = pd.read_csv(out / "trials.csv")
    history = pd.read_csv(out / "history.csv")
    # Every trial once, each to the full budget, none failed; no milestone reported twice by any trial.
    assert len(trials) == 4 and trials["trial_id"].is_unique
    assert set(trials["status"]) == {"completed"}
    assert all(h["samples_seen"].is_unique for _, h in history.groupby("trial_id"))
    # The lost node's unfinished trials continued from a checkpoint (resumed_from_samples > 0) on the survivor.
    restarted = trials[trials["restarts"] > 0]
    assert len(restarted) >= 1, trials[["trial_id", "node_id", "restarts"]]
    assert set(restarted["node_id"]) == survivor
    resumed = history[history["trial_id"].isin(restarted["trial_id"]) & (history["resumed_from_samples"] > 0)]
    assert (resumed["node_id"] == next(iter(survivor))).all()
    # The summary has a single-node run's structure, restarts included.
    summary = json.loads((out / "summary.json").read_text())
    single = json.loads((submitted["root"] / "out" / "summary.json").read_text())
    assert summary.keys() == single.keys() and summary["trials"][0].keys() == single["trials"][0].keys()
    assert sum(t["restarts"] for t in summary["trials"]) == int(trials["restarts"].sum())
    print(f"node lost; the search ended {time.monotonic() - killed_at:.0f} s later; restarts per trial: "
          f"{dict(zip(trials['trial_id'], trials['restarts']))}")
