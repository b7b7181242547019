"""PerBatchASHA routes each trial to its own batch size's ASHA bracket (no cluster: plain objects)."""

from types import SimpleNamespace

from ray.tune.schedulers import TrialScheduler

from cbs_ray.methods.scratch.per_batch_asha import PerBatchASHA
from cbs_ray.records.trial_point import batch_of


def trial(trial_id, log2_batch):
    return SimpleNamespace(trial_id=trial_id, config={"log2_batch": log2_batch})


def scheduler():
    return PerBatchASHA(batch_of, time_attr="samples_seen", max_t=8192, grace_period=2048,
                        reduction_factor=2, metric="accuracy", mode="max")


def result(samples, acc):
    return {"samples_seen": samples, "accuracy": acc}


def test_large_batch_is_not_stopped_by_a_better_small_batch():
    s = scheduler()
    small, large = trial("a", 3), trial("b", 7)
    s.on_trial_add(None, small)
    s.on_trial_add(None, large)
    assert s.on_trial_result(None, small, result(2048, 0.80)) == TrialScheduler.CONTINUE
    # Plain ASHA would stop this (0.60 < 0.80 at the same rung); here B=128 is compared only with B=128.
    assert s.on_trial_result(None, large, result(2048, 0.60)) == TrialScheduler.CONTINUE


def test_worse_trial_of_the_same_batch_is_stopped_at_the_rung():
    s = scheduler()
    first, second, third = trial("a", 4), trial("b", 4), trial("c", 4)
    for t in (first, second, third):
        s.on_trial_add(None, t)
    assert s.on_trial_result(None, first, result(2048, 0.70)) == TrialScheduler.CONTINUE
    assert s.on_trial_result(None, second, result(2048, 0.65)) == TrialScheduler.STOP
    assert s.on_trial_result(None, third, result(2048, 0.75)) == TrialScheduler.CONTINUE
    # Results between rungs are never judged.
    assert s.on_trial_result(None, third, result(3072, 0.10)) == TrialScheduler.CONTINUE


def test_the_first_trial_of_a_batch_size_runs_to_the_budget_even_behind_a_concurrent_one():
    """ASHA alone exempts only the first trial to reach a rung. Here the seeded trial (the first added
    for B=16) reaches the 2048 rung after a concurrent B=16 trial set it at 0.80: plain ASHA stops it
    (0.50 < 0.80), PerBatchASHA lets it go on; its result still counts at the rung, so a third trial at
    0.60 is stopped (cutoff: the median of 0.80 and 0.50 is 0.65)."""
    s = scheduler()
    seeded, concurrent, third = trial("seed", 4), trial("b", 4), trial("c", 4)
    for t in (seeded, concurrent, third):
        s.on_trial_add(None, t)
    assert s.on_trial_result(None, concurrent, result(2048, 0.80)) == TrialScheduler.CONTINUE
    assert s.on_trial_result(None, seeded, result(2048, 0.50)) == TrialScheduler.CONTINUE
    assert s.on_trial_result(None, third, result(2048, 0.60)) == TrialScheduler.STOP
    assert s.on_trial_result(None, seeded, result(4096, 0.10)) == TrialScheduler.CONTINUE
    assert s.on_trial_result(None, seeded, result(8192, 0.10)) == TrialScheduler.STOP  # the budget: done


def test_budget_reached_stops_and_completion_and_removal_are_routed():
    s = scheduler()
    t = trial("a", 5)
    s.on_trial_add(None, t)
    assert s.on_trial_result(None, t, result(8192, 0.9)) == TrialScheduler.STOP
    s.on_trial_complete(None, t, result(8192, 0.9))
    s.on_trial_remove(None, t)  # already gone: no error
    assert "B=32" in s.debug_string()


def test_trials_restored_by_resume_refill_the_rungs_from_their_persisted_results(tmp_path):
    """Tune's restore gives the scheduler nothing back: the restored trials' result.json files do. Two
    finished B=16 trials reached 0.6 and 0.9 at the first rung (2048 samples): its cutoff is their
    median, 0.75, so a new B=16 trial at 0.5 stops there; B=32 has no results and its trial goes on."""
    import json

    import pyarrow.fs

    def restored(trial_id, log2_batch, status, results):
        directory = tmp_path / trial_id
        directory.mkdir()
        (directory / "result.json").write_text("".join(json.dumps(r) + "\n" for r in results))
        storage = SimpleNamespace(storage_filesystem=pyarrow.fs.LocalFileSystem(), trial_fs_path=str(directory))
        return SimpleNamespace(trial_id=trial_id, config={"log2_batch": log2_batch}, status=status,
                               storage=storage, has_reported_at_least_once=True)

    s = scheduler()
    s.on_trial_add(None, restored("a", 4, "TERMINATED", [result(2048, 0.6), result(4096, 0.7), result(8192, 0.8)]))
    s.on_trial_add(None, restored("b", 4, "TERMINATED", [result(2048, 0.9)]))
    unfinished = restored("u", 4, "PENDING", [result(2048, 0.95)])  # resumes from its checkpoint
    s.on_trial_add(None, unfinished)
    new, other = trial("c", 4), trial("d", 5)
    s.on_trial_add(None, new)
    s.on_trial_add(None, other)
    assert s.on_trial_result(None, new, result(2048, 0.5)) == TrialScheduler.STOP
    assert s.on_trial_result(None, other, result(2048, 0.5)) == TrialScheduler.CONTINUE
    # The resumed trial is judged at the next rung against what "a" had there (0.7).
    assert s.on_trial_result(None, unfinished, result(4096, 0.65)) == TrialScheduler.STOP


def test_the_halving_batch_pauses_its_candidates_at_the_rung_then_stops_the_losers_and_resumes_the_prior():
    """The bisect strategy's alpha batch (B=16, 3 candidates, margin 0.02): each pauses at the first rung (2048)
    until all three have reported; then the paused losers are stopped through the controller, the prior is the
    paused trial chosen to run next, and the last reporter stops itself. A loser whose pause Tune had queued but
    not begun (still running at the decision) is stopped once paused. Another batch keeps its ASHA."""
    class Controller:
        def __init__(self, trials):
            self.trials, self.stopped, self.marked = trials, [], []

        def get_trials(self):
            return self.trials

        def stop_trial(self, t):
            self.stopped.append(t.trial_id)
            t.status = "TERMINATED"
            s.on_trial_remove(self, t)

        def _mark_trial_to_checkpoint(self, t):  # Tune's, so that the saved state says the paused trial stopped
            self.marked.append(t.trial_id)

    s = PerBatchASHA(batch_of, time_attr="samples_seen", max_t=8192, grace_period=2048,
                     reduction_factor=2, metric="accuracy", mode="max", halving={16: 3}, halving_margin=0.02)
    first, second, third, other = trial("a", 4), trial("b", 4), trial("c", 4), trial("d", 5)
    controller = Controller([first, second, third, other])
    for t in controller.trials:
        t.status = "PENDING"
        s.on_trial_add(controller, t)
    assert s.on_trial_result(controller, first, result(1024, 0.60)) == TrialScheduler.CONTINUE
    assert s.on_trial_result(controller, first, result(2048, 0.70)) == TrialScheduler.PAUSE
    assert s.on_trial_result(controller, second, result(2048, 0.71)) == TrialScheduler.PAUSE
    first.status, second.status = "PAUSED", "RUNNING"  # "b"'s pause queued, not begun
    third.status = other.status = "RUNNING"
    assert s.choose_trial_to_run(controller) is None  # the waiting candidates stay paused
    assert s.on_trial_result(controller, third, result(2048, 0.715)) == TrialScheduler.STOP  # leads by < 0.02
    assert controller.stopped == []  # "b" is still running: not stopped yet
    second.status = "PAUSED"
    assert s.choose_trial_to_run(controller) is first  # the prior resumes; the paused loser "b" is stopped
    assert controller.stopped == controller.marked == ["b"]
    first.status = "RUNNING"
    assert s.on_trial_result(controller, first, result(4096, 0.50)) == TrialScheduler.CONTINUE  # no ASHA after
    assert s.on_trial_result(controller, other, result(2048, 0.10)) == TrialScheduler.CONTINUE  # B=32: ASHA's


def test_a_paused_loser_is_stopped_once_when_tune_removes_it_while_still_paused():
    """Tune 2.60's ``stop_trial`` of a PAUSED trial calls the scheduler's ``on_trial_remove`` (and the searcher's and
    callbacks' ends) before it sets the trial TERMINATED; the halving must not stop the same trial again from
    inside that call (it did: each paused loser was ended twice, two "stopped early" lines)."""
    class TuneOrderController:
        def __init__(self, trials):
            self.trials, self.stopped = trials, []

        def get_trials(self):
            return self.trials

        def stop_trial(self, t):  # Tune's order: scheduler, searcher, callbacks, then the status
            if t.status in ("TERMINATED", "ERROR"):
                return
            if t.status == "PAUSED":
                s.on_trial_remove(self, t)
            self.stopped.append(t.trial_id)
            t.status = "TERMINATED"

        def _mark_trial_to_checkpoint(self, t):
            pass

    s = PerBatchASHA(batch_of, time_attr="samples_seen", max_t=8192, grace_period=2048,
                     reduction_factor=2, metric="accuracy", mode="max", halving={16: 3}, halving_margin=0.02)
    first, second, third = trial("a", 4), trial("b", 4), trial("c", 4)
    controller = TuneOrderController([first, second, third])
    for t in controller.trials:
        t.status = "PENDING"
        s.on_trial_add(controller, t)
    first.status = second.status = third.status = "RUNNING"
    assert s.on_trial_result(controller, first, result(2048, 0.70)) == TrialScheduler.PAUSE  # the prior
    assert s.on_trial_result(controller, second, result(2048, 0.69)) == TrialScheduler.PAUSE
    first.status = second.status = "PAUSED"
    assert s.on_trial_result(controller, third, result(2048, 0.71)) == TrialScheduler.STOP  # leads by < 0.02
    assert controller.stopped == ["b"]  # the paused loser, once
    assert s.choose_trial_to_run(controller) is first and controller.stopped == ["b"]


def test_no_halving_where_the_rung_is_not_below_the_budget():
    s = PerBatchASHA(batch_of, time_attr="samples_seen", max_t=2048, grace_period=2048,
                     reduction_factor=2, metric="accuracy", mode="max", halving={16: 3})
    first, second = trial("a", 4), trial("b", 4)
    s.on_trial_add(None, first), s.on_trial_add(None, second)
    assert s.on_trial_result(None, first, result(2048, 0.7)) != TrialScheduler.PAUSE  # it completes
    assert "synchronous" not in s.debug_string()


def test_a_resumed_bisection_keeps_its_prior_whatever_order_tune_re_adds_the_candidates_in():
    """Issue 47: Tune re-adds restored trials latest result first (``_requeue_restored_trials``); the halving's
    prior must stay the searcher's first alpha (``AlphaRank``), not the first trial re-added."""
    from cbs_ray.methods.scratch.bisection_search import AlphaRank

    s = PerBatchASHA(batch_of, time_attr="samples_seen", max_t=8192, grace_period=2048, reduction_factor=2,
                     metric="accuracy", mode="max", halving={16: 3}, halving_margin=0.02,
                     halving_rank=AlphaRank([0.625, 0.5, 0.75]))
    for trial_id, alpha in (("t3", 0.75), ("t1", 0.625), ("t2", 0.5)):  # latest result first
        s.on_trial_add(None, SimpleNamespace(trial_id=trial_id, config={"log2_batch": 4, "alpha": alpha}))
    assert s.halving(16).order == ["t1", "t2", "t3"]


def test_a_scheduler_pickled_with_the_old_name_of_batch_of_still_loads():
    """An experiment written before the scheduler was handed ``records.trial_point.batch_of`` pickled it as
    ``cbs_ray.train.config.batch_size_of`` (a GLOBAL by module and name): that name still loads, as ``batch_of``."""
    import pickle

    old = pickle.loads(b"ccbs_ray.train.config\nbatch_size_of\n.")
    assert old is batch_of and old({"log2_batch": 5}) == 32
    assert b"trial_point" in pickle.dumps(batch_of)  # what a scheduler pickles now
