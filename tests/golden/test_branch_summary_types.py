"""Branch mode's summary typed and its recorded settings read once (issue 46): summary.json, report.md and
report.html are what the code before the types wrote (``tests/golden/expected/branch_summaries``, written by
``make_branch_summaries.py`` from the dict-based summary), for seven readings that take the branches of the reading.
The summary is computed again, so compared to the golden tolerance (another CPU's last digits:
``helpers.tolerant``); on this machine the bytes are the same. No Ray, no torch."""

import json

import make_branch_summaries as made
import pytest

from cbs_ray.methods.branch.reading import summarize_branches
from helpers.tolerant import report_differences

CASES = made.cases()
FILES = ("summary.json", "report.md", "report.html")


def expected(case: str, file: str) -> str:
    return (made.EXPECTED / f"{case}.{file}").read_text()


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_typed_reading_is_the_one_the_dicts_wrote(case, tmp_path):
    frame, meta = CASES[case]
    got = made.written(summarize_branches(frame, meta), frame, tmp_path)
    for file in FILES:
        differences = report_differences(file, got[file], expected(case, file))
        assert not differences, f"{case}: {file}: " + "; ".join(differences[:5])


def test_the_cases_take_the_branches_they_are_named_for():
    d = {case: json.loads(expected(case, "summary.json")) for case in CASES}
    assert d["validated"]["controls_from"] == "none" and d["validated"]["loss_comparison"]
    assert d["validated"]["trunk"]["warmup_samples"] == 816
    assert d["controls_from"]["controls_from"] == made.SCRATCH
    assert d["controls_from"]["control_configurations"] == made.CONFIGS
    assert d["controls_from"]["schedule_validation"]["non_inferiority"]["margin"] == 0.02
    old = d["old_relative_tokens"]
    assert old["tolerance_relative"] is True and old["schedule_rule"] == "while_safe" and old["budget_tokens"]
    assert d["train_ema_fitted"]["loss"] == "train_ema" and d["train_ema_fitted"]["schedule_rule"] == "fitted"
    assert d["repeats_seesaw"]["repeats"] == 3 and d["repeats_seesaw"]["alphas"] == [0.5, 1.0]
    assert not d["no_alphas_unresolvable"]["critical_batch_over_training"][2]["resolvable"]
    assert d["trunk_only"]["cost_ratio"] is None and d["trunk_only"]["samples_by_role"] == {"trunk": 8192}
    assert all(d[c]["schedule_validation"] is None for c in CASES if c not in ("validated", "controls_from"))


def test_the_recorded_settings_fill_what_an_older_experiment_left_out():
    from cbs_ray.methods.branch.recorded import RecordedBranchSettings, ScheduleDecided
    from helpers.branch_history import META

    old = {k: v for k, v in META.items() if k not in ("tolerance_relative", "alphas", "deviations", "trunk_peak_lr")}
    rec = RecordedBranchSettings.from_json(old)
    assert (rec.tolerance_relative, rec.schedule_rule, rec.loss, rec.repeats, rec.trunk_alpha, rec.lr_decay) == \
        (True, "while_safe", "eval", 1, 0.5, "linear")
    assert rec.alphas == () and rec.schedule is None and rec.margin == rec.tolerance == 0.01
    new = RecordedBranchSettings.from_json({**META, "schedule_rule": "fitted", "warmup_fraction": 0.1, "repeats": 3,
                                    "schedule": {"margin": 0.02, "controls_from": "none", "alpha": 0.5,
                                                 "batch_size_schedule": [[0, 16], [1024, 32]]}})
    assert new.margin == 0.02 and new.schedule == ScheduleDecided([[0, 16], [1024, 32]], 0.5, 0.02, None, "none")
    assert new.tolerance_relative is False and new.alphas == (0.5,) and new.total_steps == 512
    assert RecordedBranchSettings.from_json(new.to_json()) == new and RecordedBranchSettings.from_json(rec.to_json()) == rec
    with pytest.raises(ValueError, match="^trunk_batch, tolerance missing from the branch experiment's metadata$"):
        RecordedBranchSettings.from_json({k: v for k, v in META.items() if k not in ("trunk_batch", "tolerance")})


def test_a_recorded_reading_is_the_mapping_s():
    from cbs_ray.methods.branch.recorded import RecordedBranchSettings

    frame, meta = CASES["controls_from"]
    assert summarize_branches(frame, RecordedBranchSettings.from_json(meta)).to_json() == \
        summarize_branches(frame, meta).to_json()


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_typed_parts_read_back_from_summary_json_and_write_the_same(case):
    from cbs_ray.methods.branch.summary import BranchRun, LossComparison, TrunkRecord

    d = json.loads(expected(case, "summary.json"))
    assert TrunkRecord.from_dict(d["trunk"]).to_dict() == d["trunk"]
    assert [BranchRun.from_dict(b).to_dict() for b in d["branches"]] == d["branches"]
    assert [LossComparison.from_dict(c).to_dict() for c in d["loss_comparison"] or []] == (d["loss_comparison"] or [])
    s = summarize_branches(*CASES[case])
    assert isinstance(s.trunk, TrunkRecord) and all(isinstance(b, BranchRun) for b in s.branches)
    assert (s.loss_comparison is None) == (d["loss_comparison"] is None)
