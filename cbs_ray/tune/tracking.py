"""Experiment trackers (the spec's ``tracking:`` section) through Ray Tune's own logger callbacks.

Ray's ``MLflowLoggerCallback``, ``WandbLoggerCallback`` and ``TBXLoggerCallback`` do the logging; the
subclasses here change only what they are given: each trial's parameters are the ones a user reads
(batch size, alpha, warmup fraction, peak LR, seed) besides Tune's raw config, and every milestone's
metrics are stepped by ``samples_seen`` (equal-sample curves line up across batch sizes) instead of Tune's
iteration count (those subclasses are in ``tune.tracker_callbacks``, which imports the trackers' packages).
The report's files go to one run per search: the MLflow parent run of the trial runs,
a W&B run of job type ``report`` in the trials' group, a TensorBoard text entry.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import urllib.parse
from pathlib import Path

from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.paths import expand_user
from cbs_ray.spec.schema import SearchSpec, TrackingSpec
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.run_plan import RunPlan

__all__ = ["enabled", "check_installed", "check_reachable", "trial_params", "mlflow_uri", "start_mlflow_parent",
           "attach_report"]

# tracker -> (module to import, pip extra)
PACKAGES = {"mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb"), "tensorboard": ("tensorboardX", "tensorboard")}


def enabled(tracking: TrackingSpec) -> list[str]:
    return [name for name, on in (("mlflow", tracking.mlflow is not None), ("tensorboard", tracking.tensorboard),
                                  ("wandb", tracking.wandb is not None)) if on]


def check_installed(tracking: TrackingSpec) -> None:
    """A one-line error for a tracker whose package is missing (called before Ray starts)."""
    for name in enabled(tracking):
        module, extra = PACKAGES[name]
        if importlib.util.find_spec(module) is None:
            raise SpecError(f"tracking.{name}: the {module} package is not installed: "
                            f"pip install \"cbs-ray[{extra}]\"")


MLFLOW_SCHEMES = ("file", "http", "https", "databricks", "databricks-uc", "uc", "sqlite", "postgresql", "mysql",
                  "mssql")
"""The tracking-URI schemes MLflow's stores take (a database's ``dialect+driver://`` by its dialect)."""
CONNECT_TIMEOUT_S = 3.0
"""How long the check waits for an MLflow server to accept a connection (MLflow itself retried for 264 s)."""


def check_reachable(tracking: TrackingSpec) -> None:
    """The MLflow tracking URI can be used, checked before Ray starts: a scheme MLflow knows, a server that
    accepts a connection within ``CONNECT_TIMEOUT_S``, a local store (a directory or a SQLite file's folder)
    that can be written. A one-line ``SpecError`` naming ``tracking.mlflow.tracking_uri`` otherwise."""
    uri = tracking.mlflow.tracking_uri if tracking.mlflow is not None else None
    if not uri:
        return
    key = "tracking.mlflow.tracking_uri"
    scheme = uri.split("://", 1)[0].split("+", 1)[0].lower() if "://" in uri else "file"
    if scheme not in MLFLOW_SCHEMES:
        raise SpecError(f"{key}: {uri!r}: unknown scheme {scheme!r} (MLflow takes {', '.join(MLFLOW_SCHEMES)})")
    parsed = urllib.parse.urlparse(uri)
    if scheme in ("http", "https"):
        port = parsed.port or (443 if scheme == "https" else 80)
        try:
            socket.create_connection((parsed.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as e:
            raise SpecError(f"{key}: no MLflow server answers at {parsed.hostname}:{port} "
                            f"({e.strerror or type(e).__name__})") from None
    elif scheme == "sqlite":
        # sqlite:///relative.db, sqlite:////absolute/path.db: the file's path follows the third slash
        folder = expand_user(uri.split(":///", 1)[-1], key).resolve().parent
        if not (folder.is_dir() and os.access(folder, os.W_OK)):
            raise SpecError(f"{key}: the SQLite database's folder {folder} does not exist or cannot be written")
    elif scheme == "file":
        store = expand_user(parsed.path if "://" in uri else uri, key).resolve()
        existing = next(p for p in (store, *store.parents) if p.exists())
        if not (existing.is_dir() and os.access(existing, os.W_OK)):
            raise SpecError(f"{key}: cannot write the file store {store}")


def trial_params(spec: SearchSpec, budget_samples: int, plan: RunPlan) -> dict:
    """What a trial's run records as parameters: its batch size, alpha, warmup fraction, peak LR and seed, as
    the trial of ``plan`` trains with them."""

    cfg = TrialConfig.for_plan(spec, plan, budget_samples=budget_samples, model_config=None)
    return {"batch_size": cfg.batch_size, "alpha": cfg.alpha, "warmup_fraction": cfg.warmup_fraction,
            "peak_lr": cfg.peak_lr, "seed": cfg.seed}


def mlflow_uri(tracking_uri: str | None) -> str | None:
    """The tracking URI with a relative file store made absolute (a resumed search started elsewhere logs
    to the same place). MLflow 3 keeps the file store in maintenance mode and refuses it unless
    ``MLFLOW_ALLOW_FILE_STORE`` is set; a spec that names one gets it."""
    if tracking_uri is None:
        return None
    from mlflow.utils.file_utils import local_file_uri_to_path
    from mlflow.utils.uri import is_local_uri

    if not is_local_uri(tracking_uri):  # a database, a server, "databricks"
        return tracking_uri
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return expand_user(local_file_uri_to_path(tracking_uri), "tracking.mlflow.tracking_uri").resolve().as_uri()


def start_mlflow_parent(spec: SearchSpec, experiment_path: str) -> str:
    """Create the search's parent run (the trial runs are its children; it gets the report's files) in the
    spec's MLflow experiment; returns its run id."""
    from mlflow.tracking import MlflowClient

    m = spec.tracking.mlflow
    assert m is not None  # called only where the spec turns MLflow on
    client = MlflowClient(tracking_uri=mlflow_uri(m.tracking_uri))
    name = m.experiment_name or spec.name
    experiment = client.get_experiment_by_name(name)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
    run = client.create_run(experiment_id, run_name=Path(experiment_path).name,
                            tags={"cbs_ray.experiment_path": experiment_path, "cbs_ray.role": "search"})
    return run.info.run_id


def attach_report(spec: SearchSpec, experiment_path: str, meta: ExperimentMeta, out: Path, answer: dict,
                  headline: list[str]) -> list[str]:
    """Give each tracker the report: its files (summary.json, report.html/md, the plots) and the answer.
    Returns the lines to print (where to look)."""
    t, lines = spec.tracking, []
    # The report's files, not the folder's lock (report.folder)
    files = sorted(p for p in Path(out).iterdir() if p.is_file() and not p.name.startswith("."))
    scalars = {k: float(v) for k, v in answer.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if t.mlflow is not None and meta.mlflow_parent_run_id:
        from mlflow.tracking import MlflowClient

        uri = mlflow_uri(t.mlflow.tracking_uri)
        client, run_id = MlflowClient(tracking_uri=uri), meta.mlflow_parent_run_id
        for path in files:
            client.log_artifact(run_id, str(path))
        for key, value in scalars.items():
            client.log_metric(run_id, f"answer_{key}", value)
        client.set_tag(run_id, "cbs_ray.answer", "\n".join(headline)[:5000])
        client.set_terminated(run_id)
        lines.append(f"MLflow: the report is in run {run_id} of experiment "
                     f"'{t.mlflow.experiment_name or spec.name}' (mlflow ui --backend-store-uri {uri or '<yours>'})")
    if t.tensorboard and "://" not in experiment_path:
        from tensorboardX import SummaryWriter

        with SummaryWriter(logdir=str(Path(experiment_path) / "report")) as writer:
            writer.add_text("answer", "\n\n".join(headline))
        lines.append(f"TensorBoard: tensorboard --logdir {experiment_path}")
    if t.wandb is not None:
        import wandb

        run = wandb.init(project=t.wandb.project or spec.name, mode=t.wandb.mode, job_type="report",
                         group=Path(experiment_path).name, name=f"{Path(experiment_path).name}-report",
                         dir=experiment_path if "://" not in experiment_path else None, reinit=True)
        run.summary.update({f"answer_{k}": v for k, v in scalars.items()})
        artifact = wandb.Artifact(f"{Path(experiment_path).name}-report", type="cbs-report")
        for path in files:
            artifact.add_file(str(path))
        run.log_artifact(artifact)
        run.finish()
        offline = f" (offline: wandb sync {run.dir.rsplit('/files', 1)[0]})" if t.wandb.mode == "offline" else ""
        lines.append(f"W&B: the report is in run {run.name} of project '{t.wandb.project or spec.name}'{offline}")
    return lines
