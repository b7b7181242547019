"""Synchronous halving at one rung on hand-built reports: who waits, who goes on, who stops."""

import math

from cbs_ray.maths.halving import GO_ON, STOP, TRAIN, WAIT, SynchronousHalving


def three(mode="max"):
    h = SynchronousHalving(3, rung=2048, mode=mode)
    for key in ("a", "b", "c"):
        assert h.add(key)
    return h


def test_every_candidate_waits_at_the_rung_until_all_have_reported_then_only_the_best_goes_on():
    h = three()
    assert h.report("a", 1024, 0.60) == TRAIN  # below the rung
    assert h.report("a", 2048, 0.70) == WAIT
    assert h.report("b", 2048, 0.78) == WAIT  # better, but "c" has not reported: asynchronous ASHA would go on
    assert not h.decided and h.winner is None and h.losers() == []
    assert h.report("c", 2048, 0.75) == STOP  # the last report decides: "b" (0.78) goes on
    assert h.decided and h.winner == "b" and h.losers() == ["a", "c"]
    assert [h.verdict(k) for k in "abc"] == [STOP, GO_ON, STOP]
    assert h.report("b", 4096, 0.70) == GO_ON  # later reports do not change the rung's value


def test_lower_is_better_in_min_mode():
    h = three("min")
    for key, loss in (("c", 3.0), ("a", 3.5), ("b", 3.1)):
        h.report(key, 2048, loss)
    assert h.winner == "c" and h.losers() == ["a", "b"]


def test_a_tie_for_the_best_goes_on_together_to_the_next_comparison_and_those_behind_stop():
    """SST-2 at 2048 samples: every candidate still predicts the majority class (the same accuracy)."""
    h = three()
    assert [h.report(k, 2048, 0.5464) for k in "abc"] == [WAIT, WAIT, TRAIN]  # all tied: the last trains on
    assert h.comparison == 1 and h.losers() == [] and [h.verdict(k) for k in "abc"] == [TRAIN] * 3
    assert h.report("c", 4096, 0.70) == WAIT
    assert h.report("a", 4096, 0.70) == WAIT
    assert h.report("b", 4096, 0.61) == STOP  # behind; "a" and "c" still tied at 0.70
    assert h.comparison == 2 and h.losers() == ["b"] and not h.decided
    assert h.report("a", 6144, 0.75) == WAIT  # "b" is out: only "c" is awaited
    assert h.report("c", 6144, 0.74) == STOP
    assert h.winner == "a" and h.verdict("a") == GO_ON and h.out == {"b": 1, "c": 2}


def test_a_candidate_whose_report_skips_comparisons_counts_its_metric_at_each():
    h = SynchronousHalving(2, rung=1024)
    h.add("a"), h.add("b")
    assert h.report("a", 2048, 0.7) == WAIT  # a cadence of 2048: comparisons 0 and 1 at once
    assert h.reported["a"] == {0: 0.7, 1: 0.7}
    assert h.report("b", 2048, 0.7) == TRAIN and h.comparison == 2  # tied at both


def test_a_candidate_that_ended_before_the_rung_or_diverged_loses_to_any_finite_metric():
    h = three()
    h.report("a", 2048, math.nan)  # diverged at the rung
    h.ended("b")  # failed before it
    assert not h.decided
    assert h.report("c", 2048, 0.51) == GO_ON
    assert h.losers() == ["a", "b"]
    h = three()
    for k in "abc":
        h.report(k, 2048, math.nan)
    assert h.winner == "a"  # none finite: the first candidate
    h = three()
    h.ended("a"), h.ended("b"), h.ended("c")
    assert h.winner == "a"  # all ended before any comparison


def test_only_the_first_candidates_count_and_a_late_report_past_the_rung_is_the_rungs_value():
    h = SynchronousHalving(2, rung=2048)
    assert h.add("a") and h.add("b") and not h.add("c")
    assert h.report("c", 2048, 0.99) == TRAIN  # not a candidate
    assert h.report("a", 3072, 0.60) == WAIT  # its first report at or past the rung (a coarser cadence)
    assert h.report("a", 4096, 0.90) == WAIT  # a restarted waiting run reporting again keeps its rung value
    assert h.report("b", 2048, 0.65) == GO_ON  # the last to report decides against "a"'s 0.60
    assert h.verdict("a") == STOP


def test_replaying_the_same_reports_in_another_order_reaches_the_same_verdicts():
    """A resumed experiment re-adds its trials (Tune sorts them by their last result) and replays each one's
    persisted reports."""
    reports = {"a": [(2048, 0.70), (4096, 0.80)], "b": [(2048, 0.72)], "c": [(2048, 0.71)]}
    verdicts = []
    for order in ("abc", "cba"):
        h = SynchronousHalving(3, rung=2048)
        for key in order:
            h.add(key)
            for samples, metric in reports[key]:
                h.report(key, samples, metric)
        verdicts.append((h.winner, h.losers()))
    assert verdicts[0][0] == verdicts[1][0] == "b"
