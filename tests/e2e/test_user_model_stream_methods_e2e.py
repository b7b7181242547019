"""Branch mode and the ladder on a pre-training user's own ``nn.Module`` LM (tests/helpers/tiny_lm.py, no Hugging
Face) and their Parquet shards: ``run_search(spec, model_init=...)`` with ``data.source: parquet`` on a real local
Ray, each trial a Ray Train run of 2 gloo workers reading the corpus through Ray Data. The from-scratch search on the
same objects, DDP and FSDP: test_user_model_stream_e2e.py, whose corpus and settings these share.

Each case is the smallest that takes the method's path: branch mode a trunk at B=8 and 2 branches (B=16 and 32 from
one checkpoint), the ladder 4 batches on one seed to half of D = 1024 samples, read at 3 rungs. Branch mode under
DDP and the ladder under FSDP only: all four (method, parallelism) pairs passed, but took 21 min on 2 shared cores
(3 to 7 min each: every trial starts 2 Ray Train workers and a Ray Data read), over what CI has left."""

import json
import math
from pathlib import Path

import pytest
import torch
from test_user_model_stream_e2e import write_corpus

from cbs_ray.records.storage import read_meta
from cbs_ray.spec.load import load_spec
from helpers import tiny_lm

pytestmark = pytest.mark.slow

COMMON = ["task=causal-lm", "data.source=parquet", "data.max_seq_length=16", "data.eval_examples=64",
          "search.metric=eval_loss", "search.mode=min", "search.repeats=1", "training.base_lr=0.01",
          "resources.workers_per_trial=2", "resources.cpus_per_worker=1", "training.micro_batch_size=4"]
METHODS = {
    "branch": ["search.method=branch", "search.batch_sizes=[8, 16, 32]", "training.budget_samples=256",
               "training.eval_every_samples=64", "asha.grace_period_samples=64", "branch.trunk_batch_size=8",
               "branch.checkpoints=[0.5]", "branch.window=0.25", "branch.window_min_steps=2"],
    "ladder": ["search.method=ladder", "search.batch_sizes=[8, 16, 32, 64]", "training.budget_samples=1024",
               "training.eval_every_samples=128", "asha.grace_period_samples=128", "ladder.fraction=0.5",
               "ladder.seeds=1", "ladder.first_rung=0.25", "ladder.min_steps=4", "ladder.cap=2"],
}
USERS_PARAMETERS = {"embed.weight", "blocks.0.up.weight", "head.weight"}


@pytest.mark.parametrize("method, parallelism", [("branch", "ddp"), ("ladder", "fsdp")])
def test_every_method_trains_the_users_own_module_on_its_corpus(tmp_path, shared_ray, method, parallelism):
    from ray import cloudpickle

    from cbs_ray import run_search

    cloudpickle.register_pickle_by_value(tiny_lm)  # Ray's workers need not import the tests' helpers
    corpus = tmp_path / "corpus"
    write_corpus(corpus, shards=2, rows=256, length=16, eval_rows=64)
    spec = load_spec(None, COMMON + METHODS[method] + [
        f"data.path={corpus}", f"training.parallelism={parallelism}", f"storage_path={tmp_path / 'ray_results'}"])
    result = run_search(spec, model_init=tiny_lm.tiny_lm, output_dir=str(tmp_path / "out"), verbose=0)

    meta = read_meta(result.experiment_path)
    assert meta["method"] == method and meta["user_objects"]["model_init"].endswith("tiny_lm")
    assert meta["user_objects"]["train_dataset"] == "data.path: 512 rows streamed" and meta["data_fingerprint"]
    history = result.history
    assert (history["eval_loss"] < math.log(tiny_lm.VOCAB)).all()  # below uniform guessing: it trained
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["method"] == method and summary["decision"]["for_budget_samples"] == spec.training.budget_samples
    if method == "branch":
        assert set(history["role"]) >= {"trunk", "branch"}
        assert set(history.loc[history["role"] == "branch", "batch_size"]) == {16, 32}
        state = torch.load(next(Path(tmp_path / "ray_results").rglob("trunk_checkpoints/**/state.pt")),
                           weights_only=True)
        assert USERS_PARAMETERS <= set(state["model"]) and state["optimizer"]["state"]  # the user's model, its Adam
        assert summary["batch_size_schedule"]
    else:
        assert set(history["batch_size"]) == {8, 16, 32, 64}
        assert summary["ladder"]["rungs"]
        assert (result.answer is None) == (summary["prediction"]["batch_size"] is None)
