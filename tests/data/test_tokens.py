"""Budgets in tokens for causal LMs: packing texts into full blocks, the token budget in samples, its bad
inputs, and ``tokens_seen`` in the history. No Ray cluster, no download."""


import numpy as np
import pandas as pd
import pytest
import torch

from cbs_ray.data.files import load_texts
from cbs_ray.data.prepare import prepare_data
from cbs_ray.data.tokenize import blocks, pack, token_stream
from cbs_ray.maths.budget import samples_for_tokens
from cbs_ray.records.storage import with_tokens_seen
from cbs_ray.sources.builtin import items_in
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.spec.resolve import packing_on, resolve_budget, tokens_per_sample
from helpers.paths import SEARCH_SPACES

SPACE = SEARCH_SPACES / "tiny_causal_lm.yaml"
TOKENS = ["training.budget_samples=null"]  # then a token budget is the only budget


def causal(*overrides):
    return load_spec(SPACE, list(overrides))


# ---- packing ----------------------------------------------------------------------------------------

def test_pack_concatenates_with_separators_and_drops_the_partial_block():
    # stream: 1 2 3 0 | 4 5 0 | (empty: nothing) | 6 7 8 9 0  -> 12 tokens = 4 blocks of 3
    ids, mask = pack([[1, 2, 3], [4, 5], [], [6, 7, 8, 9]], block_length=3, separator=0)
    assert ids.tolist() == [[1, 2, 3], [0, 4, 5], [0, 6, 7], [8, 9, 0]]
    assert mask.tolist() == [[1, 1, 1]] * 4 and ids.dtype == np.int64
    # 12 tokens in blocks of 5: two blocks, the last 2 tokens (9, 0) dropped
    ids, _ = pack([[1, 2, 3], [4, 5], [], [6, 7, 8, 9]], block_length=5, separator=0)
    assert ids.tolist() == [[1, 2, 3, 0, 4], [5, 0, 6, 7, 8]]


def test_pack_reads_padded_arrays_through_their_mask():
    ids = np.array([[7, 1, 2, 0, 0], [7, 3, 4, 5, 0]])  # 0 is padding, masked out
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]])
    # stream: 7 1 2 9 7 3 4 5 9 (9 tokens) -> 2 blocks of 4, the last token dropped
    packed, ones = pack(ids, mask, block_length=4, separator=9)
    assert packed.tolist() == [[7, 1, 2, 9], [7, 3, 4, 5]] and ones.min() == 1


def test_a_document_already_ending_in_the_separator_gets_no_second_one():
    # The word-level tokenizer's documents end in [SEP] (3): no separator is added after them.
    assert token_stream([[2, 10, 3], [2, 11, 12, 3]], separator=3).tolist() == [2, 10, 3, 2, 11, 12, 3]
    assert token_stream([[2, 10, 3], [2, 11]]).tolist() == [2, 10, 3, 2, 11]  # no separator at all


def test_blocks_of_an_exact_stream_and_of_a_short_one():
    ids, _ = blocks(np.arange(6), 3)
    assert ids.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert blocks(np.arange(2), 3)[0].shape == (0, 3)


def test_prepared_causal_lm_data_are_full_blocks_of_every_token():
    spec = causal(*TOKENS, "training.budget_tokens=65536", "data.builtin_train_examples=300",
                  "data.builtin_eval_examples=100")
    packed = prepare_data(spec)
    unpacked = prepare_data(causal("data.builtin_train_examples=300", "data.builtin_eval_examples=100"))
    # Unpacked, each sentence is [CLS] words [SEP] padded to 32; packed, the same tokens end to end, cut in 32s.
    tokens = int(unpacked.train_mask.sum())
    assert packed.train_ids.shape == (tokens // 32, 32) and packed.train_examples == tokens // 32
    assert packed.train_mask.min() == 1 and packed.eval_mask.min() == 1
    assert packed.train_labels.shape == (packed.train_examples,)
    stream = unpacked.train_ids[unpacked.train_mask == 1]
    assert (packed.train_ids.ravel() == stream[:packed.train_ids.size]).all()
    assert packed.eval_examples == int(unpacked.eval_mask.sum()) // 32


def test_texts_too_short_for_one_block_are_a_one_line_error():
    from cbs_ray.data.tokenize import pack_texts

    def documents(texts):  # one token per word, then EOS (0)
        return [[1] * len(t.split()) + [0] for t in texts]

    # "a b" and "c" are 3 + 2 = 5 tokens, blank texts none: not one block of 8, but blocks of 4 (the 5th dropped)
    with pytest.raises(SpecError, match=r"^data\.max_seq_length: packed, the 2 texts hold 5 tokens, not one block of 8$"):
        pack_texts(documents, ["a b", "  ", "c"], block_length=8)
    assert pack_texts(documents, ["a b", "  ", "c"], block_length=4)[0].tolist() == [[1, 1, 0, 1]]


def gpt2_style_tokenizer(directory) -> str:
    """A byte-level BPE saved like GPT-2's (no special tokens added to a text, EOS <|endoftext|> = id 0, no
    padding token), trained here: the hub's gpt2 is not downloaded in tests."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(["good film", "bad film"] * 10, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>").save_pretrained(directory)
    return str(directory)


def test_a_gpt2_style_tokenizer_ends_every_packed_text_in_eos(tmp_path):
    from transformers import AutoTokenizer

    name = gpt2_style_tokenizer(tmp_path)
    spec = causal(*TOKENS, "training.budget_tokens=65536", "data.builtin_train_examples=300",
                  "data.builtin_eval_examples=100", f"model.tokenizer={name}")
    packed = prepare_data(spec)
    tok = AutoTokenizer.from_pretrained(name)
    texts = load_texts(spec)[0][0]
    # text 1's tokens, EOS, text 2's tokens, EOS, ... cut into blocks of 32
    stream = [i for text in texts for i in tok(text)["input_ids"] + [tok.eos_token_id]]
    assert tok.eos_token_id == 0 and len(texts) == 300 and stream.count(0) == 300
    assert packed.train_ids.shape == (len(stream) // 32, 32) and packed.train_mask.min() == 1
    assert packed.train_ids.ravel().tolist() == stream[:packed.train_ids.size]


def test_a_causal_lm_counts_every_target_token_of_a_packed_block():
    # Every position but the first predicts the next: 3 blocks of 8 tokens have 3 × 7 = 21 targets.
    ids = torch.ones(3, 8, dtype=torch.int64)
    assert items_in((ids, torch.ones_like(ids), torch.zeros(3, dtype=torch.int64)), "causal-lm") == 21


# ---- the budget ---------------------------------------------------------------------------------

def test_token_budget_in_samples_rounds_down_to_report_intervals_and_says_so():
    # 300000 tokens / 32 = 9375 samples -> 8192 (4 intervals of 2048), i.e. 262144 tokens
    samples, line = samples_for_tokens(300_000, 32, 2048)
    assert samples == 8192
    assert line == ("budget: 300000 tokens = 9375 samples of 32 tokens, rounded down to 8192 samples (a multiple "
                    "of training.eval_every_samples, 2048) = 262144 tokens")
    # 262144 / 32 = 8192 exactly: nothing to round, nothing said about rounding
    assert samples_for_tokens(262_144, 32, 2048) == (8192, "budget: 262144 tokens = 8192 samples of 32 tokens")
    assert samples_for_tokens(65_535, 32, 2048)[0] == 0  # 2047 samples: less than one interval


def test_resolve_budget_turns_tokens_into_samples():
    spec = causal(*TOKENS, "training.budget_tokens=300000")
    assert resolve_budget(spec, 2686) == 8192  # as above; the training set's size does not enter
    assert tokens_per_sample(spec) == 32 and packing_on(spec)


def test_tokens_per_sample_only_with_packed_texts():
    assert tokens_per_sample(causal()) is None  # a sample budget: padded, unpacked
    assert tokens_per_sample(causal("data.packing=true")) == 32  # packed without a token budget
    assert tokens_per_sample(load_spec(None)) is None  # classification is never packed


def test_the_probe_of_a_token_budget_trains_samples_of_the_same_packed_data():
    from cbs_ray.tune.probe import probe_spec

    probe = probe_spec(causal(*TOKENS, "training.budget_tokens=300000"))
    assert probe.training.budget_tokens is None and probe.training.budget_samples == 2048
    assert probe.data.packing is True and tokens_per_sample(probe) == 32


BAD = [
    ([*TOKENS, "training.budget_tokens=100000"],
     "training.budget_tokens: counts the tokens of the spec's own packed texts, a causal LM's (the task is sequence-classification)"),
    (["training.budget_tokens=100000"], "training: set exactly one of budget_samples, budget_epochs and budget_tokens"),
    ([*TOKENS, "training.budget_epochs=2", "training.budget_tokens=100000"],
     "training: set exactly one of budget_samples, budget_epochs and budget_tokens"),
    (["data.packing=true"], "data.packing: only a causal LM's texts are packed (the task is sequence-classification)"),
]


@pytest.mark.parametrize("overrides,message", BAD)
def test_bad_token_budget_is_one_line(overrides, message):
    with pytest.raises(SpecError) as info:
        load_spec(None, overrides)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


CAUSAL_BAD = [
    ([*TOKENS, "training.budget_tokens=100000", "data.packing=false"],
     "data.packing: a token budget (training.budget_tokens) needs packed texts"),
    # 65535 tokens are 2047 samples of 32: not one report interval of 2048
    ([*TOKENS, "training.budget_tokens=65535"], "training.budget_tokens: 65535 tokens is less than one report "
                                                "interval (2048 samples of 32 tokens = 65536 tokens)"),
    ([*TOKENS, "training.budget_tokens=0"], "training.budget_tokens: must be from 1 to 1125899906842624, got 0"),
]


@pytest.mark.parametrize("overrides,message", CAUSAL_BAD)
def test_bad_causal_lm_token_budget_is_one_line(overrides, message):
    with pytest.raises(SpecError) as info:
        causal(*overrides)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


# ---- tokens_seen in the history -----------------------------------------------------------------

def test_tokens_seen_is_samples_times_tokens_per_sample():
    history = pd.DataFrame({"trial_id": ["a", "a", "b"], "samples_seen": [1024, 2048, 1024]})
    assert with_tokens_seen(history, 32)["tokens_seen"].tolist() == [32768, 65536, 32768]
    assert "tokens_seen" not in with_tokens_seen(history, None)  # unpacked: tokens per sample vary
    reported = history.assign(tokens_seen=[1.0, None, 3.0])  # a run that reported its own keeps them
    assert with_tokens_seen(reported, 32)["tokens_seen"].tolist() == [1.0, 65536.0, 3.0]


def test_load_history_adds_tokens_seen_from_the_experiment_meta(tmp_path):
    import json

    from cbs_ray.records.storage import load_history, write_meta

    (tmp_path / "B8_t1").mkdir()  # one trial's directory as Tune leaves it (read from its own result file)
    (tmp_path / "B8_t1" / "result.json").write_text("".join(
        json.dumps({"trial_id": "t1", "samples_seen": s, "eval_loss": loss}) + "\n"
        for s, loss in ((2048, 3.0), (4096, 2.5))))
    assert "tokens_seen" not in load_history(str(tmp_path))  # no metadata (a probe's experiment): samples only
    write_meta(str(tmp_path), {"tokens_per_sample": 1024})
    assert load_history(str(tmp_path))["tokens_seen"].tolist() == [2048 * 1024, 4096 * 1024]


def test_a_token_budget_on_the_users_objects_counts_their_input_ids():
    """Issue 35: with model_init and datasets of the user's own, a token budget counts the items' input_ids, which
    must all have one length (packed blocks); the budget is whole samples of that many tokens, in whole report
    intervals. Items of two lengths, or without input_ids, are one line each."""
    import types

    from cbs_ray.sources.object_checks import token_budget_tokens_per_sample

    spec = load_spec(None, ["task=causal-lm", "search.metric=eval_loss", "search.mode=min", *TOKENS,
                            "training.budget_tokens=1048576"])

    def objects(items):
        return types.SimpleNamespace(train_dataset=items, train_examples=len(items))

    blocks_of_64 = [{"input_ids": list(range(64))} for _ in range(600)]
    assert token_budget_tokens_per_sample(spec, objects(blocks_of_64)) == 64
    # 1048576 tokens = 16384 samples of 64 tokens, a whole number of the default report interval (2048).
    assert resolve_budget(spec, 600, 64) == 16384
    assert resolve_budget(spec, 600, 100) == 10240  # 10485 samples of 100 tokens, rounded down to 5 intervals
    ragged = blocks_of_64[:-1] + [{"input_ids": list(range(57))}]  # the last item is short
    with pytest.raises(SpecError, match=r"^training\.budget_tokens: your train_dataset's items have input_ids of "
                                        r"different lengths \(64 tokens at item 0, 57 at item 599\)"):
        token_budget_tokens_per_sample(spec, objects(ragged))
    with pytest.raises(SpecError, match=r"^training\.budget_tokens: your train_dataset's items carry no input_ids"):
        token_budget_tokens_per_sample(spec, objects([{"x": 1}] * 8))
    assert token_budget_tokens_per_sample(load_spec(None, []), objects(ragged)) is None  # no token budget


# ---- a hub tokenizer offline: one line at once (issue 58 finding 18) -------------------------------------------

def test_the_hub_is_unreachable_when_offline_or_its_host_does_not_resolve(monkeypatch):
    from cbs_ray.data.tokenize import PROXY_VARIABLES, hub_unreachable

    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_unreachable("https://huggingface.co") == "HF_HUB_OFFLINE is set"
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert hub_unreachable("https://nosuch.invalid").startswith("the hub (https://nosuch.invalid) cannot be reached")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")  # behind a proxy the hub's client connects
    assert hub_unreachable("https://nosuch.invalid") is None


def test_a_tokenizer_neither_local_nor_cached_is_refused_without_trying_an_unreachable_hub(monkeypatch):
    import transformers

    from cbs_ray.data import tokenize

    tried = []

    def from_pretrained(name, **kwargs):
        tried.append(kwargs)
        if kwargs.get("local_files_only"):
            raise OSError("not cached")
        return "online"

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", from_pretrained)
    monkeypatch.setattr(tokenize, "hub_unreachable", lambda endpoint: "the hub (x) cannot be reached (DNS)")
    with pytest.raises(SpecError, match=r"^model.tokenizer: cannot load 'org/tok': neither a local folder nor in "
                                        r"the hub's cache, and the hub \(x\) cannot be reached \(DNS\)"):
        tokenize.load_pretrained_tokenizer("org/tok")
    assert tried == [{"local_files_only": True}]  # the hub's client, which retries for a minute, never called
    monkeypatch.setattr(tokenize, "hub_unreachable", lambda endpoint: None)  # online: the hub's path, as before
    assert tokenize.load_pretrained_tokenizer("org/tok") == "online" and tried[-1] == {}


@pytest.mark.slow
def test_a_parquet_text_column_with_a_hub_tokenizer_offline_fails_at_once(tmp_path):
    """Before: 23 retry lines over 51 s, then the line. A host that does not resolve, as offline."""
    import os
    import subprocess
    import sys
    import time

    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env["HF_ENDPOINT"] = "https://nosuch.invalid"
    code = "from cbs_ray.data.tokenize import pretrained_tokenizer; pretrained_tokenizer('nosuch-org/nosuch-tok', 16)"
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert time.monotonic() - start < 30
    assert "Retrying" not in result.stderr and "cannot be reached" in result.stderr
