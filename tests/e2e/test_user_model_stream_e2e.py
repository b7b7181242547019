"""A pre-training user's own ``nn.Module`` LM (no Hugging Face: tests/helpers/tiny_lm.py) on their Parquet shards,
through ``run_search(spec, model_init=...)`` with ``data.source: parquet`` on a real local Ray: each trial a Ray
Train run of 2 gloo workers (DDP, then FSDP sharding its block), reading the corpus through Ray Data; and the same
rows as in-memory datasets under FSDP. The trials
train the user's model (its parameter names in the checkpoints), and the answer's LR is tuned on it. One batch size,
16 = 4 micro × 2 accumulated × 2 workers: a trial's start-up (a TorchTrainer of 2 workers) is most of each case's
time, and B=16 takes the path B=8 (no accumulation) would, and accumulation's besides. The other
methods take the same objects path (``check_streamed_objects``, ``StreamedObjects``): their plans on the stream are
tests/sources/test_user_stream.py's."""

import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

from cbs_ray.records.storage import read_meta
from cbs_ray.spec.load import load_spec
from helpers import tiny_lm

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from write_markov_parquet import write_corpus  # noqa: E402  (the shipped script writes the shards)

# ≈ 1 min each on 2 shared cores (a trial of 2 workers): the slow tier.
pytestmark = pytest.mark.slow

SEARCH = ["task=causal-lm", "data.source=parquet", "data.max_seq_length=16", "data.eval_examples=64",
          "search.metric=eval_loss", "search.mode=min", "search.batch_sizes=[16]", "search.strategy=grid",
          "search.grid_points=1", "search.early_stopping=false", "search.repeats=1", "training.base_lr=0.01",
          "training.budget_samples=256", "training.eval_every_samples=128", "asha.grace_period_samples=128",
          "resources.workers_per_trial=2", "resources.cpus_per_worker=1", "training.micro_batch_size=4"]


class Rows(torch.utils.data.Dataset):
    """Shards' rows in memory, as a pipeline holds them: ``{"input_ids", "labels"}`` items."""

    def __init__(self, shards):
        import pyarrow.parquet as pq

        self.rows = torch.tensor([ids for shard in shards for ids in pq.read_table(shard).column("input_ids").to_pylist()])

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


@pytest.mark.parametrize("parallelism, streamed", [("ddp", True), ("fsdp", True), ("fsdp", False)])
def test_the_users_own_module_trains_on_its_corpus_under_two_workers(tmp_path, shared_ray, parallelism, streamed):
    from ray import cloudpickle

    from cbs_ray import run_search

    cloudpickle.register_pickle_by_value(tiny_lm)  # Ray's workers need not import the tests' helpers
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    corpus = tmp_path / "corpus"
    write_corpus(corpus, shards=2, rows=256, length=16, eval_rows=64)
    data = [f"data.path={corpus}"] if streamed else []  # in memory: the spec's data section left out
    spec = load_spec(None, [a for a in SEARCH if streamed or not a.startswith("data.")] + data + [
        f"training.parallelism={parallelism}", f"storage_path={tmp_path / 'ray_results'}"])
    objects = {} if streamed else {"train_dataset": Rows(sorted(corpus.glob("train-*.parquet"))),
                                   "eval_dataset": Rows([corpus / "zz-eval.parquet"])}
    result = run_search(spec, model_init=tiny_lm.tiny_lm, output_dir=str(tmp_path / "out"), verbose=0, **objects)

    meta = read_meta(result.experiment_path)
    assert meta["user_objects"]["model_init"].endswith("tiny_lm")
    assert meta["user_objects"]["train_dataset"] == ("data.path: 512 rows streamed" if streamed else "Rows of 512 items")
    assert meta["budget_samples"] == 256 and bool(meta.get("data_fingerprint")) == streamed
    history = result.history
    assert set(history["batch_size"]) == {16} and set(history["accumulation"]) == {2}
    assert (history["eval_loss"] < math.log(tiny_lm.VOCAB)).all()  # below uniform guessing: it trained
    state = torch.load(next(Path(tmp_path / "ray_results").rglob("state.pt")), weights_only=True)
    assert {"embed.weight", "blocks.0.up.weight", "head.weight"} <= set(state["model"])  # the user's model
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    tuned = {row["batch_size"]: row["peak_lr"] for row in summary["per_batch"]}
    assert set(tuned) == {16} and all(lr > 0 for lr in tuned.values())  # the batch's LR, on the user's model
