"""Every numeric key the adversary of issue 47 found unbounded is refused before Ray, in one line naming the key
(each passed the checks and then hung the plan, ran out of memory or failed after Ray started), and a value at
each bound is accepted."""

import json

import pytest

from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec

MARKOV = ["task=causal-lm", "data.builtin_task=markov", "search.metric=eval_loss", "search.mode=min"]


@pytest.mark.parametrize("override, key", [
    ("search.grid_points=1000000", "search.grid_points"),  # bisect's --dry-run still running at 150 s
    ("search.num_trials=1000000000", "search.num_trials"),
    ("search.num_trials=0", "search.num_trials"),
    ("search.seed=-1", "search.seed"),  # a ValueError after Ray started
    (f"search.seed={2**32}", "search.seed"),
    ("data.markov_seed=-1", "data.markov_seed"),
    ("data.markov_vocab_size=1000000000", "data.markov_vocab_size"),  # MemoryError
    ("data.markov_rank=1000000", "data.markov_rank"),  # 94 s to dry-run
    ("data.markov_zipf_exponent=1e308", "data.markov_zipf_exponent"),
    ("data.markov_zipf_exponent=.inf", "data.markov_zipf_exponent"),
    ("data.markov_coupling=.nan", "data.markov_coupling"),
    ("data.max_seq_length=10000000", "data.max_seq_length"),  # MemoryError
    ("data.builtin_train_examples=1000000000000", "data.builtin_train_examples"),  # MemoryError
    ("data.builtin_eval_examples=1000000000000", "data.builtin_eval_examples"),
    (f"training.budget_samples={2**70}", "training.budget_samples"),
    ("training.budget_samples=-1024", "training.budget_samples"),
    (f"training.eval_every_samples={2**70}", "training.eval_every_samples"),
    (f"asha.grace_period_samples={2**70}", "asha.grace_period_samples"),
    ("ladder.min_warmup_steps=1000000000", "ladder.min_warmup_steps"),
    ("ladder.cap=.inf", "ladder.cap"),
])
def test_an_unbounded_value_is_refused_in_one_line_naming_its_key(override, key):
    extra = MARKOV if override.startswith("data.markov") else []
    with pytest.raises(SpecError) as refused:
        load_spec(None, [*extra, override])
    message = str(refused.value)
    assert message.startswith(f"{key}: ") and len(message.splitlines()) == 1


def test_a_token_budget_over_its_bound_is_refused():
    with pytest.raises(SpecError, match=r"^training.budget_tokens: must be from 1 to"):
        load_spec(None, [*MARKOV, "training.budget_samples=null", f"training.budget_tokens={2**70}"])


@pytest.mark.parametrize("override", [
    "search.grid_points=100", "search.num_trials=10000", f"search.seed={2**32 - 1}", "search.seed=0",
    "ladder.min_warmup_steps=1000000",
])
def test_a_value_at_its_bound_is_accepted(override):
    load_spec(None, [override])


@pytest.mark.parametrize("override", ["data.markov_vocab_size=8192", "data.markov_rank=1024",
                                      "data.markov_zipf_exponent=10", "data.markov_seed=0"])
def test_a_markov_value_at_its_bound_is_accepted(override):
    load_spec(None, [*MARKOV, override])


def test_a_name_is_bounded_in_bytes_not_characters():
    """100 CJK characters are 300 bytes: ENAMETOOLONG after Ray started (issue 47)."""
    with pytest.raises(SpecError, match=r"^name: .*at most 100 bytes in UTF-8"):
        load_spec(None, ["name=" + "名" * 100])
    assert load_spec(None, ["name=" + "名" * 33]).name == "名" * 33  # 99 bytes
    assert load_spec(None, ["name=" + "n" * 100]).name == "n" * 100


def test_a_file_uri_storage_gets_the_free_space_check(tmp_path, monkeypatch):
    """``storage_path=file://…`` skipped the check a plain path gets (accepted on a 6 MB tmpfs)."""
    from cbs_ray.tune import free_space

    assert free_space.free_bytes(f"file://{tmp_path}") == free_space.free_bytes(str(tmp_path))
    from cbs_ray.tune.prepare import check_before_ray

    monkeypatch.setattr(free_space.shutil, "disk_usage", lambda folder: type("U", (), {"free": 6 * 2**20})())
    spec = load_spec(None, [f"storage_path=file://{tmp_path / 'ray'}"])
    with pytest.raises(SpecError, match="^storage_path: .* has 6.0 MB free"):
        check_before_ray(spec, tmp_path / "out")


@pytest.mark.parametrize("tampered", [[], [1, 2], "a spec", 3])
def test_a_tampered_experiment_metadata_that_is_not_a_mapping_is_one_line(tmp_path, tampered):
    from cbs_ray.cli import search_main

    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "cbs_spec.json").write_text(json.dumps(tampered))
    assert search_main(["--resume", str(tmp_path / "exp")]) == 2


@pytest.mark.parametrize("spec", [[], [1, 2], "a spec", None])
def test_experiment_metadata_whose_spec_is_not_a_mapping_is_one_line(tmp_path, spec, capsys):
    """A tampered ``spec`` in cbs_spec.json ended in AttributeError (exit 1): the metadata is refused as damaged
    (``--resume`` exits 2 on it), and ``cbs-ray report`` reports from the trials' results as it does without
    metadata it can read."""
    import shutil
    from pathlib import Path

    from cbs_ray.cli import report_main
    from cbs_ray.records.meta import ExperimentMeta
    from cbs_ray.records.storage import ReportError

    golden = Path(__file__).resolve().parents[1] / "golden" / "experiments" / "golden-scratch-20260101-000000"
    shutil.copytree(golden, tmp_path / "exp")
    meta = json.loads((tmp_path / "exp" / "cbs_spec.json").read_text())
    (tmp_path / "exp" / "cbs_spec.json").write_text(json.dumps({**meta, "spec": spec}))
    with pytest.raises(ReportError, match="spec is not a mapping"):
        ExperimentMeta.read(str(tmp_path / "exp"))
    assert report_main([str(tmp_path / "exp"), "--output", str(tmp_path / "out")]) == 0
    assert "Error" not in capsys.readouterr().err
