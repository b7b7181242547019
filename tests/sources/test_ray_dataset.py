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
    (tmp_path / "store" / "datasets" / f"{spec.name}-20261205-000000").mkdir(parents=True)
    with pytest.raises(SpecError, match=r"^train_dataset: .*-20261205-000000 exists already"):
        search_ray_dataset(spec, dataset, NO_OTHERS)
    assert dataset.written == []
