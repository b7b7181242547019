"""A from-scratch search cut by Ctrl-C in its second stage, the repeats, and resumed (issue 46: the driver runs and
resumes every method's stages from the stage record in the experiment's metadata), on a real local Ray: the cut
names the search's experiment (the one ``--resume`` takes; before, the repeats' own, which has no metadata), the
resume restores the repeats without running the search again, and an experiment written before the stage record
(its ``repeats_experiment`` alone) resumes alike."""

import json
from pathlib import Path

import pytest

from cbs_ray.records.storage import META_FILE, load_history, read_meta
from cbs_ray.spec.load import load_spec
from helpers.ctrl_c import cut_by_ctrl_c
from helpers.training import EARLIER_DEFAULT

TINY = EARLIER_DEFAULT + ["data.builtin_train_examples=1024", "data.builtin_eval_examples=128",
                          "training.budget_samples=2048", "training.eval_every_samples=1024",
                          "asha.grace_period_samples=1024", "search.batch_sizes=[8, 16]", "search.num_trials=2",
                          "search.repeats=2"]
"""Two search trials (B=8, B=16), then each one's configuration once more: two repeats."""


@pytest.mark.slow  # ≈ 60 s on 2 cores (a search, its repeats cut and resumed twice): CI's `pytest -m slow` step
def test_repeats_cut_by_ctrl_c_resume_from_the_searchs_experiment_and_the_search_is_not_run_again(
        tmp_path, shared_ray, monkeypatch, capsys):
    from cbs_ray import resume_search, run_search

    spec = load_spec(None, TINY + [f"storage_path={tmp_path / 'rr'}"])
    marker = str(tmp_path / "interrupted")
    path = cut_by_ctrl_c(monkeypatch, marker, lambda: run_search(spec, output_dir=str(tmp_path / "out"), verbose=0),
                         lambda config, result: result.get("samples_seen", 0) >= 1024,
                         cuts=lambda name: name.endswith("-repeats"))
    repeats = f"{path}-repeats"
    meta = read_meta(path)  # the search's experiment: what --resume takes
    assert Path(marker).is_file() and meta["repeats_experiment"] == repeats
    assert meta["stages"] == [{"name": "search", "experiment": path}, {"name": "repeats", "experiment": repeats}]
    searched = load_history(path)

    capsys.readouterr()
    result = resume_search(path, output_dir=str(tmp_path / "resumed"), verbose=0)
    assert f"resuming {path}" in capsys.readouterr().out
    assert load_history(path).equals(searched)  # the search, done before the cut, was not run again
    trials = json.loads((tmp_path / "resumed" / "summary.json").read_text())["trials"]
    ids = [t["trial_id"] for t in trials]
    assert len(ids) == len(set(ids)) == 4 and sum(t["repeat"] for t in trials) == 2
    assert all(t["status"] == "completed" and t["samples_seen"] == 2048 for t in trials)

    # Written before the stage record: the repeats read from their old field, restored (finished: nothing trains).
    legacy = {k: v for k, v in read_meta(path).items() if k != "stages"}
    (Path(path) / META_FILE).write_text(json.dumps(legacy))
    again = resume_search(path, output_dir=str(tmp_path / "legacy"), verbose=0)
    assert json.loads((tmp_path / "legacy" / "summary.json").read_text())["trials"] == trials
    assert len(again.trials) == len(result.trials)
