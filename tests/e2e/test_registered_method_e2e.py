"""A search method defined outside the package with its own spec section and a training hook
(``tests/helpers/gauged_method/``: the from-scratch search whose trials also report their weights' norm, the norm's
order set in its ``gauge:`` section), registered with ``register_method`` and run end to end through the driver on a
real local Ray, then resumed and reported by its name alone: a new method is its folder and one registry line."""

import json

import pandas as pd
import pytest

from cbs_ray import resume_search, run_search
from cbs_ray.records import method_registry
from cbs_ray.records.storage import load_history, read_meta
from cbs_ray.report.command import report_main
from cbs_ray.spec.load import load_spec
from helpers.training import EARLIER_DEFAULT
from tests.helpers import gauged_method  # by the path Ray's workers import it by (the hooks are unpickled there)

TINY = EARLIER_DEFAULT + ["data.builtin_train_examples=1024", "data.builtin_eval_examples=128",
                          "training.budget_samples=2048", "training.eval_every_samples=1024",
                          "asha.grace_period_samples=1024", "search.batch_sizes=[8, 16]", "search.num_trials=2"]


@pytest.mark.slow  # ≈ 40 s on 2 cores (a search, its resume, its report): CI's `pytest -m slow` step
def test_a_registered_method_with_its_section_and_hook_runs_resumes_and_reports(tmp_path, shared_ray, capsys,
                                                                             monkeypatch):
    # registered for this test alone: every spec holds a registered method's section (cbs_spec.json, the schema)
    monkeypatch.setattr(method_registry, "_REGISTRY", dict(method_registry._REGISTRY))
    gauged_method.register()
    name, section = gauged_method.NAME, gauged_method.SECTION
    space = tmp_path / "space.yaml"
    space.write_text(f"search:\n  method: {name}\n{section}:\n  norm_order: 2\n")
    spec = load_spec(space, TINY + [f"{section}.norm_order=1", f"storage_path={tmp_path / 'rr'}"])  # --set wins
    result = run_search(spec, output_dir=str(tmp_path / "out"), verbose=0)
    assert f"{name}: every report also gives weight_norm (order 1)" in capsys.readouterr().out  # its outline line
    path = result.experiment_path
    meta = read_meta(path)
    assert meta["method"] == name and meta["spec"][section] == {"norm_order": 1}  # recorded with its section
    # its hook ran in every trial's workers: the weights' 1-norm beside each evaluation, with its order
    history = load_history(path)
    assert len(history) >= 2 and (history["weight_norm_order"] == 1).all()
    assert (history["weight_norm"] > 0).all() and history["weight_norm"].notna().all()
    assert {r["batch_size"] for r in result.summary.per_batch} == {8, 16}
    norms = pd.read_csv(tmp_path / "out" / "weight_norm.csv")  # its own report half ran
    assert len(norms) == len(history) and (norms["weight_norm_order"] == 1).all()
    # resumed by the name in its metadata: its section read back from the recorded spec, the trials kept
    resumed = resume_search(path, output_dir=str(tmp_path / "resumed"), verbose=0)
    assert (tmp_path / "resumed" / "weight_norm.csv").is_file()
    assert len(resumed.trials) == len(result.trials)
    # the report command finds its steps and its own default folder from the registry
    assert report_main([path, "--output", str(tmp_path / "report")]) == 0
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["experiment_path"] == path and (tmp_path / "report" / "weight_norm.csv").is_file()
