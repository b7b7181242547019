"""Issue 40 row 5: a local search starts wherever plain ``ray.init()`` starts: Ray's socket paths under the
private temp dir stay within AF_UNIX's 107 bytes however long TMPDIR is; a Ray that does not start is one line
that says why."""

import os
import tempfile

import pytest

from cbs_ray.spec.errors import SpecError
from cbs_ray.tune.runner import (RAY_SOCKET_TAIL, UNIX_SOCKET_PATH_MAX, RayDidNotStart, private_temp_dir,
                                 ray_start_failure)


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
