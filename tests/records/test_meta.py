"""ExperimentMeta: the keys of cbs_spec.json defined once, format 1 read as such, the round trip exact."""

import json

import pytest

from cbs_ray.records.meta import FORMAT, ExperimentMeta
from cbs_ray.records.storage import META_FILE, ReportError

BRANCHING = {"trunk_batch": 8, "checkpoints": [1024, 2048], "window_samples": 1024, "branch_batches": [16, 32],
             "alphas": [0.5, 1.0], "trunk_alpha": 0.5, "warmup_fraction": 0.05, "trunk_peak_lr": 0.002}


def test_a_branch_experiments_resolved_section_sits_beside_the_fields_and_round_trips():
    raw = {"name": "lm", "method": "branch", "metric": "eval_loss", "mode": "min", "spec": {"name": "lm"},
           "budget_samples": 8192, "tolerance": 0.005, "tokens_per_sample": None, "checkpoint_dir": "/x/trunk",
           "format": FORMAT, "data_fingerprint": "ab12", **BRANCHING}
    meta = ExperimentMeta.from_dict(raw)
    assert (meta.method, meta.budget_samples, meta.checkpoint_dir, meta.branching) == ("branch", 8192, "/x/trunk",
                                                                                     BRANCHING)
    assert meta.to_dict() == {k: v for k, v in raw.items() if v is not None}  # None fields are left out


def test_metadata_without_a_format_is_format_1_and_a_scratch_search():
    meta = ExperimentMeta.from_dict({"name": "x", "metric": "accuracy", "mode": "max", "spec": {},
                                     "budget_samples": 7168, "tolerance": 0.01})
    assert (meta.format, meta.method, meta.data_fingerprint, meta.branching) == (1, "scratch", None, {})


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
