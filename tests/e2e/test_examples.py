"""The objects path end to end on a real local Ray: both ``examples/`` through ``run_search(spec, model_init=…,
…)``, in-process and on 2 gloo workers, and an objects experiment that resumes in Python but not from the
command line (bad input and the loop on the user's objects are in tests/sources/test_user_objects.py)."""

from pathlib import Path

import pytest

from cbs_ray.records.storage import read_meta
from cbs_ray.tune.api import resume_search, run_search
from helpers.examples import load_example

TINY = ["search.batch_sizes=[16, 32]", "training.budget_samples=1024", "training.eval_every_samples=512",
        "asha.grace_period_samples=512"]


def _search(name: str, root: Path, workers: int):
    """In-process: 3 trials (one batch size tried twice); on 2 gloo workers one trial per batch size, since
    each TorchTrainer trial costs ~15 s of start-up here."""
    example = load_example(name)
    spec = example.search_spec(TINY + [f"search.num_trials={_trials(workers)}", f"resources.workers_per_trial={workers}",
                                       f"storage_path={root / 'rr'}", f"output_dir={root / 'out'}"])
    objects = example.objects(train_examples=2048, eval_examples=512)
    return run_search(spec, verbose=0, **objects), objects


def _trials(workers: int) -> int:
    return 3 if workers == 1 else 2


def _check_search(result, workers: int, metric_columns=("accuracy",)) -> None:
    history = result.history
    assert history["trial_id"].nunique() == _trials(workers) and set(history["workers"]) == {workers}
    assert set(history["batch_size"]) == {16, 32} and history["samples_seen"].max() == 1024
    for column in ("eval_loss", *metric_columns):
        assert history[column].notna().all(), column
    assert (history["eval_examples"] == 512).all()
    assert result.critical_batch in (16, 32)
    assert (result.output_dir / "report.html").is_file()
    meta = read_meta(result.experiment_path)
    assert meta["user_objects"]["train_dataset"].endswith("of 2048 items")


@pytest.fixture(scope="module")
def plain_in_process(tmp_path_factory, shared_ray):
    return _search("plain_torch", tmp_path_factory.mktemp("plain1"), workers=1)


def test_plain_torch_example_in_process_trials(plain_in_process):
    result, _ = plain_in_process
    _check_search(result, 1, ("accuracy", "worst_class_recall"))
    # One worker, micro-batches of 32 at most: B=32 has no accumulation, so no noise scale; B=16 neither.
    assert set(result.history["accumulation"]) == {1}


def test_an_objects_experiment_resumes_in_python_and_not_from_the_command_line(plain_in_process, capsys):
    from cbs_ray.cli import search_main

    result, objects = plain_in_process
    resumed = resume_search(result.experiment_path, verbose=0, output_dir=str(result.output_dir.parent / "resumed"),
                            **objects)
    assert sorted(resumed.trials["trial_id"]) == sorted(result.trials["trial_id"])  # finished: kept as they were
    assert resumed.critical_batch == result.critical_batch
    capsys.readouterr()
    assert search_main(["--resume", result.experiment_path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was run with Python objects" in err and "cannot rebuild" in err


@pytest.mark.slow  # ≈ 70 s on 2 cores: CI runs it in its `pytest -m slow` step, beside plain pytest (issue 25)
@pytest.mark.multiproc
def test_plain_torch_example_on_two_gloo_workers(tmp_path, shared_ray):
    result, _ = _search("plain_torch", tmp_path, workers=2)
    _check_search(result, 2, ("accuracy", "worst_class_recall"))
    # Each worker's gradient against the all-reduced one (DDP's hook): the noise scale on any model.
    assert (result.history["b_small"] == result.history["batch_size"] // 2).all()


def test_hf_pipeline_example_in_process_trials(tmp_path, shared_ray):
    result, _ = _search("hf_pipeline", tmp_path, workers=1)
    _check_search(result, 1)


@pytest.mark.slow  # ≈ 70 s on 2 cores: CI runs it in its `pytest -m slow` step, beside plain pytest (issue 25)
@pytest.mark.multiproc
def test_hf_pipeline_example_on_two_gloo_workers(tmp_path, shared_ray):
    result, _ = _search("hf_pipeline", tmp_path, workers=2)
    _check_search(result, 2)
