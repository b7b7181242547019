"""``LadderSummary`` typed (issue 46): summary.json, report.md and report.html are what the code before the types
wrote (``tests/golden/expected/ladder_summaries``, written by ``make_ladder_summaries.py`` from the dict-based
summary), for eight readings that take every branch of the reading. Byte for byte where no float is computed (a
summary read back and written again, a report rendered from it); to the golden tolerance where the summary is
computed again (another CPU's last digits: ``helpers.tolerant``). No Ray, no torch."""

import json

import make_golden
import make_ladder_summaries as made
import pytest

from cbs_ray.methods.ladder.reading import summarize_ladder
from cbs_ray.methods.ladder.recorded import RecordedLadderSettings
from cbs_ray.methods.ladder.summary import LadderPrediction, LadderSummary, PredictionValidation
from helpers.tolerant import report_differences

CASES = made.cases()
FILES = ("summary.json", "report.md", "report.html")


def expected(case: str, file: str) -> str:
    return (made.EXPECTED / f"{case}.{file}").read_text()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_stored_summary_reads_back_and_writes_the_same_bytes(case, tmp_path):
    text = expected(case, "summary.json")
    summary = LadderSummary.from_json(text)
    assert summary.to_json() == text
    assert isinstance(summary.prediction, LadderPrediction)
    got = made.written(summary, tmp_path)  # the report rendered from the typed summary: the same bytes
    for file in FILES:
        assert got[file] == expected(case, file), f"{case}: {file} differs"


def test_the_golden_experiment_s_summary_reads_back_and_writes_the_same_bytes():
    text = (make_golden.EXPECTED / "ladder" / "summary.json").read_text()
    assert LadderSummary.from_json(text).to_json() == text


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_typed_reading_is_the_one_the_dicts_wrote(case, tmp_path):
    frame, meta, schedule = CASES[case]
    got = made.written(summarize_ladder(frame, meta, bootstrap=made.BOOTSTRAP, schedule=schedule), tmp_path)
    for file in FILES:
        differences = report_differences(file, got[file], expected(case, file))
        assert not differences, f"{case}: {file}: " + "; ".join(differences[:5])


def test_the_cases_take_the_branches_they_are_named_for():
    d = {case: json.loads(expected(case, "summary.json")) for case in CASES}
    assert d["predict_loss"]["ladder"]["predict"] == "loss" and "predict" not in d["validated"]["ladder"]
    assert "source" not in d["predict_loss"]["prediction"] and "source" in d["validated"]["prediction"]
    assert d["refused"]["prediction_validation"] is None and d["refused"]["ladder"]["refusal"]
    assert d["no_anchor"]["prediction"]["b_crit"] is None and d["no_anchor"]["reference_laws"] == {}
    assert d["lr_weighted"]["reference_laws"]["note"].startswith("packed 32")
    assert d["lr_weighted"]["prediction"]["batch_size_schedule"] == made.SCHEDULE
    assert d["ewa_capped"]["ladder"]["column"] == "ewa_eval_loss" and d["fit_curve"]["ladder"]["curve"] == "fit"
    s = LadderSummary.from_json(expected("validated", "summary.json"))
    assert isinstance(s.prediction_validation, PredictionValidation)
    assert s.prediction_validation.power_law_prediction.b_crit == pytest.approx(s.ladder.constant * 8192 **
                                                                                s.ladder.exponent, rel=1e-6)


def test_the_recorded_settings_fill_what_an_older_experiment_left_out():
    old = {k: v for k, v in made.META.items() if k not in ("ladder_validate", "max_seq_length", "name")}
    rec = RecordedLadderSettings.from_json(old)
    assert (rec.curve, rec.reading, rec.column, rec.cap, rec.step_count, rec.predict, rec.run_stop) == \
        ("interpolate", "raw", "eval_loss", 1.0, "optimizer", "power_law", 0)
    assert rec.validate is False and rec.lr_warmups is None and rec.tokens is None
    new = RecordedLadderSettings.from_json({**made.META, "ladder_reading": "ewa", "ladder_step_count": "lr_weighted",
                                    "ladder_warmup_steps": {"8": 26, "16": 13}, "ladder_predict": "loss"})
    assert new.column == "ewa_eval_loss" and new.lr_warmups == {8: 26, 16: 13} and new.tokens == 32
    assert RecordedLadderSettings.from_json(new.to_json()) == new and RecordedLadderSettings.from_json(rec.to_json()) == rec
    assert "ladder_predict" not in rec.to_json() and new.to_json()["ladder_predict"] == "loss"
    with pytest.raises(ValueError, match="^ladder_seeds, base_lr missing from the ladder experiment's metadata$"):
        RecordedLadderSettings.from_json({k: v for k, v in made.META.items() if k not in ("ladder_seeds", "base_lr")})
