"""Synchronous halving at one rung on hand-built reports: who waits, who goes on, who stops."""

import math

from cbs_ray.maths.halving import GO_ON, STOP, TRAIN, WAIT, SynchronousHalving


def three(mode="max", margin=0.02):
    h = SynchronousHalving(3, rung=2048, mode=mode, margin=margin)
    for key in ("prior", "b", "c"):
        assert h.add(key)
    return h


def test_every_candidate_waits_at_the_rung_until_all_have_reported_then_the_prior_goes_on_alone():
    """SST-2 seed 2 at 2048 samples: 0.5464 (the majority class) against 0.5469: noise, not a lead."""
    h = three()
    assert h.report("prior", 1024, 0.50) == TRAIN  # below the rung
    assert h.report("prior", 2048, 0.5464) == WAIT
    assert h.report("c", 2048, 0.5469) == WAIT  # better, but "b" has not reported
    assert not h.decided and h.going_on() == [] and h.losers() == []
    assert h.report("b", 2048, 0.5464) == STOP  # the last report decides: "c" leads by 0.0005 <= 0.02
    assert h.going_on() == ["prior"] and h.losers() == ["b", "c"]
    assert [h.verdict(k) for k in ("prior", "b", "c")] == [GO_ON, STOP, STOP]
    assert h.report("prior", 4096, 0.40) == GO_ON  # later reports do not change the rung's value


def test_a_challenger_that_leads_the_prior_by_more_than_the_margin_goes_on_too():
    h = three()
    for key, acc in (("prior", 0.70), ("b", 0.75), ("c", 0.73)):
        h.report(key, 2048, acc)
    assert h.going_on() == ["prior", "b"] and h.losers() == ["c"]  # 0.05 > 0.02: both run the budget


def test_lower_is_better_in_min_mode_and_a_tie_among_the_others_goes_to_the_earlier():
    h = three("min", margin=0.1)
    for key, loss in (("prior", 3.5), ("c", 3.0), ("b", 3.0)):
        h.report(key, 2048, loss)
    assert h.going_on() == ["prior", "b"]  # 0.5 lower than the prior; "b" and "c" tie: "b" was added first


def test_a_prior_that_diverged_or_ended_before_the_rung_is_led_by_any_finite_challenger():
    h = three()
    h.ended("prior")  # failed before the rung: NaN there
    h.report("b", 2048, math.nan)  # diverged
    assert not h.decided
    assert h.report("c", 2048, 0.51) == GO_ON
    assert h.going_on() == ["prior", "c"] and h.losers() == ["b"]
    h = three()
    for k in ("prior", "b", "c"):
        h.report(k, 2048, math.nan)
    assert h.going_on() == ["prior"]  # none finite: the prior alone


def test_only_the_first_candidates_count_and_a_late_report_past_the_rung_is_the_rungs_value():
    h = SynchronousHalving(2, rung=2048)
    assert h.add("a") and h.add("b") and not h.add("c")
    assert h.report("c", 2048, 0.99) == TRAIN  # not a candidate
    assert h.report("a", 3072, 0.60) == WAIT  # its first report at or past the rung (a coarser cadence)
    assert h.report("a", 4096, 0.90) == WAIT  # a restarted waiting run reporting again keeps its rung value
    assert h.report("b", 2048, 0.65) == GO_ON  # leads "a"'s 0.60 by more than the margin 0
    assert h.going_on() == ["a", "b"]


def test_replaying_the_same_reports_in_another_order_reaches_the_same_verdicts():
    """A resumed experiment re-adds its trials (Tune sorts them by their last result) and replays each one's
    persisted reports; the candidates keep their order (the searcher's)."""
    reports = {"prior": [(2048, 0.70), (4096, 0.80)], "b": [(2048, 0.75)], "c": [(2048, 0.71)]}
    outcomes = []
    for replay in (("prior", "b", "c"), ("c", "b", "prior")):
        h = three()
        for key in replay:
            for samples, metric in reports[key]:
                h.report(key, samples, metric)
        outcomes.append((h.going_on(), h.losers()))
    assert outcomes[0] == outcomes[1] == (["prior", "b"], ["c"])


def test_a_candidate_read_a_milestone_past_the_rung_is_not_compared():
    """Issue 47: SIGKILL between a candidate's checkpoint at the rung and its row; resumed, its first report past
    the rung came at the next milestone, trained more than the others, and read there it led them."""
    h = three()
    h.report("prior", 2048, 0.70)
    h.report("c", 2048, 0.71)
    h.report("b", 3072, 0.90)  # its 2048 row was lost: 3072 is not the rung the others were read at
    assert h.decided and h.going_on() == ["prior"] and h.losers() == ["b", "c"]
    assert math.isnan(h.whole_rung()["b"]) and h.whole_rung()["prior"] == 0.70


def test_the_prior_stays_the_prior_whatever_order_a_resume_re_adds_the_candidates_in():
    """Issue 47: Tune re-adds restored trials latest result first; the order of ``add`` made another alpha the
    prior, which was then stopped at the rung. Given the searcher's rank, the order is the searcher's."""
    h = SynchronousHalving(3, rung=2048, margin=0.02)
    for key, rank in (("c", 2), ("prior", 0), ("b", 1)):  # the order a resume re-added them in
        assert h.add(key, rank)
    assert h.order == ["prior", "b", "c"]
    for key, acc in (("prior", 0.60), ("b", 0.61), ("c", 0.75)):
        h.report(key, 2048, acc)
    assert h.going_on() == ["prior", "c"] and h.losers() == ["b"]
