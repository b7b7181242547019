"""What is on disk is never silently dropped (issue 29 rows 4 and 5): a result file cut off mid-line is read
up to the cut and the lines lost are named; a damaged Tune state is refused by --resume and the report
rebuilds the trials from their own files."""

import json

from cbs_ray.records.storage import damaged_tune_state, load_history, write_meta
from cbs_ray.search import main


def _row(trial_id, samples, accuracy):
    return json.dumps({"trial_id": trial_id, "samples_seen": samples, "accuracy": accuracy,
                       "config": {"log2_batch": 4, "alpha": 0.5}})


def _experiment(tmp_path):
    """Two trials' directories as Tune leaves them, no experiment state: B16's file cut off in its third line,
    B32 failed (its error file) after one report."""
    (tmp_path / "B16_aaaa").mkdir()
    (tmp_path / "B16_aaaa" / "result.json").write_text(
        _row("aaaa", 512, 0.8) + "\n" + _row("aaaa", 1024, 0.9) + "\n" + _row("aaaa", 1536, 0.95)[:30])
    (tmp_path / "B32_bbbb").mkdir()
    (tmp_path / "B32_bbbb" / "result.json").write_text(_row("bbbb", 512, 0.7) + "\n")
    (tmp_path / "B32_bbbb" / "error.txt").write_text("RuntimeError: boom\n")
    return tmp_path


def test_a_cut_off_result_file_keeps_its_complete_lines_and_says_what_was_lost(tmp_path, capsys):
    history = load_history(str(_experiment(tmp_path)))
    assert sorted(zip(history["trial_id"], history["samples_seen"])) == [("aaaa", 512), ("aaaa", 1024), ("bbbb", 512)]
    assert history.set_index("trial_id")["failed"].to_dict() == {"aaaa": False, "bbbb": True}
    assert history["config/alpha"].tolist() == [0.5, 0.5, 0.5]  # flattened as Tune's ExperimentAnalysis does
    err = capsys.readouterr().err
    assert "Tune's experiment state cannot be read" in err and "the 2 trials are read from their own result files" in err
    assert "trial aaaa: " in err and "result.json is cut off at line 3: 1 line(s) lost, 2 read" in err


def test_a_damaged_tune_state_is_named_and_a_resume_from_it_starts_nothing(tmp_path, capsys):
    assert damaged_tune_state(str(tmp_path)) is None
    state = tmp_path / "experiment_state-2026-12-01_10-14-24.json"
    state.write_text('{"trial_data": [')
    assert "experiment_state-2026-12-01_10-14-24.json is damaged (Expecting value" in damaged_tune_state(str(tmp_path))
    write_meta(str(tmp_path), {"name": "x", "metric": "accuracy", "mode": "max", "spec": {}, "budget_samples": 64,
                               "format": 2})
    assert main(["--resume", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is damaged" in err and "nothing was started" in err, err
