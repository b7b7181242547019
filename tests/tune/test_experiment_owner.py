"""One owner per experiment (issue 47: two ``--resume`` of one experiment at once both trained, the same point
twice, and the second exited 130 "interrupted" though nothing interrupted it). The lock is a real ``flock`` held by
another process; nothing of Ray starts."""

import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cbs_ray.cli import search_main
from cbs_ray.spec.errors import SpecError
from cbs_ray.tune import disk_watch
from cbs_ray.tune.owner import OWNER_LOCK, ExperimentBusy, experiment_owner
from cbs_ray.tune.runner import SearchInterrupted, UnfinishedSearch, check_ended, note_stop_signal, stop_signals

REPO = Path(__file__).resolve().parents[2]
HOLDER = """
import sys, time
from cbs_ray.tune.owner import experiment_owner
with experiment_owner(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def holder():
    """Start a process that holds an experiment folder's owner lock; yields the starter; kills it after."""
    started = []

    def hold(folder: Path) -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True,
                                   env={**os.environ, "PYTHONPATH": str(REPO)})
        started.append(process)
        assert process.stdout.readline().strip() == "held"
        return process

    yield hold
    for process in started:
        process.kill()
        process.wait()


def test_a_second_owner_is_refused_while_the_first_holds_the_experiment(tmp_path, holder):
    holder(tmp_path)
    with pytest.raises(ExperimentBusy, match="another cbs-ray process is running or resuming"):
        with experiment_owner(str(tmp_path)):
            pass


def test_the_lock_dies_with_its_holder(tmp_path, holder):
    process = holder(tmp_path)
    process.send_signal(signal.SIGKILL)  # a crash: no clean-up ran
    process.wait()
    with experiment_owner(str(tmp_path)):  # a resume after the crash is not refused
        assert (tmp_path / OWNER_LOCK).is_file()


def _refused_at_once(experiment: Path, match: str) -> None:
    """Acquiring ``experiment`` raises ``SpecError`` matching ``match`` within 10 s (an alarm cuts a blocking open)."""
    def cut(signum, frame):
        raise TimeoutError("experiment_owner blocked")

    previous = signal.signal(signal.SIGALRM, cut)
    signal.alarm(10)
    try:
        with pytest.raises(SpecError, match=match):
            with experiment_owner(str(experiment)):
                pass
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("swap", ["removed", "symlink", "fifo"])
def test_a_lock_file_swapped_while_held_does_not_let_a_second_owner_in(tmp_path, holder, swap):
    """Issue 58: removing the lock file (or putting a link or a FIFO in its place) while a search ran let a second
    driver lock a new file and start; the folder itself is held, so the second is refused whatever stands there."""
    experiment, victim = tmp_path / "exp", tmp_path / "victim"
    experiment.mkdir()
    victim.write_text("keep")
    holder(experiment)
    (experiment / OWNER_LOCK).unlink()
    if swap == "symlink":
        (experiment / OWNER_LOCK).symlink_to(victim)
    elif swap == "fifo":
        os.mkfifo(experiment / OWNER_LOCK)
    _refused_at_once(experiment, "another cbs-ray process is running or resuming")
    assert victim.read_text() == "keep"
    assert swap != "symlink" or (experiment / OWNER_LOCK).is_symlink()  # the link was left as it was


@pytest.mark.parametrize("plant", ["symlink", "fifo"])
def test_the_owner_lock_is_never_a_planted_link_or_fifo(tmp_path, plant):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "exp").mkdir()
    if plant == "symlink":
        (tmp_path / "exp" / OWNER_LOCK).symlink_to(victim)
    else:
        os.mkfifo(tmp_path / "exp" / OWNER_LOCK)
    _refused_at_once(tmp_path / "exp", "owner lock .* (never follows a link|is not a regular file)")
    assert victim.read_text() == "keep" and os.path.lexists(tmp_path / "exp" / OWNER_LOCK)


def test_a_folder_held_through_a_link_is_held(tmp_path, holder):
    """The lock is on the folder, not on a name: a second driver reaching it through a link is refused."""
    (tmp_path / "exp").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "exp")
    holder(tmp_path / "exp")
    _refused_at_once(tmp_path / "alias", "another cbs-ray process is running or resuming")


def test_a_resume_of_a_held_experiment_exits_2_in_one_line(tmp_path, holder, capsys):
    experiment = tmp_path / "golden-scratch-20260101-000000"  # a stored experiment (tests/golden)
    shutil.copytree(REPO / "tests" / "golden" / "experiments" / experiment.name, experiment)
    holder(experiment)
    assert search_main(["--resume", str(experiment)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another cbs-ray process is running or resuming" in err


@pytest.mark.parametrize("running, saved, expected, signalled, raised", [
    (0, 6, 6, False, None), (0, 6, 6, True, None),  # every trial ended: finished, whatever signal came
    (2, 6, 6, True, SearchInterrupted), (0, 4, 6, True, SearchInterrupted),  # Ctrl-C: interrupted (exit 130)
    (2, 6, 6, False, UnfinishedSearch), (0, 4, 6, False, UnfinishedSearch),  # no signal: never "interrupted"
])
def test_an_unfinished_search_is_called_interrupted_only_after_a_stop_signal(running, saved, expected, signalled,
                                                                           raised):
    if raised is None:
        check_ended("/x", running=running, saved=saved, expected=expected, signalled=signalled)
    else:
        with pytest.raises(raised):
            check_ended("/x", running=running, saved=saved, expected=expected, signalled=signalled)


def test_tunes_stop_warning_is_noted_and_dropped_only_when_the_disk_watch_sent_it(monkeypatch):
    stop_signals.clear()
    record = logging.LogRecord("ray.tune.tune", logging.WARNING, "", 0,
                               "Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray Tune run.", None, None)
    assert note_stop_signal(record) is True and len(stop_signals) == 1  # Ctrl-C: Tune's line stays
    monkeypatch.setitem(disk_watch.stopped_for, "path", "/x")
    assert note_stop_signal(record) is False and len(stop_signals) == 2  # the watch's stop: its own line says why
    other = logging.LogRecord("ray.tune.tune", logging.WARNING, "", 0, "anything else", None, None)
    assert note_stop_signal(other) is True and len(stop_signals) == 2
    stop_signals.clear()
