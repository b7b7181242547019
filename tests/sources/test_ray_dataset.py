"""A ``ray.data.Dataset`` as ``run_search(train_dataset=…)`` (``sources.ray_dataset``, issue 51), without Ray: a
stand-in with Ray Data's class name and module whose ``write_parquet`` writes the markov corpus's shards. The bad
input is one line each, before anything is written; the search then reads the written folder as any Parquet corpus.
The real ``ray.data.from_items`` dataset searched end to end is in tests/e2e/test_ray_dataset_e2e.py."""

import os
import sys
from pathlib import Path

import pytest

from cbs_ray.data.parquet import StreamedData
from cbs_ray.sources.ray_dataset import is_ray_dataset, search_ray_dataset
from cbs_ray.sources.user_objects import user_objects
from cbs_ray.sources.user_stream import StreamedObjects
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.tune.api import prepare

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from write_markov_parquet import write_corpus  # noqa: E402  (the shipped script writes the shards)

LM = ["task=causal-lm", "model.config={model_type: gpt2, n_embd: 32, n_layer: 1, n_head: 2, n_positions: 16}",
      "model.vocab_size=512", "data.max_seq_length=16", "data.eval_examples=32", "search.metric=eval_loss",
      "search.mode=min", "search.batch_sizes=[8, 32]", "training.budget_samples=128",
      "training.eval_every_samples=64", "asha.grace_period_samples=64", "search.num_trials=2"]
NO_OTHERS = dict(eval_dataset=None, data_collator=None)


class Dataset:
    """ray.data.Dataset's name and module; ``write_parquet`` writes ``shards`` markov shards (and the eval shard)."""

    __module__ = "ray.data.dataset"

    def __init__(self, shards: int = 2):
        self.shards, self.written = shards, []

    def write_parquet(self, folder: str) -> None:
        self.written.append(folder)
        Path(folder).mkdir(parents=True, exist_ok=True)  # as Ray Data: into the folder, made where missing
        write_corpus(Path(folder), shards=self.shards, rows=64, length=16, eval_rows=32)


def test_a_ray_dataset_is_written_under_the_storage_path_and_searched_as_parquet(tmp_path):
    dataset = Dataset()
    assert is_ray_dataset(dataset) and not is_ray_dataset([1, 2])
    spec = load_spec(None, LM + [f"storage_path={tmp_path}"])
    searched = search_ray_dataset(spec, dataset, NO_OTHERS)
    (folder,) = dataset.written
    assert Path(folder).parent == tmp_path / "datasets" and Path(folder).name.startswith(spec.name)
    assert (searched.data.source, searched.data.path) == ("parquet", folder)
    assert spec.data.source == "builtin"  # the caller's spec is left as it was
    data = prepare(searched).data
    assert isinstance(data, StreamedData) and data.train_examples == 2 * 64 and data.eval_ids.shape == (32, 16)


@pytest.mark.parametrize("overrides, others, says", [
    ([], {"data_collator": len}, r"^data_collator: not taken with a ray.data.Dataset train_dataset"),
    ([], {"eval_dataset": [1]}, r"^eval_dataset: not taken with a ray.data.Dataset"),
    (["storage_path=s3://bucket/runs"], {}, r"^storage_path: a ray.data.Dataset is written as Parquet under a local"),
])
def test_bad_input_with_a_ray_dataset_is_one_line_before_anything_is_written(tmp_path, overrides, others, says):
    dataset = Dataset()
    spec = load_spec(None, LM + [f"storage_path={tmp_path}"] + overrides)
    with pytest.raises(SpecError, match=says):
        search_ray_dataset(spec, dataset, {**NO_OTHERS, **others})
    assert dataset.written == []


def test_model_init_whose_forward_does_not_take_the_corpus_is_refused_before_anything_is_written(tmp_path):
    from helpers.tiny_lm import ForwardX, tiny_lm

    dataset = Dataset()
    spec = load_spec(None, [a for a in LM if not a.startswith("model.")] + [f"storage_path={tmp_path}"])
    with pytest.raises(SpecError, match=r"^model_init: ForwardX.forward\(x\) requires 'x', which the corpus"):
        search_ray_dataset(spec, dataset, NO_OTHERS, model_init=ForwardX)
    assert dataset.written == []
    searched = search_ray_dataset(spec, dataset, NO_OTHERS, model_init=tiny_lm)  # the user's model: its shards
    assert searched.data.source == "parquet" and len(dataset.written) == 1
    objects = prepare(searched, user_objects(streamed=True, model_init=tiny_lm)).data  # then streamed to it
    assert isinstance(objects, StreamedObjects) and objects.train_examples == 2 * 64


def test_a_ray_dataset_for_another_task_or_a_dry_run_is_refused(tmp_path):
    classify = load_spec(None, [f"storage_path={tmp_path}"])  # the default: sequence classification
    with pytest.raises(SpecError, match=r"^train_dataset: a ray.data.Dataset is searched as a causal LM's corpus"):
        search_ray_dataset(classify, Dataset(), NO_OTHERS)
    with pytest.raises(SpecError, match=r"^train_dataset: .*written as Parquet shards when the search starts"):
        search_ray_dataset(load_spec(None, LM + [f"storage_path={tmp_path}"]), Dataset(), NO_OTHERS, dry_run=True)


def test_a_ray_dataset_written_as_one_shard_is_refused(tmp_path):
    class OneFile(Dataset):
        def write_parquet(self, folder: str) -> None:
            super().write_parquet(folder)
            for extra in sorted(Path(folder).glob("*.parquet"))[1:]:
                extra.unlink()

    with pytest.raises(SpecError, match=r"^train_dataset: written as 1 Parquet shard .*repartition"):
        search_ray_dataset(load_spec(None, LM + [f"storage_path={tmp_path}"]), OneFile(), NO_OTHERS)
    assert list((tmp_path / "datasets").iterdir()) == []  # issue 58 finding 6: before, the copy stayed


class RayTaskError(Exception):
    """Ray's wrapping of a write task's error: hundreds of lines, the task's own error kept as ``.cause``."""

    def __init__(self, cause):
        super().__init__("\n".join(["\x1b[36mray::Write()\x1b[39m"] + ["  File ..., line 1"] * 300 + [repr(cause)]))
        self.cause = cause


def test_a_write_that_fills_the_storage_is_one_line_and_removes_its_partial_copy(tmp_path):
    class Full(Dataset):
        def write_parquet(self, folder: str) -> None:
            super().write_parquet(folder)  # some shards written, then the disk is full
            raise RayTaskError(OSError(28, "No space left on device"))

    with pytest.raises(SpecError) as error:
        search_ray_dataset(load_spec(None, LM + [f"storage_path={tmp_path}"]), Full(), NO_OTHERS)
    assert str(error.value).startswith("storage_path: writing the ray.data.Dataset as Parquet into ")
    assert "(No space left on device); the partial copy is removed" in str(error.value)
    assert "\n" not in str(error.value) and list((tmp_path / "datasets").iterdir()) == []


def test_a_dataset_larger_than_the_free_space_is_refused_before_it_is_written(tmp_path):
    class Huge(Dataset):
        class _logical_plan:  # Ray Data's plan, whose metadata knows the size without computing anything
            class dag:
                @staticmethod
                def infer_metadata():
                    return type("Meta", (), {"size_bytes": 10 ** 18})()

    dataset = Huge()
    with pytest.raises(SpecError, match=r"^storage_path: the ray.data.Dataset takes about 1000000000000\.0 MB in "
                                        r"memory and .* MB free"):
        search_ray_dataset(load_spec(None, LM + [f"storage_path={tmp_path}"]), dataset, NO_OTHERS)
    assert dataset.written == [] and list((tmp_path / "datasets").iterdir()) == []


def test_a_dataset_refused_by_the_drivers_checks_leaves_no_copy(tmp_path):
    from cbs_ray import run_search

    spec = load_spec(None, [a for a in LM if not a.startswith("model.vocab_size")] + ["model.vocab_size=16",
                                                                                      f"storage_path={tmp_path}"])
    with pytest.raises(SpecError, match="holds token id .*, not below the vocabulary's 16"):
        run_search(spec, train_dataset=Dataset(), output_dir=str(tmp_path / "out"))
    assert list((tmp_path / "datasets").iterdir()) == []


def test_a_ray_dataset_is_never_written_through_a_link_nor_into_a_folder_that_exists(tmp_path, monkeypatch):
    spec = load_spec(None, LM + [f"storage_path={tmp_path / 'store'}"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "datasets").symlink_to(elsewhere)
    dataset = Dataset()
    with pytest.raises(SpecError, match=r"^storage_path: .*datasets is a symbolic link"):
        search_ray_dataset(spec, dataset, NO_OTHERS)
    assert dataset.written == [] and list(elsewhere.iterdir()) == []
    (tmp_path / "store" / "datasets").unlink()
    monkeypatch.setattr("cbs_ray.sources.ray_dataset.time.strftime", lambda _: "20261205-000000")
    taken = tmp_path / "store" / "datasets" / f"{spec.name}-20261205-000000"
    taken.mkdir(parents=True)
    (taken / "theirs.parquet").write_text("another search's")
    searched = search_ray_dataset(spec, dataset, NO_OTHERS)  # issue 58: refused; now -2, as experiment folders
    assert dataset.written == [str(taken) + "-2"] == [searched.data.path]
    assert [p.name for p in taken.iterdir()] == ["theirs.parquet"]  # the folder that existed is left as it was


@pytest.mark.parametrize("plant, says", [
    ("file", r"^storage_path: .*datasets is not a folder"),
    ("dangling", r"^storage_path: .*datasets is a symbolic link"),
])
def test_a_datasets_path_that_is_no_folder_is_named_as_such(tmp_path, plant, says):
    """Issue 58 finding 17: a file or a dangling link at <storage>/datasets said "exists already; start the search
    again in a second", which no second would change."""
    spec = load_spec(None, LM + [f"storage_path={tmp_path}"])
    if plant == "file":
        (tmp_path / "datasets").write_text("")
    else:
        (tmp_path / "datasets").symlink_to(tmp_path / "gone")
    dataset = Dataset()
    with pytest.raises(SpecError, match=says) as error:
        search_ray_dataset(spec, dataset, NO_OTHERS)
    assert "start the search again" not in str(error.value) and dataset.written == []
    assert not (tmp_path / "gone").exists()
