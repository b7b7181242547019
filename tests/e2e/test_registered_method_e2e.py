"""A search method defined outside the package (``tests/helpers/renamed_method.py``: scratch's two halves under
another name and report folder), registered with ``register_method`` and run end to end through the driver on a
real local Ray, then resumed and reported by its name alone (issue 46's target: a new method is its modules and
one registry entry)."""

import json

import pytest

from cbs_ray import resume_search, run_search
from cbs_ray.records.storage import read_meta
from cbs_ray.report.command import report_main
from cbs_ray.spec.load import load_spec
from helpers import renamed_method
from helpers.training import EARLIER_DEFAULT

TINY = EARLIER_DEFAULT + ["data.builtin_train_examples=1024", "data.builtin_eval_examples=128",
                          "training.budget_samples=2048", "training.eval_every_samples=1024",
                          "asha.grace_period_samples=1024", "search.batch_sizes=[8, 16]", "search.num_trials=2"]


@pytest.mark.slow  # ≈ 40 s on 2 cores (a search, its resume, its report): CI's `pytest -m slow` step
def test_a_registered_method_runs_resumes_and_reports_through_the_driver(tmp_path, shared_ray, capsys):
    renamed_method.register()
    name = renamed_method.NAME
    spec = load_spec(None, TINY + [f"search.method={name}", f"storage_path={tmp_path / 'rr'}"])
    result = run_search(spec, output_dir=str(tmp_path / "out"), verbose=0)
    out = capsys.readouterr().out
    assert f"{name}: " in out  # its own plan lines, printed by the driver
    path = result.experiment_path
    assert read_meta(path)["method"] == name  # the driver records the spec's method
    assert (tmp_path / "out" / "renamed.txt").read_text() == f"{name}\n"  # its own report half ran
    assert result.summary.per_batch and {r["batch_size"] for r in result.summary.per_batch} == {8, 16}
    # resumed by the name in its metadata: its own Ray half and report steps again, the trials kept
    resumed = resume_search(path, output_dir=str(tmp_path / "resumed"), verbose=0)
    assert (tmp_path / "resumed" / "renamed.txt").is_file()
    assert len(resumed.trials) == len(result.trials)
    # the report command finds its steps and its own default folder from the registry
    assert report_main([path, "--output", str(tmp_path / "report")]) == 0
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["experiment_path"] == path and (tmp_path / "report" / "renamed.txt").is_file()
