"""One tolerance (issue 50, item 5): a loss metric's turning point and branch mode's ε are one number in nats;
accuracy-like metrics stay relative; old experiments read as relative; every headline says it in the metric's
units. Known answers beside each input."""

import math

import pandas as pd
import pytest

from cbs_ray.cli import main
from cbs_ray.maths.bisection import Bisection, Run
from cbs_ray.maths.halving import SynchronousHalving
from cbs_ray.methods.branch.settings import resolve_branch_settings
from cbs_ray.methods.scratch.reading import summarize
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.spec.tolerance import (
    NATS,
    RELATIVE,
    Tolerance,
    is_loss_metric,
    resolve_tolerances,
    unit_of_record,
    within_text,
)


def test_loss_metrics_are_read_in_nats_and_the_rest_relative():
    assert is_loss_metric("eval_loss", "min") and is_loss_metric("excess_loss", "min")
    assert is_loss_metric("val_loss", "min") and not is_loss_metric("val_loss", "max")
    assert not is_loss_metric("perplexity", "min") and not is_loss_metric("accuracy", "max")
    search, branch = resolve_tolerances(metric="eval_loss", mode="min")
    assert search == branch == Tolerance(0.01, NATS)
    search, branch = resolve_tolerances(metric="accuracy", mode="max", branch_tolerance=0.02)
    assert search == Tolerance(0.01, RELATIVE) and branch == Tolerance(0.02, NATS)  # branch compares losses
    assert resolve_tolerances(metric="perplexity", mode="min")[0] == Tolerance(0.01, RELATIVE)


def test_a_loss_metric_shares_one_tolerance_either_side_may_set():
    assert resolve_tolerances(metric="eval_loss", mode="min", branch_tolerance=0.03) == (Tolerance(0.03, NATS),) * 2
    assert resolve_tolerances(metric="eval_loss", mode="min", search_tolerance=0.02,
                              branch_tolerance=0.02)[1] == Tolerance(0.02, NATS)
    with pytest.raises(SpecError, match="search.tolerance 0.02 and branch.tolerance 0.01"):
        resolve_tolerances(metric="eval_loss", mode="min", search_tolerance=0.02, branch_tolerance=0.01)
    # relative for the loss: both relative; branch.tolerance_relative under auto says the same
    assert resolve_tolerances(metric="eval_loss", mode="min", unit="relative") == (Tolerance(0.01, RELATIVE),) * 2
    assert resolve_tolerances(metric="eval_loss", mode="min", branch_relative=True)[0] == Tolerance(0.01, RELATIVE)
    with pytest.raises(SpecError, match="branch.tolerance_relative: true contradicts"):
        resolve_tolerances(metric="eval_loss", mode="min", unit="nats", branch_relative=True)
    with pytest.raises(SpecError, match="search.tolerance_unit: nats needs a loss metric"):
        resolve_tolerances(metric="accuracy", mode="max", unit="nats")


def test_the_spec_resolves_it_for_the_search_and_for_branch_mode():
    spec = load_spec("search_spaces/markov_lm.yaml", ["search.method=branch", "branch.tolerance=0.02"])
    assert spec.search.tolerance is None and spec.search.tolerance_unit == "auto"
    br = resolve_branch_settings(spec, 1 << 16)
    assert br.tolerance == 0.02 and br.tolerance_relative is False
    with pytest.raises(SpecError, match="one tolerance"):
        load_spec("search_spaces/markov_lm.yaml", ["search.tolerance=0.05", "branch.tolerance=0.02"])


def test_contradictory_tolerances_are_one_line_and_exit_2(capsys):
    code = main(["search", "--dry-run", "--space", "search_spaces/markov_lm.yaml", "--set", "search.tolerance=0.05",
                 "--set", "branch.tolerance=0.02"])
    err = capsys.readouterr().err
    assert code == 2 and "one tolerance" in err and len(err.strip().splitlines()) == 1, err[:500]


def test_the_headline_says_it_in_the_metrics_units():
    assert within_text(0.01, NATS) == "within 0.01 nats of the best"
    assert within_text(0.01, RELATIVE) == "within 1 % of the best"
    assert within_text(0.025, RELATIVE, of="it") == "within 2.5 % of it"
    assert Tolerance(0.01, RELATIVE).in_metric_units(-5.5) == pytest.approx(0.055)
    assert Tolerance(0.01, NATS).in_metric_units(None) == 0.01
    assert Tolerance(0.01, RELATIVE).in_metric_units(None) is None
    assert unit_of_record(None) == RELATIVE and unit_of_record("nats") == NATS  # before issue 50: relative


def _loss_history(losses: dict) -> pd.DataFrame:
    """One trial per batch, its eval loss at the budget (1024 samples) as given, 1.2× that at 512."""
    return pd.DataFrame([{"trial_id": f"t{b}", "batch_size": b, "alpha": 0.5, "warmup_fraction": 0.1,
                          "peak_lr": 1e-3, "samples_seen": s, "eval_loss": loss * (1.2 if s < 1024 else 1.0),
                          "wall_time_s": s / (10.0 * b), "samples_per_s": 10.0 * b, "diverged": False}
                         for b, loss in losses.items() for s in (512, 1024)])


LOSSES = {16: 5.50, 32: 5.505, 64: 5.52, 128: 5.54, 256: 5.60}
"""1 % of 5.5 is 0.055 nats: B=128 (+0.04) is within it, B=256 (+0.10) not; 0.01 nats: B=32 (+0.005) is within,
B=64 (+0.02) not."""


@pytest.mark.parametrize("unit, answer, margin, said", [
    ("relative", 128, 0.055, "within 1 % of the best"), ("nats", 32, 0.01, "within 0.01 nats of the best")])
def test_the_turning_point_reads_the_tolerance_in_its_unit(unit, answer, margin, said):
    s = summarize(_loss_history(LOSSES), metric="eval_loss", mode="min", budget_samples=1024, tolerance=0.01,
                  tolerance_unit=unit)
    cb = s.critical_batch
    assert cb.batch_size == answer and cb.tolerance_unit == unit
    assert math.isclose(cb.tolerance_in_metric_units, margin, rel_tol=1e-9)
    assert said in s.answer.text and '"tolerance_unit": "%s"' % unit in s.to_json()
    # the recommendation is the fastest within the tolerance: the largest batch within it here
    assert s.recommendation.batch_size == answer


def test_bisection_and_halving_take_the_unit():
    runs = {Run(16, 0.5): 5.50, Run(32, 0.5): 5.52}  # B=32 is 0.02 nats, 0.36 %, above B=16
    for relative, answer in ((False, 16), (True, 32)):
        bisection = Bisection([16, 32, 64], [0.5], mode="min", tolerance=0.01, relative=relative, results=dict(runs))
        assert bisection.reading() == answer
    # the challenger leads the prior by 0.03: more than 0.01 nats, less than 1 % of 5.5 (0.055)
    for relative, goes_on in ((False, ["a", "b"]), (True, ["a"])):
        h = SynchronousHalving(2, 100, mode="min", margin=0.01, relative=relative)
        h.order, h.at_rung, h.read_at = ["a", "b"], {"a": 5.50, "b": 5.47}, {"a": 100, "b": 100}
        assert h.going_on() == goes_on


def test_a_spec_stored_before_the_unit_resumes_as_it_ran():
    from cbs_ray.records.method_registry import method_entry
    from cbs_ray.spec.load import spec_from_dict, spec_to_dict
    from cbs_ray.spec.tolerance import as_recorded

    old = spec_to_dict(load_spec("search_spaces/markov_lm.yaml", ["search.method=branch", "branch.tolerance=0.15"]))
    old["search"] = {k: v for k, v in old["search"].items() if k != "tolerance_unit"}
    old["search"]["tolerance"] = 0.01  # what a spec before issue 50 wrote out: the default, never used by branch mode
    with pytest.raises(SpecError, match="one tolerance"):
        spec_from_dict(old)
    branch = spec_from_dict(as_recorded(old, None, method_entry("branch").loss_epsilon))
    assert resolve_branch_settings(branch, 1 << 16).tolerance == 0.15
    scratch = spec_from_dict(as_recorded({**old, "branch": {}, "search": {**old["search"], "method": "scratch"}},
                                         None, method_entry("scratch").loss_epsilon))
    assert scratch.search.tolerance_unit == "relative"
    assert as_recorded(old, "nats", True) is old  # a spec that records its unit is as it is
