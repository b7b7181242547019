"""Every private Ray API the package uses, in one place: what a Ray upgrade breaks first.

cbs-ray requires Ray as a range (``SUPPORTED_RAY`` in ``pyproject.toml``), not one version; the public API covers most
of what it does, and these few reach past it, each for a reason given beside it. ``missing()`` names any that the
installed Ray lacks (``tests/ray_internals/test_ray_internals.py`` fails with that list, so an upgrade that moves one is
seen at once, not as a wrong report), and each accessor raises ``RayInternalsMissing`` with the same one line where it
is used.

Ray itself is imported inside the functions: this module is imported by the maths-free layers, whose
command lines answer ``--help`` before Ray loads.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os

__all__ = [
    "REQUIRED",
    "SUPPORTED_RAY",
    "RayInternalsMissing",
    "autoscaling_status",
    "cluster_node_groups",
    "dashboard_url",
    "missing",
    "per_report_logger_modules",
    "poll_train_workers_every",
    "quiet_token_notice",
    "single_machine",
    "started_this_node",
    "stop_paused_trial",
    "token_auth_enabled",
    "trial_storage",
]

SUPPORTED_RAY = ">=2.59,<2.61"
"""The Ray versions the package is tested with (``pyproject.toml`` says the same; a test checks)."""

REQUIRED: dict[str, tuple[str, str | None]] = {
    # (module, attribute): why the package needs it
    "token auth": ("ray._private.authentication.authentication_utils", "is_token_auth_enabled"),
    # whether the dashboard asks for the token: the search says how to sign in (Ray has no public call)
    "dashboard URL": ("ray._private.worker", "get_dashboard_url"),
    # where the dashboard is when ray.init's context is not at hand (a driver joining a cluster)
    "the local node": ("ray._private.worker", "_global_node"),
    # whether this process started the Ray it talks to (a head): the dashboard hint differs
    "cluster config": ("ray._private.state", "state"),
    # KubeRay's and the launcher's node groups (min/max counts) in the GCS: does the cluster autoscale
    "autoscaler status key": ("ray._private.ray_constants", "DEBUG_AUTOSCALING_STATUS"),
    # autoscaler v1's status report (node types) in the GCS's internal KV
    "internal KV": ("ray.experimental.internal_kv", "_internal_kv_get"),
    "single-machine switch": ("ray._private.ray_constants", "ENABLE_RAY_CLUSTERS_ENV_VAR"),
    # Ray's own switch for one-machine Ray (its default on macOS and Windows): the node's IP is 127.0.0.1, so
    # the GCS, the raylet, the workers, the agents and the metrics endpoints all bind loopback
    "token notice logger": ("ray._private.authentication.authentication_token_setup", "logger"),
    # its WARNING that a local Ray turned token auth on, which the search's own dashboard line already says
    "Train V2 storage logger": ("ray.train.v2._internal.execution.storage", None),
    "Train V2 report logger": ("ray.train.v2._internal.execution.context", None),
    # their per-report INFO lines ("Checkpoint successfully created at ...", "Reporting training result N: ...";
    # the second logger is named by its file's path) are raised to WARNING
    "Train V2 poll interval": ("ray.train.v2._internal.constants", "HEALTH_CHECK_INTERVAL_S_ENV_VAR"),
    # the variable naming how often a Train run's controller polls its workers, which Train passes from the process
    # that calls fit() to the controller and its workers (poll_train_workers_every)
    "Tune's controller": ("ray.tune.execution.tune_controller", "TuneController"),
    # its _mark_trial_to_checkpoint, behind the wrapper Tune hands a scheduler: a paused trial a scheduler stops
    # is recorded stopped in the experiment's saved state (stop_paused_trial)
}


class RayInternalsMissing(RuntimeError):
    """The installed Ray lacks a private API this package uses (an upgrade moved it)."""


def _lookup(what: str):
    module_name, attribute = REQUIRED[what]
    try:
        module = importlib.import_module(module_name)
        return module if attribute is None else getattr(module, attribute)
    except (ImportError, AttributeError):
        import ray

        raise RayInternalsMissing(
            f"Ray {ray.__version__} has no {module_name}{'.' + attribute if attribute else ''} ({what}); cbs-ray is "
            f"tested with ray{SUPPORTED_RAY}: install a Ray in that range") from None


def missing() -> list[str]:
    """``module.attribute (what)`` of each private API the installed Ray lacks; [] when all are there."""
    gone = []
    for what, (module_name, attribute) in REQUIRED.items():
        try:
            _lookup(what)
        except RayInternalsMissing:
            gone.append(f"{module_name}{'.' + attribute if attribute else ''} ({what})")
    return gone


def token_auth_enabled() -> bool:
    return bool(_lookup("token auth")())


def dashboard_url() -> str:
    """The dashboard's URL as Ray knows it ("" when it has none)."""
    return _lookup("dashboard URL")() or ""


def started_this_node() -> bool:
    """Whether this process started the Ray node it is connected to (``ray.init()`` with no address)."""
    return bool(getattr(_lookup("the local node"), "head", False))


def cluster_node_groups() -> list[tuple[int, int]]:
    """(min, max) node counts of each node group in the cluster config the GCS holds ([] without one)."""
    config = _lookup("cluster config").get_cluster_config()
    return [(g.min_count, g.max_count) for g in config.node_group_configs] if config else []


def autoscaling_status() -> bytes | None:
    """Autoscaler v1's status report, as the GCS's internal KV holds it (None before its first)."""
    return _lookup("internal KV")(_lookup("autoscaler status key"))


def stop_paused_trial(tune_controller, trial) -> None:
    """Stop a paused trial from a scheduler (``tune_controller``: what Tune hands a scheduler) and have the
    experiment's next saved state say so. Tune 2.60's ``stop_trial`` of a trial without an actor (a paused one)
    sets it TERMINATED but never marks it for the experiment checkpoint, so the saved state keeps it PAUSED and a
    finished search reads as interrupted (``tune.runner``); Ray's own ``HyperBandScheduler`` stops paused trials
    the same way."""
    tune_controller.stop_trial(trial)
    controller = getattr(tune_controller, "_tune_controller", tune_controller)  # TrialRunnerWrapper's
    mark = getattr(controller, "_mark_trial_to_checkpoint", None)
    if mark is None:
        _lookup("Tune's controller")  # raises if the module moved
        import ray

        raise RayInternalsMissing(f"Ray {ray.__version__}'s TuneController has no _mark_trial_to_checkpoint (Tune's "
                                  f"controller); cbs-ray is tested with ray{SUPPORTED_RAY}: install a Ray in that "
                                  "range")
    mark(trial)


def trial_storage(trial) -> tuple:
    """(pyarrow filesystem, the trial's directory on it) of a Tune trial (``Trial.storage``, undocumented)."""
    storage = trial.storage
    return storage.storage_filesystem, storage.trial_fs_path


@contextlib.contextmanager
def single_machine():
    """While Ray starts inside this block, it starts as a one-machine Ray: its node's IP is 127.0.0.1 and every
    server it opens binds loopback (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which the processes it starts
    inherit, and the constant this process read at import). Both are restored on leaving; the running Ray
    keeps its address."""
    _lookup("single-machine switch")
    constants = importlib.import_module("ray._private.ray_constants")
    name, before = constants.ENABLE_RAY_CLUSTERS_ENV_VAR, constants.ENABLE_RAY_CLUSTER
    env_before = os.environ.get(name)
    # setattr: a module's attributes are set by name (ModuleType declares no assignable ones)
    os.environ[name] = "0"
    setattr(constants, "ENABLE_RAY_CLUSTER", False)
    try:
        yield
    finally:
        setattr(constants, "ENABLE_RAY_CLUSTER", before)
        if env_before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = env_before


@contextlib.contextmanager
def quiet_token_notice():
    """Ray's WARNING that a local cluster turned token authentication on, off inside the block (the search's
    own dashboard line says how to sign in); its level as it was afterwards."""
    logger = _lookup("token notice logger")
    before = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(before)


def per_report_logger_modules() -> list[str]:
    """The names of Train's loggers that write a console line for every report of every rank."""
    return ["ray.train._internal.storage", _lookup("Train V2 storage logger").__name__,
            _lookup("Train V2 report logger").__file__]


def poll_train_workers_every(seconds: float) -> None:
    """Have the Ray Train runs this process starts poll their workers every ``seconds`` (unless this process's
    environment says otherwise already). Train V2's controller polls its workers every 2 s by default, and a worker's
    report waits in a queue of one until a poll takes it: a trial reporting more often than that waited at each report
    (a 2-worker trial's 8 reports in 13 s, of which 3.5 s training), and every run's end was seen up to 2 s late.
    The poll's own wait for a busy worker is the same interval; a worker is only declared lost after Train's separate
    timeout (10 minutes), so a shorter interval loses none."""
    os.environ.setdefault(_lookup("Train V2 poll interval"), f"{seconds:g}")
