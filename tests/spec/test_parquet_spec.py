"""The spec's rules for a streamed Parquet corpus (``data.source: parquet``, issue 58 findings 9 and 19): the files'
subsets it would ignore are refused in one line, and a relative ``data.path`` is the spec file's, stored absolute."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.tune.api import prepare

PARQUET = ["task=causal-lm", "model.config={model_type: gpt2, n_embd: 16, n_layer: 1, n_head: 2, n_positions: 8}",
           "data.source=parquet", "data.max_seq_length=8", "search.metric=eval_loss", "search.mode=min"]


def shards(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in ("a", "z"):
        pq.write_table(pa.table({"input_ids": [[1, 2, 3]] * 4}), folder / f"{name}.parquet")
    return folder


@pytest.mark.parametrize("key", ["holdout_examples", "max_train_examples", "max_eval_examples"])
def test_the_files_subsets_are_refused_with_a_parquet_corpus(tmp_path, key):
    # Before: accepted and ignored (the search trained on every row, evaluated on data.eval_examples).
    with pytest.raises(SpecError) as error:
        load_spec(None, PARQUET + [f"data.path={shards(tmp_path / 'c')}", f"data.{key}=16"])
    assert str(error.value).startswith(f"data.{key}: not applied to a streamed Parquet corpus")
    assert "\n" not in str(error.value)


def test_a_relative_data_path_is_the_spec_files_and_stored_absolute(tmp_path, monkeypatch):
    folder = shards(tmp_path / "project" / "corpus")
    spec_file = tmp_path / "project" / "space.yaml"
    spec_file.write_text("task: causal-lm\ndata: {source: parquet, path: corpus, max_seq_length: 8}\n"
                         "model: {config: {model_type: gpt2, n_embd: 16, n_layer: 1, n_head: 2, n_positions: 8}}\n"
                         "search: {metric: eval_loss, mode: min}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # before: resolved here, "no such folder: corpus"
    spec = load_spec(spec_file, ["data.eval_examples=2", "search.batch_sizes=[2]"])
    assert spec.data.path == str(folder) and prepare(spec).data.train_rows == [4]
    monkeypatch.chdir(tmp_path / "project")
    assert load_spec(None, PARQUET + ["data.path=corpus"]).data.path == str(folder)  # --set: the working folder's
