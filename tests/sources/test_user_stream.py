"""The user's own model on a streamed Parquet corpus (``sources.user_stream``, ``object_checks.check_streamed_objects``),
without Ray: ``run_search(spec, model_init=...)`` with ``data.source: parquet`` checks the model against the corpus's
columns in the dry run (one line naming the mismatch), hands the trials the spec path's rows as the model takes them,
and every method plans on it. The search on a real Ray, DDP and FSDP: tests/e2e/test_user_model_stream_e2e.py."""

import math
import os
import sys

import numpy as np
import pytest
import torch

from cbs_ray.sources.object_checks import corpus_mismatch
from cbs_ray.sources.streamed import StreamedSource
from cbs_ray.sources.user_objects import user_objects
from cbs_ray.sources.user_stream import StreamedObjects
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.tune.api import prepare, run_search
from helpers.tiny_lm import VOCAB, ForwardX, TinyLM, tiny_lm

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from write_markov_parquet import write_corpus  # noqa: E402  (the shipped script writes the shards)

ROWS, SHARDS, LENGTH = 64, 3, 16


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus")
    write_corpus(out, shards=SHARDS, rows=ROWS, length=LENGTH, eval_rows=32)
    return out


def spec_args(corpus, tmp_path) -> list[str]:
    return ["task=causal-lm", "data.source=parquet", f"data.path={corpus}", f"data.max_seq_length={LENGTH}",
            "data.eval_examples=32", "search.metric=eval_loss", "search.mode=min", "search.batch_sizes=[8, 16]",
            "training.budget_samples=128", "training.eval_every_samples=64", "asha.grace_period_samples=64",
            "training.base_lr=0.01", f"storage_path={tmp_path / 'ray_results'}"]


@pytest.fixture
def no_ray(monkeypatch):
    """Fails the test if the search gets as far as starting Ray."""
    import ray

    from cbs_ray.tune import driver

    def refuse(*_, **__):
        raise AssertionError("Ray would start")

    monkeypatch.setattr(driver, "ray_session", refuse)
    yield
    assert not ray.is_initialized()


def test_a_forward_that_does_not_take_the_corpus_columns_fails_the_dry_run_in_one_line(corpus, tmp_path, no_ray):
    spec = load_spec(None, spec_args(corpus, tmp_path))
    with pytest.raises(SpecError) as raised:
        run_search(spec, model_init=ForwardX, output_dir=str(tmp_path / "out"), dry_run=True)
    assert str(raised.value) == (
        "model_init: ForwardX.forward(x) requires 'x', which the corpus does not give: the Parquet shards give "
        "input_ids, attention_mask and labels (the input_ids again, for the loss); name forward's parameters after "
        "them, e.g. forward(input_ids, labels=None)")
    assert not (tmp_path / "ray_results").exists() and not (tmp_path / "out").exists()


class _Signature(torch.nn.Module):
    """A module whose forward has the signature under test (the method is set per case)."""


def _with_forward(source: str) -> torch.nn.Module:
    namespace: dict = {}
    exec(f"def forward(self, {source}): pass", namespace)
    kind = type("Net", (_Signature,), {"forward": namespace["forward"]})
    return kind()


@pytest.mark.parametrize("signature, says", [
    ("input_ids, labels=None", None),
    ("input_ids, attention_mask=None, labels=None", None),
    ("input_ids=None, labels=None, **kwargs", None),
    ("**batch", None),
    ("x", "Net.forward(x) requires 'x', which the corpus does not give"),
    ("idx, targets=None", "Net.forward(idx, targets=None) requires 'idx', which the corpus does not give"),
    ("input_ids", "Net.forward(input_ids) does not take labels (the targets its loss is the mean over)"),
    ("tokens=None, labels=None", "Net.forward(tokens=None, labels=None) does not take input_ids (the tokens)"),
    ("input_ids, labels, /", "Net.forward(input_ids, labels, /) requires 'input_ids'"),  # model(**batch) cannot
])
def test_the_mismatch_names_the_parameter_or_the_column(signature, says):
    found = corpus_mismatch(_with_forward(signature))
    assert (found is None) if says is None else found.startswith(says), found


def test_the_trials_get_the_spec_paths_rows_as_the_model_takes_them(corpus, tmp_path):
    prepared = prepare(load_spec(None, spec_args(corpus, tmp_path)), user_objects(streamed=True, model_init=tiny_lm))
    objects = prepared.data
    assert isinstance(objects, StreamedObjects) and prepared.on_objects and prepared.model_config is None
    assert objects.train_examples == SHARDS * ROWS and prepared.budget_samples == 128
    assert len(objects.eval_dataset) == 32 and objects.model_class == "TinyLM"
    same = dict(seed=3, rank=1, workers=2, micro=4, drawn=0, whole=16, use_ray=False)
    ours = objects.micro_batches(**same)
    theirs = StreamedSource(objects.corpus, "causal-lm").micro_batches(**same)
    for _ in range(3):
        batch, (ids, _, _) = next(ours), next(theirs)
        assert set(batch) == {"input_ids", "labels"}  # TinyLM.forward takes no attention_mask: left out
        assert torch.equal(batch["input_ids"], ids) and torch.equal(batch["labels"], ids)  # full rows: no -100
        assert objects.items_in(batch) == 4 * (LENGTH - 1)  # the targets after the shift, as the spec path counts


def test_a_short_row_is_padded_masked_and_left_out_of_the_targets(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "short"
    folder.mkdir()
    for name, rows in (("a.parquet", [[5, 6, 7]] * 16), ("z.parquet", [[1, 2, 3, 4]] * 4)):
        pq.write_table(pa.table({"input_ids": rows}), folder / name)
    args = [a for a in spec_args(folder, tmp_path) if not a.startswith("data.eval_examples")]
    objects = prepare(load_spec(None, args + ["data.max_seq_length=5"]),
                      user_objects(streamed=True, model_init=tiny_lm)).data
    batch = objects.first_batch(2, 16)
    assert batch["input_ids"][0].tolist() == [5, 6, 7, 0, 0] and batch["labels"][0].tolist() == [5, 6, 7, -100, -100]
    assert objects.items_in(batch) == 2 * 2  # tokens 6 and 7 of each row are targets
    assert objects.eval_dataset[0]["labels"].tolist() == [1, 2, 3, 4, -100]


def test_the_loop_trains_the_users_model_on_the_stream(corpus, tmp_path):
    from cbs_ray.train.config import TrialConfig
    from cbs_ray.train.loop import train_loop
    from helpers.training import RecordingSession

    spec = load_spec(None, spec_args(corpus, tmp_path))
    prepared = prepare(spec, user_objects(streamed=True, model_init=tiny_lm))
    cfg = TrialConfig.from_tune(spec, {"log2_batch": 3, "alpha": 1.0, "warmup_fraction": 0.0},
                                budget_samples=prepared.budget_samples, model_config=prepared.model_config)
    session = RecordingSession()
    train_loop(cfg, prepared.data, session)
    assert [r["samples_seen"] for r in session.reports] == [64, 128]
    losses = [r["eval_loss"] for r in session.reports]
    assert losses[1] < losses[0] < math.log(VOCAB)  # below uniform guessing, and still falling
    assert "embed.weight" in session.weights[-1] and "blocks.0.up.weight" in session.weights[-1]


@pytest.mark.parametrize("method", [
    ["search.method=branch", "branch.trunk_batch_size=8", "branch.checkpoints=[0.5]", "branch.window=0.25"],
    ["search.method=ladder", "search.batch_sizes=[8, 16, 32, 64]", "training.budget_samples=2048",
     "training.eval_every_samples=1024", "asha.grace_period_samples=1024", "ladder.fraction=0.5", "ladder.seeds=1",
     "ladder.first_rung=0.0625", "ladder.min_steps=8"],
    ["training.parallelism=fsdp", "resources.workers_per_trial=2"],
])
def test_every_method_plans_on_the_users_model_and_the_stream(corpus, tmp_path, no_ray, method, monkeypatch):
    """The dry run of branch mode, the ladder and FSDP on the objects path: each checks the same
    ``StreamedObjects`` (branch mode runs a micro-batch of the stream through two fresh models) and plans."""
    checked = []
    original = StreamedObjects.first_batch

    def recorded(self, size, whole):
        checked.append(size)
        return original(self, size, whole)

    monkeypatch.setattr(StreamedObjects, "first_batch", recorded)
    spec = load_spec(None, spec_args(corpus, tmp_path) + method)
    lines = run_search(spec, model_init=tiny_lm, output_dir=str(tmp_path / "out"), dry_run=True)
    assert lines and lines[0].startswith("tiny-lm")  # named after the user's model's class
    assert len(checked) == (2 if "search.method=branch" in method else 1)  # branch mode: the architecture too


def test_the_micro_batch_probe_trains_on_full_rows_as_the_model_takes_them(corpus, tmp_path):
    objects = prepare(load_spec(None, spec_args(corpus, tmp_path)), user_objects(streamed=True, model_init=tiny_lm)).data
    model = TinyLM()
    key, length, batch_of = objects.probe_workload(model, "cpu")
    assert length == LENGTH and key["name"].endswith(f"TinyLM:{sum(p.numel() for p in model.parameters())}-params")
    batch = batch_of(3)
    assert set(batch) == {"input_ids", "labels"} and batch["input_ids"].shape == (3, LENGTH)
    assert model(**batch)["loss"].item() > 0


def test_a_hugging_face_model_with_too_small_a_vocabulary_is_one_line(corpus, tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    def small_gpt2():
        return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=LENGTH, n_embd=16, n_layer=1, n_head=2))

    with pytest.raises(SpecError, match=r"^model_init: the model's vocabulary: .*token id \d+, not below the vocabulary's 64; "):
        prepare(load_spec(None, spec_args(corpus, tmp_path)), user_objects(streamed=True, model_init=small_gpt2))


def test_a_hugging_face_model_trains_on_the_stream_with_its_attention_mask(corpus, tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    def gpt2():
        return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=16, n_layer=1, n_head=2))

    objects = prepare(load_spec(None, spec_args(corpus, tmp_path)), user_objects(streamed=True, model_init=gpt2)).data
    assert {"input_ids", "attention_mask", "labels"} <= set(objects.first_batch(2, 16))


@pytest.mark.parametrize("given, overrides, says", [
    ({"train_dataset": [1]}, [], r"^train_dataset: not taken with data.source: parquet \(the corpus is the data"),
    ({"data_collator": len}, [], r"^data_collator: not taken with data.source: parquet"),
    ({"compute_metrics": len}, ["model.vocab_size=100"],
     r"^model_init: the spec names a model too \(model.vocab_size=100\); with model_init the spec's model section"),
    ({}, ["training.label_smoothing=0.1"], r"^training.label_smoothing: the model from model_init computes its own"),
    ({}, ["search.batch_sizes=[8, 256]", "training.budget_samples=512", "training.eval_every_samples=256",
          "asha.grace_period_samples=256"], r"^search.batch_sizes: largest batch 256 exceeds the 192 training rows"),
])
def test_bad_input_on_the_stream_is_one_line(corpus, tmp_path, given, overrides, says):
    spec = load_spec(None, spec_args(corpus, tmp_path) + overrides)
    with pytest.raises(SpecError, match=says):
        prepare(spec, user_objects(streamed=True, model_init=tiny_lm, **given))


def test_eval_rows_evaluate_as_the_model_scores_them(corpus, tmp_path):
    """``eval_loss`` over the stream's evaluation rows is the model's own mean loss over their targets."""
    from cbs_ray.sources.user_objects import evaluate
    from cbs_ray.train.sessions import LocalSession

    spec = load_spec(None, spec_args(corpus, tmp_path))
    prepared = prepare(spec, user_objects(streamed=True, model_init=tiny_lm))
    torch.manual_seed(0)
    model = TinyLM()
    rows = torch.from_numpy(np.asarray(prepared.data.corpus.eval_ids))
    with torch.no_grad():
        expected = float(model(input_ids=rows, labels=rows)["loss"])

    class Settings:
        spec = load_spec(None, spec_args(corpus, tmp_path))

    got = evaluate(prepared.data, model, LocalSession(), Settings(), batch_size=5)
    assert got["eval_loss"] == pytest.approx(expected, rel=1e-5) and got["eval_examples"] == 32
