"""Issue 40 row 5: a local search starts wherever plain ``ray.init()`` starts: Ray's socket paths under the
private temp dir stay within AF_UNIX's 107 bytes however long TMPDIR is; a Ray that does not start is one line
that says why."""

import os
import tempfile

import pytest

from cbs_ray.spec.errors import SpecError
from cbs_ray.tune.ray_temp import (
    MKDTEMP_NAME,
    RAY_SOCKET_NAMES,
    RAY_SOCKET_TAIL,
    UNIX_SOCKET_PATH_MAX,
    fits_ray_sockets,
    private_temp_dir,
)
from cbs_ray.tune.runner import RayDidNotStart, ray_start_failure


@pytest.mark.parametrize("length", [5, 24, 38, 60, 120])
def test_ray_sockets_fit_under_the_private_temp_dir(length, tmp_path, monkeypatch):
    long_tmp = tmp_path / ("t" * length)
    long_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(long_tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    path = private_temp_dir()
    assert len(f"{path}/ray{RAY_SOCKET_TAIL}".encode()) <= UNIX_SOCKET_PATH_MAX
    assert os.stat(path).st_mode & 0o077 == 0


@pytest.mark.parametrize("error, says", [
    (Exception(""), "Ray did not start: Exception with no message"),
    (ConnectionError("Could not find any running Ray instance.\nmore"), "Could not find any running Ray instance."),
])
def test_a_ray_that_does_not_start_is_one_line(error, says):
    message = ray_start_failure(error, None)
    assert says in message and len(message.splitlines()) == 1
    assert issubclass(RayDidNotStart, SpecError)  # the command line's exit 2, one line


def test_tunes_restore_advice_is_dropped_while_a_search_runs(caplog):
    # Issue 40 row 13: Ctrl-C printed Tune's "Resume experiment with: Tuner.restore(...)" over cbs-ray's own hint.
    import logging

    from cbs_ray.tune.runner import quiet_tune

    tune_logger = logging.getLogger("ray.tune.tune")
    with caplog.at_level(logging.WARNING, logger="ray.tune.tune"):
        for verbose in (False, True):
            with quiet_tune(verbose):
                tune_logger.warning("Experiment has been interrupted, but the most recent state was saved.\\n"
                                    "Resume experiment with: Tuner.restore(path='/x', trainable=...)")
                tune_logger.warning("another warning")
    assert [r.getMessage() for r in caplog.records] == ["another warning", "another warning"]


def test_a_trials_traceback_is_left_to_its_error_file_without_verbose(caplog):
    import logging

    from cbs_ray.tune.runner import quiet_tune

    controller = logging.getLogger("ray.tune.execution.tune_controller")
    with caplog.at_level(logging.WARNING, logger="ray.tune.execution.tune_controller"):
        for verbose in (False, True):
            with quiet_tune(verbose):
                controller.error("Trial task failed for trial B16_x", exc_info=RuntimeError("boom"))
    assert len(caplog.records) == 1  # only with verbose


# ---- issue 47 rows 6 and 7: the longest socket Ray makes, the fallback's real name ---------------------------

def test_the_longest_socket_is_the_dashboards_task_events_head():
    """By hand: ``/`` + 42 (the session folder: ``session_`` 8, date 10, ``_`` 1, time 8, ``_`` 1, microseconds
    6, ``_`` 1, pid 7) + ``/sockets/`` 9 + ``dash_TaskEventsHead`` 19 = 71; ``plasma_store`` (12) gave 64."""
    assert max(RAY_SOCKET_NAMES, key=len) == "dash_TaskEventsHead"
    assert len(RAY_SOCKET_TAIL) == 71
    assert len(MKDTEMP_NAME) == 16  # cbs-ray- and 8 random characters: 7 more than cbs-ray-0


@pytest.mark.parametrize("private_dir, fits", [
    ("/" + "t" * 27 + "/cbs-ray-0", False),  # 28 + 10 + 4 (/ray) + 71 = 113: the 29-character TMPDIR failed
    ("/" + "t" * 21 + "/cbs-ray-0", True),  # 22 + 10 + 4 + 71 = 107: the limit itself
    ("/" + "t" * 22 + "/cbs-ray-0", False),  # 108
    ("/" + "t" * 14 + "/" + MKDTEMP_NAME, True),  # 15 + 17 + 4 + 71 = 107: the fallback's own length counts
    ("/" + "t" * 15 + "/" + MKDTEMP_NAME, False),  # 108: "AF_UNIX path length cannot exceed 107 bytes"
])
def test_the_socket_check_counts_the_longest_path_ray_makes(private_dir, fits):
    assert fits_ray_sockets(private_dir) is fits


def test_the_fallback_under_a_temp_dir_where_cbs_ray_uid_is_unusable_still_fits(tmp_path, monkeypatch):
    """A TMPDIR whose ``cbs-ray-<uid>`` is a file (unusable): the ``mkdtemp`` fallback's longer name must fit too,
    else the folder goes under /tmp."""
    root = tmp_path / "r"
    root.mkdir()
    (root / f"cbs-ray-{os.getuid()}").write_text("not a folder")
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", None)
    path = private_temp_dir()
    assert len(f"{path}/ray{RAY_SOCKET_TAIL}".encode()) <= UNIX_SOCKET_PATH_MAX


def test_the_socket_names_are_every_one_the_installed_ray_makes():
    """Every ``SubprocessModule`` of the installed Ray's dashboard makes ``dash_<class name>``: none is missing
    from ``RAY_SOCKET_NAMES`` (an upgrade of Ray that adds a longer one fails here, not at a user's start)."""
    import re
    from pathlib import Path

    import ray

    root = Path(ray.__file__).parent
    names = set()
    for source in (root / "dashboard").rglob("*.py"):
        names |= {f"dash_{m}" for m in re.findall(r"^class (\w+)\([^)]*SubprocessModule[^)]*\)", source.read_text(),
                                                 re.M)}
    assert names and names <= set(RAY_SOCKET_NAMES)
