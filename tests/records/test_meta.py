"""ExperimentMeta: the keys of cbs_spec.json defined once, format 1 read as such, the round trip exact."""

import json

import pytest

from cbs_ray.records.meta import FORMAT, ExperimentMeta
from cbs_ray.records.storage import META_FILE, ReportError

BRANCHING = {"trunk_batch": 8, "checkpoints": [1024, 2048], "window_samples": 1024, "branch_batches": [16, 32],
             "alphas": [0.5, 1.0], "trunk_alpha": 0.5, "warmup_fraction": 0.05, "trunk_peak_lr": 0.002}


def test_a_methods_record_is_its_own_mapping_and_round_trips():
    raw = {"name": "lm", "method": "branch", "metric": "eval_loss", "mode": "min", "spec": {"name": "lm"},
           "budget_samples": 8192, "tolerance": 0.005, "format": FORMAT, "data_fingerprint": "ab12",
           "method_record": {**BRANCHING, "checkpoint_dir": "/x/trunk"}}
    meta = ExperimentMeta.from_dict(raw)
    assert (meta.method, meta.budget_samples, meta.method_record) == ("branch", 8192,
                                                                      {**BRANCHING, "checkpoint_dir": "/x/trunk"})
    assert meta.to_dict() == raw and ExperimentMeta.from_dict(meta.to_dict()) == meta
    # the flat mapping a method's reading reads: the fields and the record's keys beside them
    assert meta.recorded() == {**{k: v for k, v in raw.items() if k != "method_record"}, **BRANCHING,
                               "checkpoint_dir": "/x/trunk"}


def test_an_old_branch_experiments_flat_layout_is_read_into_the_record(tmp_path):
    """An experiment written before the method's record (by hand, as that cbs-ray wrote it): the branch keys flat
    beside the fields, ``checkpoint_dir``, ``schedule_experiment`` and ``schedule`` among them."""
    schedule = {"batch_size_schedule": [[0, 8], [4096, 16]], "alpha": 0.5, "margin": 0.01}
    (tmp_path / META_FILE).write_text(json.dumps({
        "name": "lm", "method": "branch", "metric": "eval_loss", "mode": "min", "spec": {"name": "lm"},
        "budget_samples": 8192, "tolerance": 0.005, "format": 2, "data_fingerprint": "ab12",
        "checkpoint_dir": "/x/trunk", "schedule_experiment": "/x/lm-schedule", "schedule": schedule, **BRANCHING}))
    meta = ExperimentMeta.read(str(tmp_path))
    assert (meta.method, meta.budget_samples, meta.tolerance, meta.data_fingerprint) == ("branch", 8192, 0.005, "ab12")
    assert meta.method_record == {"checkpoint_dir": "/x/trunk", "schedule_experiment": "/x/lm-schedule",
                                  "schedule": schedule, **BRANCHING}
    assert meta.recorded()["trunk_batch"] == 8 and meta.recorded()["schedule"] == schedule  # as the readings read
    assert meta.stage_record("search", "/x/lm") == [("search", "/x/lm"), ("schedule", "/x/lm-schedule")]
    meta.write(str(tmp_path))  # written again (a later stage): the record under its key, read back the same
    assert json.loads((tmp_path / META_FILE).read_text())["method_record"]["checkpoint_dir"] == "/x/trunk"
    assert ExperimentMeta.read(str(tmp_path)) == meta


def test_a_later_stage_adds_to_the_record_and_keeps_the_rest():
    meta = ExperimentMeta.from_dict({"name": "lm", "metric": "eval_loss", "mode": "min", "spec": {},
                                     "method": "branch", "method_record": {"checkpoint_dir": "/x/trunk"}})
    later = meta.updated({"stages": [{"name": "schedule", "experiment": "/x/s"}],
                          "method_record": {"schedule_experiment": "/x/s"}})
    assert later.method_record == {"checkpoint_dir": "/x/trunk", "schedule_experiment": "/x/s"}
    assert later.stages == [{"name": "schedule", "experiment": "/x/s"}] and later.method == "branch"


def test_metadata_without_a_format_is_format_1_and_a_scratch_search():
    meta = ExperimentMeta.from_dict({"name": "x", "metric": "accuracy", "mode": "max", "spec": {},
                                     "budget_samples": 7168, "tolerance": 0.01})
    assert (meta.format, meta.method, meta.data_fingerprint, meta.method_record) == (1, "scratch", None, {})


def test_a_new_record_is_this_format(tmp_path):
    meta = ExperimentMeta(name="x", metric="accuracy", mode="max", spec={}, budget_samples=64, data_fingerprint="f")
    meta.write(str(tmp_path))
    written = json.loads((tmp_path / META_FILE).read_text())
    assert written["format"] == FORMAT == 2 and ExperimentMeta.read(str(tmp_path)) == meta


@pytest.mark.parametrize("raw, says", [
    ({"metric": "accuracy", "mode": "max", "spec": {}}, "name missing"),
    ({"name": "x", "metric": "accuracy", "mode": "max"}, "spec missing"),
])
def test_metadata_without_a_required_key_is_an_error_naming_it(tmp_path, raw, says):
    (tmp_path / META_FILE).write_text(json.dumps(raw))
    with pytest.raises(ReportError, match=says):
        ExperimentMeta.read(str(tmp_path))
