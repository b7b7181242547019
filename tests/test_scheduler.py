"""PerBatchASHA routes each trial to its own batch size's ASHA bracket (no cluster: plain objects)."""

from types import SimpleNamespace

from ray.tune.schedulers import TrialScheduler

from cbs_ray.scheduler import PerBatchASHA
from cbs_ray.trial import batch_size_of


def trial(trial_id, log2_batch):
    return SimpleNamespace(trial_id=trial_id, config={"log2_batch": log2_batch})


def scheduler():
    return PerBatchASHA(batch_size_of, time_attr="samples_seen", max_t=8192, grace_period=2048,
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


def test_budget_reached_stops_and_completion_and_removal_are_routed():
    s = scheduler()
    t = trial("a", 5)
    s.on_trial_add(None, t)
    assert s.on_trial_result(None, t, result(8192, 0.9)) == TrialScheduler.STOP
    s.on_trial_complete(None, t, result(8192, 0.9))
    s.on_trial_remove(None, t)  # already gone: no error
    assert "B=32" in s.debug_string()


def test_save_and_restore_keep_the_rungs(tmp_path):
    s = scheduler()
    a, b = trial("a", 4), trial("b", 4)
    s.on_trial_add(None, a)
    s.on_trial_result(None, a, result(2048, 0.70))
    s.save(str(tmp_path / "state.pkl"))
    restored = scheduler()
    restored.restore(str(tmp_path / "state.pkl"))
    restored.on_trial_add(None, b)
    assert restored.on_trial_result(None, b, result(2048, 0.60)) == TrialScheduler.STOP
