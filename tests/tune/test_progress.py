"""The progress display: the board's counts, samples, ETA and bests on hand-built trial events (known
answers beside them), and what the Tune callback prints where the output is not a terminal."""

import io
from types import SimpleNamespace

import pytest

from cbs_ray.tune.progress import ProgressBoard, SearchProgress


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def board(**kw):
    clock = Clock()
    return ProgressBoard(planned_trials=4, default_span=1000, metric="accuracy", mode="max", clock=clock,
                         **kw), clock


def test_counts_follow_each_trials_end():
    b, _ = board()
    for tid, batch in (("a", 16), ("b", 32), ("c", 64)):
        b.started(tid, batch, 0, 1000)
    b.reported("a", 1000, 0.9)
    b.reported("b", 250, 0.5)
    b.reported("c", 500, float("nan"), diverged=True)
    assert b.ended("a") == "done"
    assert b.ended("b") == "stopped early"
    assert b.ended("c") == "diverged"
    assert b.counts() == {"running": 0, "paused": 0, "done": 1, "stopped early": 1, "diverged": 1, "failed": 0}
    b.started("d", 128, 0, 1000)
    assert b.ended("d", failed=True) == "failed"
    assert b.trials_line() == "trials 4/4 ended: 1 done, 0 running, 1 stopped early, 1 diverged, 1 failed"


def test_planned_samples_shrink_when_a_trial_stops_early_and_count_trials_not_started():
    b, _ = board()
    b.started("a", 16, 0, 1000)
    b.started("b", 32, 0, 1000)
    assert b.planned_samples() == 4000  # two running (1000 each), two not started (default span 1000 each)
    b.reported("b", 250, 0.5)
    b.ended("b")  # stopped early at 250: the plan loses 750
    assert b.planned_samples() == 3250
    assert b.trained_samples() == 250


def test_a_branch_counts_only_its_window():
    b, _ = board()
    b.started("br", 64, 4096, 4096 + 512)
    b.reported("br", 4096 + 256, 0.7)
    assert b.trained_samples() == 256
    b.reported("br", 4096 + 512, 0.8)
    assert b.ended("br") == "done" and b.trained_samples() == 512


def test_eta_is_the_rate_so_far_applied_to_what_is_left():
    b, clock = board()
    assert b.eta_s() is None
    b.started("a", 16, 0, 1000)
    clock.now += 30
    b.reported("a", 500, 0.8)  # 500 of 4000 planned in 30 s: 3500 left at 500 per 30 s
    assert b.elapsed_s() == 30
    assert b.eta_s() == pytest.approx(210)
    assert b.time_line() == "samples 500 of 4k planned · elapsed 0:30 · ETA 3:30"


def test_best_per_batch_takes_the_best_report_of_any_trial_and_ignores_diverged_ones():
    b, _ = board()
    b.started("a", 32, 0, 1000)
    b.started("b", 32, 0, 1000)
    b.started("c", 16, 0, 1000)
    b.started("d", 64, 0, 1000)
    b.reported("a", 500, 0.81)
    b.reported("a", 1000, 0.79)
    b.reported("b", 500, 0.85)
    b.reported("c", 500, 0.6)
    b.reported("d", 500, 0.99, diverged=True)
    assert b.best_per_batch() == {16: 0.6, 32: 0.85, 64: None}
    assert b.best_line() == "best accuracy per batch: 16 0.6 · 32 0.85 · 64 –"


def test_min_mode_keeps_the_lowest():
    b = ProgressBoard(planned_trials=1, default_span=10, metric="eval_loss", mode="min")
    b.started("a", 8, 0, 10)
    b.reported("a", 5, 2.0)
    b.reported("a", 10, 1.5)
    b.reported("a", 10, 1.7)
    assert b.best_per_batch() == {8: 1.5}


def _trial(tid, batch):
    return SimpleNamespace(trial_id=tid, config={"log2_batch": batch.bit_length() - 1})


def test_not_a_terminal_one_plain_line_per_finished_trial_and_nothing_else():
    out = io.StringIO()
    b, clock = board()
    progress = SearchProgress(b, lambda config: (2 ** config["log2_batch"], 0, 1000), stream=out)
    a, c = _trial("a", 16), _trial("c", 64)
    progress.on_trial_start(0, [], a)
    progress.on_trial_result(0, [], a, {"samples_seen": 500, "accuracy": 0.7})
    clock.now += 10
    progress.on_trial_result(0, [], a, {"samples_seen": 1000, "accuracy": 0.9})
    progress.on_trial_complete(0, [], a)
    progress.on_trial_result(0, [], c, {"samples_seen": 250, "accuracy": 0.4})  # a result before its start event
    progress.on_trial_error(0, [], c)
    progress.on_experiment_end([])
    lines = out.getvalue().splitlines()
    assert lines == [
        "[0:10] trial B=16 done: accuracy 0.9 at 1000 samples · 1/4 ended, 0 running · ETA 0:30",  # 3000 left at 100/s
        "[0:10] trial B=64 failed: accuracy 0.4 at 250 samples · 2/4 ended, 0 running · ETA 0:16",  # 2000 left at 125/s
    ]


def test_the_callback_pickles_without_its_display():
    import pickle

    out = io.StringIO()
    b, _ = board()
    progress = SearchProgress(b, lambda config: (16, 0, 1000), stream=out, live=True)
    progress.on_trial_start(0, [], _trial("a", 16))
    assert progress._bars is not None  # the live block was drawn
    progress.span_of = None  # a lambda does not pickle; Tune's callbacks here are built from module functions
    copy = pickle.loads(pickle.dumps(progress))
    assert copy._bars is None and copy.board.trials.keys() == {"a"}
    progress.on_experiment_end([])
    assert "trials 0/4 ended" in out.getvalue() and "best accuracy per batch" in out.getvalue()


# ---- issue 40 rows 11 and 17: a resumed search counts what had ended; a failed trial's line says why --------

def test_after_resume_the_trials_that_had_ended_are_counted_and_not_in_the_rate():
    out = io.StringIO()
    b, clock = board()
    progress = SearchProgress(b, lambda config: (2 ** config["log2_batch"], 0, 1000), stream=out)
    restored = [SimpleNamespace(trial_id=tid, config={"log2_batch": 4}, status=status,
                                last_result={"samples_seen": samples, "accuracy": acc})
                for tid, status, samples, acc in (("a", "TERMINATED", 1000, 0.9), ("b", "TERMINATED", 250, 0.5),
                                                  ("c", "ERROR", 500, 0.4), ("d", "PENDING", 0, None))]
    progress.on_step_begin(0, restored)
    progress.on_step_begin(1, restored)  # once each
    assert b.counts() == {"running": 0, "paused": 0, "done": 1, "stopped early": 1, "diverged": 0, "failed": 1}
    assert b.trials_line().startswith("trials 3/4 ended")
    assert b.trained_samples() == 1750 and b.best_per_batch() == {16: 0.9}
    assert b.eta_s() is None  # nothing trained by this driver yet: no rate
    d = _trial("d", 16)
    progress.on_trial_start(0, [], d)
    clock.now += 10
    progress.on_trial_result(0, [], d, {"samples_seen": 500, "accuracy": 0.8})  # 500 in 10 s, 500 left
    assert b.eta_s() == pytest.approx(10)


def test_a_failed_trials_line_carries_its_reason():
    b, _ = board()
    b.started("a", 16, 0, 1000)
    b.reported("a", 250, 0.4)
    b.ended("a", failed=True, reason="RuntimeError: CUDA out of memory")
    assert b.event_line("a").startswith("[0:00] trial B=16 failed: accuracy 0.4 at 250 samples "
                                        "(RuntimeError: CUDA out of memory) · ")


def test_a_callback_restored_by_resume_rebuilds_its_board_from_the_restored_trials():
    import pickle

    b, _ = board()
    progress = SearchProgress(b, None, stream=io.StringIO())
    b.started("a", 16, 0, 1000)
    copy = pickle.loads(pickle.dumps(progress))  # the snapshot Tune pickled: "a" still running in it
    copy.span_of = lambda config: (16, 0, 1000)
    copy.on_step_begin(0, [SimpleNamespace(trial_id="a", config={}, status="TERMINATED",
                                           last_result={"samples_seen": 1000, "accuracy": 0.9})])
    assert copy.board.counts()["done"] == 1 and copy.board.samples_before == 1000


# ---- issue 38: a paused loser the halving stops can be ended twice by Tune (its line said twice) --------------

def test_a_trial_ended_twice_at_the_same_samples_is_said_once_and_a_restart_that_trains_more_again():
    out = io.StringIO()
    b, _ = board()
    progress = SearchProgress(b, lambda config: (2 ** config["log2_batch"], 0, 1000), stream=out)
    a = _trial("a", 128)
    progress.on_trial_start(0, [], a)
    progress.on_trial_result(0, [], a, {"samples_seen": 250, "accuracy": 0.491})
    progress.on_trial_complete(0, [], a)
    progress.on_trial_start(0, [], a)  # Tune's second end of the loser, with or without a start before it
    progress.on_trial_complete(0, [], a)
    progress.on_trial_complete(0, [], a)
    assert [line.split(" · ")[0] for line in out.getvalue().splitlines()] == [
        "[0:00] trial B=128 stopped early: accuracy 0.491 at 250 samples"]
    assert b.counts()["stopped early"] == 1 and b.counts()["running"] == 0
    progress.on_trial_start(0, [], a)  # a real restart that trains on is news when it ends
    progress.on_trial_result(0, [], a, {"samples_seen": 1000, "accuracy": 0.9})
    progress.on_trial_complete(0, [], a)
    assert out.getvalue().splitlines()[-1].startswith("[0:00] trial B=128 done: accuracy 0.9 at 1000 samples")
    assert len(out.getvalue().splitlines()) == 2


# ---- issue 47: a run that trained the full budget D is done, even where its plan went further -----------------

def test_a_run_that_reached_the_budget_is_done_though_its_plan_went_on():
    # A validated ladder: D = 8192 samples, every run's plan goes to ladder.cap x D = 32768; its stopper ends the
    # smallest batch (B=8) at D. That run trained the full budget: "done", never "stopped early".
    b = ProgressBoard(planned_trials=3, default_span=8192, metric="eval_loss", mode="min")
    for tid, batch in (("b8", 8), ("b64", 64), ("short", 16)):
        b.started(tid, batch, 0, 4 * 8192)
    b.reported("b8", 8192, 2.1)
    b.reported("b64", 12288, 2.0)  # beyond D, short of its cap: it trained the full budget too
    b.reported("short", 4096, 2.5)  # ended before D: this one was stopped early
    assert [b.ended(t) for t in ("b8", "b64", "short")] == ["done", "done", "stopped early"]
    assert b.counts() == {"running": 0, "paused": 0, "done": 2, "stopped early": 1, "diverged": 0, "failed": 0}


def test_the_plain_line_of_a_run_stopped_at_the_budget_says_done():
    out = io.StringIO()
    b = ProgressBoard(planned_trials=2, default_span=8192, metric="eval_loss", mode="min", clock=Clock())
    progress = SearchProgress(b, lambda config: (2 ** config["log2_batch"], 0, 4 * 8192), stream=out)
    run = _trial("a", 8)
    progress.on_trial_start(0, [], run)
    progress.on_trial_result(0, [], run, {"samples_seen": 8192, "eval_loss": 2.1})
    progress.on_trial_complete(0, [], run)
    assert "trial B=8 done: eval_loss 2.1 at 8192 samples · 1/2 ended" in out.getvalue()
    assert "stopped early" not in out.getvalue()


# ---- issue 47: the running count is the trials that run, from Tune's states: a paused one is not running ------

def _tune_trial(tid, batch, status):
    return SimpleNamespace(trial_id=tid, config={"log2_batch": batch.bit_length() - 1}, status=status,
                           last_result={})


def test_trials_tune_holds_paused_are_counted_apart_from_the_running_ones():
    # A synchronous halving at B=16: three candidates started; two wait paused at the rung, one still trains.
    out = io.StringIO()
    b, _ = board()
    progress = SearchProgress(b, lambda config: (2 ** config["log2_batch"], 0, 1000), stream=out)
    a, p1, p2 = _tune_trial("a", 16, "RUNNING"), _tune_trial("p1", 16, "RUNNING"), _tune_trial("p2", 16, "RUNNING")
    for t in (a, p1, p2):
        progress.on_trial_start(0, [a, p1, p2], t)
        progress.on_trial_result(0, [a, p1, p2], t, {"samples_seen": 250, "accuracy": 0.5})
    p1.status = p2.status = "PAUSED"
    progress.on_step_begin(1, [a, p1, p2])
    assert b.counts()["running"] == 1 and b.counts()["paused"] == 2
    assert b.trials_line() == "trials 0/4 ended: 0 done, 1 running, 2 paused, 0 stopped early, 0 diverged, 0 failed"
    p2.status = "PENDING"  # the halving lets p2 go on: Tune starts it again
    progress.on_step_begin(2, [a, p1, p2])
    progress.on_trial_start(2, [a, p1, p2], p2)
    progress.on_trial_complete(2, [a, p1, p2], p1)  # the loser, stopped where it waited
    last = out.getvalue().splitlines()[-1]
    assert "trial B=16 stopped early: accuracy 0.5 at 250 samples · 1/4 ended, 2 running ·" in last  # a and p2


def test_two_running_trials_count_as_two_until_one_ends():
    # Two trials run side by side and end together: the first one's line still counts the other as running,
    # the second's counts none; while both run the block says 2.
    b, _ = board()
    progress = SearchProgress(b, lambda config: (2 ** config["log2_batch"], 0, 1000), stream=io.StringIO())
    x, y = _tune_trial("x", 8, "RUNNING"), _tune_trial("y", 8, "RUNNING")
    for t in (x, y):
        progress.on_trial_start(0, [x, y], t)
    progress.on_step_begin(1, [x, y])
    assert b.counts()["running"] == 2
    for t in (x, y):
        progress.on_trial_result(1, [x, y], t, {"samples_seen": 1000, "accuracy": 0.9})
    progress.on_trial_complete(1, [x, y], x)
    assert b.counts()["running"] == 1
    progress.on_trial_complete(1, [x, y], y)
    assert b.counts()["running"] == 0 and b.counts()["done"] == 2
