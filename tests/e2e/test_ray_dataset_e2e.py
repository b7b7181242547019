"""A real ``ray.data.Dataset`` (``ray.data.from_items`` of token-id lists) as ``run_search(train_dataset=…)`` on a
local Ray (issue 51): written once as Parquet shards under the storage path by Ray Data's write tasks, never
gathered on the driver (every way of pulling a dataset's rows to the driver raises here), then searched as a
streamed Parquet corpus."""

import os
import sys

import pyarrow.parquet as pq
import pytest

from cbs_ray.records.storage import read_meta
from cbs_ray.spec.load import load_spec

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from write_markov_parquet import write_corpus  # noqa: E402

# ≈ 35 s on 2 cores (two trials): the slow tier.
pytestmark = pytest.mark.slow

LM = ["task=causal-lm", "model.config={model_type: gpt2, n_embd: 32, n_layer: 1, n_head: 2, n_positions: 16}",
      "model.vocab_size=512", "data.max_seq_length=16", "data.eval_examples=32", "search.metric=eval_loss",
      "search.mode=min", "search.batch_sizes=[8, 32]", "training.budget_samples=128",
      "training.eval_every_samples=64", "asha.grace_period_samples=64", "search.num_trials=2",
      "training.micro_batch_size=8"]

DRIVER_PULLS = ("take_all", "take", "take_batch", "to_pandas", "to_arrow_refs", "iter_rows", "iter_batches", "show",
                "count")
"""The Dataset methods that bring rows (or block references) to the driver: none may run. ``materialize`` may, of a
write only (``write_parquet`` materialises its write operator, whose blocks are the write tasks' small results)."""


def test_a_ray_dataset_is_written_as_parquet_and_searched(tmp_path, shared_ray, monkeypatch):
    import ray.data

    from cbs_ray import run_search

    source = tmp_path / "rows"
    write_corpus(source, shards=3, rows=64, length=16, eval_rows=32)  # the markov language's rows
    rows = [{"input_ids": ids} for shard in sorted(source.glob("*.parquet"))
            for ids in pq.read_table(shard).column("input_ids").to_pylist()]
    dataset = ray.data.from_items(rows, override_num_blocks=4)
    for name in DRIVER_PULLS:
        def refused(*args, _name=name, **kwargs):
            raise AssertionError(f"ray.data.Dataset.{_name} ran on the driver")
        monkeypatch.setattr(ray.data.Dataset, name, refused)
    materialize, materialized = ray.data.Dataset.materialize, []

    def writes_only(self):
        materialized.append(type(self._logical_plan.dag).__name__)
        assert materialized[-1] == "Write", f"ray.data.Dataset.materialize of a {materialized[-1]} on the driver"
        return materialize(self)

    monkeypatch.setattr(ray.data.Dataset, "materialize", writes_only)
    spec = load_spec(None, LM + [f"storage_path={tmp_path / 'ray_results'}"])
    result = run_search(spec, train_dataset=dataset, output_dir=str(tmp_path / "out"), verbose=0)
    (folder,) = (tmp_path / "ray_results" / "datasets").iterdir()
    shards = sorted(folder.glob("*.parquet"))
    assert len(shards) >= 2 and sum(pq.read_metadata(s).num_rows for s in shards) == len(rows)
    searched = read_meta(result.experiment_path)["spec"]["data"]
    assert (searched["source"], searched["path"]) == ("parquet", str(folder))  # --resume reads the same folder
    history = result.history
    assert sorted(history.groupby("trial_id")["batch_size"].first()) == [8, 32]
    assert history["eval_loss"].notna().all() and (tmp_path / "out" / "summary.json").is_file()
    assert materialized == ["Write"]  # written once
