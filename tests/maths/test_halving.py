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


def test_lower_is_better_in_min_mode_and_a_tie_goes_to_the_earlier_candidate():
    h = three("min")
    for key, loss in (("c", 3.0), ("a", 3.5), ("b", 3.0)):
        h.report(key, 2048, loss)
    assert h.winner == "b"  # 3.0 at "b" and "c": "b" was added first
    h = three()
    for key in "cba":
        h.report(key, 2048, 0.7)
    assert h.winner == "a"


def test_a_candidate_that_ended_before_the_rung_or_diverged_loses_to_any_finite_metric():
    h = three()
    h.report("a", 2048, math.nan)  # diverged at the rung
    h.ended("b")  # failed before it
    assert not h.decided
    assert h.report("c", 2048, 0.51) == GO_ON
    assert h.losers() == ["a", "b"]
    h = three()
    h.ended("a"), h.ended("b"), h.ended("c")
    assert h.winner == "a"  # none finite: the first candidate


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
