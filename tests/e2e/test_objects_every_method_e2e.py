"""Every search method on a user's own objects (issue 35): a GPT-2 built from its config, a ``datasets.Dataset``
of token blocks and HF's ``DataCollatorForLanguageModeling`` through ``run_search`` with ``search.method``
scratch, branch (its schedule validated, the budget in tokens counted from the items' ``input_ids``) and ladder
(``ladder.validate``), each on a real local Ray; then ``resume_search`` of the branch and ladder experiments with
the same objects passed again. Nothing is downloaded: the tokenizer is a word-level one built here."""

import json
import sys

import pytest

from cbs_ray.records.storage import read_meta
from cbs_ray.spec.load import load_spec

# ≈ 1 min each on 2 cores: the slow tier, which CI runs as its own step.
pytestmark = pytest.mark.slow

VOCAB, BLOCK = 32, 24
"""Tokens of the vocabulary (the pad token's included) and of every training item: 24, not the spec's default
max_seq_length (16), so a token budget has to count the items' own."""

COMMON = ["search.metric=eval_loss", "search.mode=min", "training.base_lr=0.003", "training.eval_batch_size=64",
          "search.repeats=1"]


def blocks(count: int, seed: int) -> list[list[int]]:
    """``count`` blocks of ``BLOCK`` tokens that count up from a random start by a random step of 1 or 2 (mod the
    vocabulary, the pad token 0 left out): a pattern a one-layer GPT-2 learns within a few hundred samples."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        start, step = rng.randrange(VOCAB - 1), rng.choice((1, 2))
        out.append([1 + (start + step * k) % (VOCAB - 1) for k in range(BLOCK)])
    return out


def gpt2():
    """A fresh 1-layer, 32-wide GPT-2 from its config (random weights, nothing downloaded)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=BLOCK, n_embd=32, n_layer=1, n_head=2,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def objects() -> dict:
    import datasets
    from ray import cloudpickle
    from tokenizers import Tokenizer, models
    from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers need not import this file
    vocab = {"[PAD]": 0, **{f"t{i}": i for i in range(1, VOCAB)}}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="[PAD]")),
                                        pad_token="[PAD]")
    return {"model_init": gpt2,
            "train_dataset": datasets.Dataset.from_dict({"input_ids": blocks(4096, seed=1)}),
            "eval_dataset": datasets.Dataset.from_dict({"input_ids": blocks(128, seed=2)}),
            "data_collator": DataCollatorForLanguageModeling(tokenizer, mlm=False)}


def _search(root, overrides, **kw):
    from cbs_ray import run_search

    spec = load_spec(None, COMMON + overrides + [f"storage_path={root / 'ray_results'}"])
    return run_search(spec, output_dir=str(root / "out"), verbose=0, **objects(), **kw)


def _resume(result, root, capsys):
    from cbs_ray import resume_search

    capsys.readouterr()
    resumed = resume_search(result.experiment_path, output_dir=str(root / "resumed"), verbose=0, **objects())
    return resumed, capsys.readouterr().out


@pytest.fixture(scope="module")
def branch(tmp_path_factory, shared_ray):
    # Budget 2048 samples, in tokens (49152 = 2048 items of 24 tokens); trunk B=8, branches at 16 and 32 from a
    # quarter and a half of it for a quarter; a tolerance of 0.15 nats, under half of what the trunk gains in a
    # window (resolvable) yet over what B=16 loses: the critical batch rises, so the schedule the validation
    # trains has more than one batch; the validation on one seed.
    root = tmp_path_factory.mktemp("branch-objects")
    overrides = ["task=causal-lm", "search.method=branch", "training.budget_samples=null",
                 f"training.budget_tokens={2048 * BLOCK}", "training.eval_every_samples=512",
                 "search.batch_sizes=[8, 16, 32]", "branch.trunk_batch_size=8", "branch.checkpoints=[0.25, 0.5]",
                 "branch.window=0.25", "branch.tolerance=0.15",
                 "branch.validation_seeds=1", "branch.validate_schedule=true", "branch.window_min_steps=4",
                 # the rule that doubles at each crossing: the schedule grows past the trunk over two checkpoints
                 # (under fitted, the default, no schedule runs were trained on this short budget)
                 "branch.schedule_rule=once_per_crossing"]
    return _search(root, overrides), root


def test_branch_mode_runs_on_the_users_gpt2_with_a_token_budget_and_validates_its_schedule(branch):
    result, root = branch
    meta = read_meta(result.experiment_path)
    assert meta["method"] == "branch" and meta["user_objects"]["model_init"].endswith("gpt2")
    assert meta["budget_samples"] == 2048 and meta["tokens_per_sample"] == BLOCK  # the items' 24 tokens
    history = result.history
    assert set(history["role"]) == {"trunk", "branch", "schedule"}
    assert history.loc[history["role"] == "branch", "eval_loss"].notna().all()
    summary = json.loads((root / "out" / "summary.json").read_text())
    assert summary["method"] == "branch" and summary["schedule_validation"] is not None
    assert result.report_dir == root / "out" and result.answer.batch_size in (8, 16, 32)
    assert result.schedule_experiment_path == meta["method_record"]["schedule_experiment"]
    # The trunk's checkpoints hold the user's model's state dict and the optimizer's.
    import torch

    state = torch.load(next((root / "ray_results").rglob("trunk_checkpoints/**/state.pt")), weights_only=True)
    assert "transformer.h.0.attn.c_attn.weight" in state["model"] and state["optimizer"]["state"]


def test_a_branch_experiment_on_objects_resumes_with_the_same_objects(branch, capsys):
    result, root = branch
    resumed, out = _resume(result, root, capsys)
    assert resumed.summary.to_dict()["critical_batch_over_training"] == \
        result.summary.to_dict()["critical_batch_over_training"]
    assert f"resuming {result.experiment_path}" in out


@pytest.fixture(scope="module")
def ladder(tmp_path_factory, shared_ray):
    # D = 2048 samples, batches 8…64 on one seed to half of D, the validation's runs on to 2·D.
    root = tmp_path_factory.mktemp("ladder-objects")
    overrides = ["search.method=ladder", "training.budget_samples=2048", "training.eval_every_samples=1024",
                 "search.batch_sizes=[8, 16, 32, 64]", "ladder.fraction=0.5", "ladder.seeds=1",
                 "ladder.first_rung=0.0625", "ladder.validate=true", "ladder.min_steps=8"]
    return _search(root, overrides), root


def test_the_ladder_runs_on_the_users_gpt2_and_validates_its_prediction(ladder):
    result, root = ladder
    meta = read_meta(result.experiment_path)
    assert meta["method"] == "ladder" and meta["user_objects"]["data_collator"]
    summary = json.loads((root / "out" / "summary.json").read_text())
    assert summary["method"] == "ladder" and summary["ladder"]["rungs"]
    assert "prediction_validation" in summary and (root / "out" / "report.html").is_file()
    assert result.report_dir == root / "out"
    # The answer is the recommended batch at the full budget, or none where the ladder refused to predict.
    assert (result.answer is None) == (summary["prediction"]["batch_size"] is None)


def test_a_ladder_on_objects_resumes_with_the_same_objects(ladder, capsys):
    result, root = ladder
    resumed, out = _resume(result, root, capsys)
    assert f"resuming {result.experiment_path}" in out
    assert json.loads(resumed.reading.to_json())["ladder"] == json.loads(result.reading.to_json())["ladder"]


def test_the_from_scratch_search_runs_on_the_users_gpt2(tmp_path, shared_ray):
    result = _search(tmp_path, ["search.strategy=grid", "search.grid_points=1", "search.early_stopping=false",
                                "training.budget_samples=1024",
                                "training.eval_every_samples=256", "asha.grace_period_samples=256",
                                "search.batch_sizes=[8, 16, 32]"])
    assert set(result.history["batch_size"]) == {8, 16, 32} and result.history["eval_loss"].notna().all()
    assert result.answer.text and result.critical_batch is not None
    assert read_meta(result.experiment_path)["user_objects"]["train_dataset"] == "Dataset of 4096 items"
