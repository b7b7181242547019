"""Encoder-decoder (issue 16): the built-in translation task, target labels, exact accumulation over target
tokens, BLEU summed over workers, the spec's rules, a tiny T5 through the objects path, and the shipped
T5 space end to end."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from cbs_ray.data.builtin import ADJECTIVES, NOUNS, builtin_translation, translate, translation_dictionary
from cbs_ray.data.prepare import prepare_data
from cbs_ray.data.seq2seq_pairs import target_labels
from cbs_ray.sources.choose import loop_source
from cbs_ray.sources.seq2seq import (
    Seq2SeqSource,
    bleu_from_statistics,
    bleu_statistics,
    evaluate_seq2seq,
    summed_target_loss,
)
from cbs_ray.sources.user_objects import user_objects
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.loop import train_loop
from cbs_ray.train.sessions import LocalSession
from cbs_ray.tune.api import prepare
from helpers.paths import ROOT
from helpers.training import RecordingSession

TINY_T5 = {"model_type": "t5", "d_model": 32, "d_ff": 64, "num_layers": 1, "num_decoder_layers": 1,
           "num_heads": 2, "d_kv": 16, "dropout_rate": 0.0}
SEQ2SEQ = ["task=seq2seq", "data.builtin_task=translation", "search.metric=bleu", "search.mode=max",
           "model.config=" + json.dumps(TINY_T5), "data.builtin_train_examples=256", "data.builtin_eval_examples=40",
           "search.batch_sizes=[8, 16]", "search.num_trials=2", "training.budget_samples=128",
           "training.eval_every_samples=64", "asha.grace_period_samples=64"]


# ---- the built-in translation task -----------------------------------------------------------------

def test_translation_looks_words_up_and_puts_the_adjective_behind_its_noun():
    dictionary = {"the": "T", "red": "R", "dog": "D", "sees": "S", "a": "A", "cat": "C", "near": "N"}
    assert translate("the red dog sees a cat".split(), dictionary) == ["T", "D", "R", "S", "A", "C"]
    assert translate("red dog near cat".split(), dictionary) == ["D", "R", "N", "C"]
    # An adjective with no noun behind it stays where it is.
    assert translate("the dog sees red".split(), dictionary) == ["T", "D", "S", "R"]


def test_built_in_pairs_are_deterministic_and_follow_the_rule():
    dictionary = translation_dictionary()
    assert len(set(dictionary.values())) == len(dictionary)  # one to one: the source can be read back
    sources, targets = builtin_translation(200, seed=1)
    assert (sources, targets) == builtin_translation(200, seed=1) and sources != builtin_translation(200, seed=2)[0]
    back = {v: k for k, v in dictionary.items()}
    for source, target in zip(sources, targets):
        words = source.split()
        assert 3 <= len(words) <= 11 and target.split() == translate(words, dictionary)
        assert sorted(back[w] for w in target.split()) == sorted(words)  # the same words, reordered
    swapped = [s for s in sources if any(a in s.split() for a in ADJECTIVES)]
    assert swapped and all(w in NOUNS + ADJECTIVES or w in dictionary for s in swapped for w in s.split())


def test_target_labels_are_minus_100_at_padding():
    ids = np.array([[5, 6, 3, 0], [7, 3, 0, 0]])
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]])
    assert target_labels(ids, mask).tolist() == [[5, 6, 3, -100], [7, 3, -100, -100]]


def test_prepared_pairs_end_with_eos_and_decode_back_to_the_reference():
    data = prepare_data(load_spec(None, SEQ2SEQ))
    assert data.train_ids.shape == (256, 16) and data.train_labels.shape == (256, 16) and data.num_labels == 0
    for labels, reference in zip(data.eval_labels[:10], data.eval_references[:10]):
        tokens = labels[labels != -100].tolist()
        assert tokens[-1] == data.eos_id and -100 not in tokens and (labels[len(tokens):] == -100).all()
        assert data.decode([tokens]) == [reference]  # decode cuts at the end-of-sequence
    assert data.pad_id == 0 and data.eos_id not in (data.pad_id,)


# ---- exact accumulation over target tokens -----------------------------------------------------------

def _tiny_t5(vocab_size: int = 40):
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    config = T5Config(vocab_size=vocab_size, pad_token_id=0, decoder_start_token_id=0, eos_token_id=1,
                      **{k: v for k, v in TINY_T5.items() if k != "model_type"})
    return T5ForConditionalGeneration(config)


def _grads(model):
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_micro_batches_summed_over_target_tokens_give_one_big_batchs_mean_loss_and_gradient():
    model = _tiny_t5()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, 40, (8, 6), generator=g)
    mask = torch.ones_like(ids)
    lengths = torch.tensor([1, 5, 2, 6, 3, 1, 4, 2])  # targets of unequal length: a mean of means would differ
    target = torch.randint(2, 40, (8, 6), generator=g)
    labels = target.masked_fill(torch.arange(6) >= lengths[:, None], -100)
    source = Seq2SeqSource(SimpleNamespace(dev_ids=None), "seq2seq")
    batches = [(ids[i:i + 2], mask[i:i + 2], labels[i:i + 2]) for i in range(0, 8, 2)]
    items = [source.items_in(b) for b in batches]
    assert sum(items) == int(lengths.sum()) == 24 and source.items_vary

    whole = model(input_ids=ids, attention_mask=mask, labels=labels).loss  # HF's mean over target tokens
    whole.backward()
    expected = _grads(model)
    model.zero_grad()
    total = torch.zeros(())
    for batch in batches:
        loss = summed_target_loss(model, source.inputs(batch, "cpu")) / sum(items)
        loss.backward()
        total += loss.detach()
    assert torch.allclose(total, whole.detach(), atol=1e-6)
    for got, want in zip(_grads(model), expected):
        assert torch.allclose(got, want, atol=1e-6)
    # Each micro-batch's own mean, averaged, is not the same thing here.
    means = torch.stack([model(input_ids=b[0], attention_mask=b[1], labels=b[2]).loss for b in batches]).mean()
    assert not torch.allclose(means, whole, atol=1e-3)


def test_the_loop_trains_seq2seq_with_accumulation_exactly():
    """4 micro-batches of 4 update the weights as one batch of 16 does (SGD, no clipping)."""
    common = SEQ2SEQ + ["training.optimizer=sgd", "training.grad_clip_norm=null", "training.base_lr=0.5",
                        "training.noise_scale=false"]
    weights = []
    for micro in (16, 4):
        spec = load_spec(None, common + [f"training.micro_batch_size={micro}"])
        prepared = prepare(spec)
        data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
        assert isinstance(loop_source(data, spec.task), Seq2SeqSource)
        cfg = TrialConfig.from_tune(spec, {"log2_batch": 4, "alpha": 1.0, "warmup_fraction": 0.0},
                                    budget_samples=budget, model_config=config)
        session = RecordingSession()
        train_loop(cfg, data, session)
        weights.append(session.weights[0])
        last = session.reports[-1]
        assert (last["micro_batch"], last["accumulation"]) == ((16, 1) if micro == 16 else (4, 4))
        assert 0.0 <= last["bleu"] <= 100.0 and last["eval_loss"] > 0 and "accuracy" not in last
    for name, value in weights[0].items():
        assert torch.allclose(value, weights[1][name], atol=2e-6), name


# ---- BLEU over workers ---------------------------------------------------------------------------------

def test_bleu_statistics_summed_over_shards_give_the_corpus_bleu():
    hypotheses, references = ["a b c d", "x y"], ["a b c d", "x z"]
    first, second = bleu_statistics(hypotheses[:1], references[:1]), bleu_statistics(hypotheses[1:], references[1:])
    # [hyp len, ref len, matches 1..4, totals 1..4], counted by hand
    assert first == [4, 4, 4, 3, 2, 1, 4, 3, 2, 1] and second == [2, 2, 1, 0, 0, 0, 2, 1, 0, 0]
    summed = [a + b for a, b in zip(first, second)]
    # Lengths equal (no brevity penalty); precisions 5/6, 3/4, 2/2, 1/1: BLEU = 100 · (5/8) ** (1/4) = 88.91
    assert bleu_from_statistics(summed) == pytest.approx(100 * (5 / 8) ** 0.25)
    from sacrebleu.metrics import BLEU

    assert bleu_from_statistics(summed) == pytest.approx(BLEU().corpus_score(hypotheses, [references]).score)
    # The mean of the shards' own BLEUs is not the corpus BLEU.
    assert (bleu_from_statistics(first) + bleu_from_statistics(second)) / 2 != pytest.approx(88.91, abs=0.1)
    assert bleu_statistics([], []) == [0.0] * 10


class TwoRanks(LocalSession):
    """Rank ``rank`` of two, whose all-reduce adds the other rank's tensor (recorded by running rank 1 first)."""

    def __init__(self, rank: int, other=None):
        self.rank, self.world_size, self.other, self.sent = rank, 2, other, None

    def all_reduce(self, tensor):
        self.sent = tensor.clone()
        return tensor + self.other if self.other is not None else tensor


def test_evaluation_sums_each_ranks_bleu_statistics_and_equals_one_rank_on_the_whole_set():
    spec = load_spec(None, SEQ2SEQ)
    prepared = prepare(spec)
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    cfg = TrialConfig.from_tune(spec, {"log2_batch": 3, "alpha": 1.0, "warmup_fraction": 0.0},
                                budget_samples=budget, model_config=config)
    from cbs_ray.sources.model import build_model

    torch.manual_seed(0)
    model = build_model(cfg.model, "seq2seq", config)
    alone = evaluate_seq2seq(model, LocalSession(), data, cfg, batch_size=16)
    rank1 = TwoRanks(1)
    evaluate_seq2seq(model, rank1, data, cfg, batch_size=16)
    both = evaluate_seq2seq(model, TwoRanks(0, rank1.sent), data, cfg, batch_size=16)
    assert both["bleu"] == pytest.approx(alone["bleu"]) and both["eval_loss"] == pytest.approx(alone["eval_loss"])
    assert set(alone) == {"eval_loss", "perplexity", "bleu"}


# ---- the spec ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, message", [
    (["task=causal-lm", "search.metric=bleu"], "search.metric: bleu needs task seq2seq"),
    (SEQ2SEQ + ["search.mode=min"], "search.mode: bleu is better when it is higher; use mode max"),
    (SEQ2SEQ + ["search.metric=accuracy"], "search.metric: accuracy needs task sequence-classification"),
    (["data.builtin_task=translation"], "data.builtin_task: translation is a seq2seq task"),
    (SEQ2SEQ + ["training.probe_micro_batch=true"], "training.probe_micro_batch: not available with task seq2seq"),
    (["generation.num_beams=4"], "generation: only a seq2seq task generates"),
    (SEQ2SEQ + ["generation.num_beams=0"], "generation.num_beams: must be at least 1"),
    (SEQ2SEQ + ["data.max_target_length=1"], "data.max_target_length: must be from 2 to 131072"),
])
def test_what_seq2seq_cannot_take_is_one_line(overrides, message):
    with pytest.raises(SpecError) as e:
        load_spec(None, overrides)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_seq2seq_on_the_sentiment_data_fails_before_ray():
    spec = load_spec(None, [o for o in SEQ2SEQ if not o.startswith("data.builtin_task")])
    with pytest.raises(SpecError, match="data.builtin_task: task seq2seq needs source-target pairs"):
        prepare(spec)


def test_seq2seq_dry_run_plans_with_generation_settings(capsys):
    from cbs_ray.search import main

    assert main(["--space", str(ROOT / "search_spaces" / "tiny_t5_cpu.yaml"), "--dry-run",
                 "--set", "generation.num_beams=2"]) == 0
    assert " micro × " in capsys.readouterr().out


# ---- the objects path with a T5 ----------------------------------------------------------------------

class Pairs(torch.utils.data.Dataset):
    """Token pairs of varying lengths: the target is the source reversed, +1 (ids 2..39, 0 pad, 1 eos)."""

    def __init__(self, size: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.lengths = torch.randint(2, 7, (size,), generator=g).tolist()
        self.sources = [torch.randint(2, 38, (n,), generator=g) for n in self.lengths]

    def __len__(self):
        return len(self.sources)

    def __getitem__(self, i):
        source = self.sources[i]
        return {"input_ids": torch.cat([source, torch.tensor([1])]),
                "labels": torch.cat([source.flip(0) + 1, torch.tensor([1])])}


def pad_pairs(items):
    """Pads inputs with 0 (masked) and labels with -100; counts the target tokens for exact accumulation."""
    from torch.nn.utils.rnn import pad_sequence

    ids = pad_sequence([x["input_ids"] for x in items], batch_first=True, padding_value=0)
    labels = pad_sequence([x["labels"] for x in items], batch_first=True, padding_value=-100)
    return {"input_ids": ids, "attention_mask": (ids != 0).long(), "labels": labels,
            "num_items_in_batch": (labels != -100).sum()}


def token_bleu(prediction):
    """BLEU of the teacher-forced argmax tokens against the labels, as id strings."""
    predicted, labels = prediction.predictions.argmax(-1), prediction.label_ids
    keep = labels != -100
    hyps = [" ".join(map(str, p[k])) for p, k in zip(predicted, keep)]
    refs = [" ".join(map(str, y[k])) for y, k in zip(labels, keep)]
    return {"bleu": bleu_from_statistics(bleu_statistics(hyps, refs))}


def t5_objects():
    return {"model_init": _tiny_t5, "train_dataset": Pairs(256, 1), "eval_dataset": Pairs(48, 2),
            "data_collator": pad_pairs, "compute_metrics": token_bleu}


OBJECTS_SPEC = ["task=seq2seq", "search.metric=bleu", "search.mode=max", "search.batch_sizes=[8, 16]",
                "search.num_trials=2", "training.budget_samples=128", "training.eval_every_samples=64",
                "asha.grace_period_samples=64", "training.base_lr=0.003"]


def test_a_t5_from_model_init_passes_the_checks_and_trains_in_process():
    spec = load_spec(None, OBJECTS_SPEC + ["training.micro_batch_size=4"])
    prepared = prepare(spec, user_objects(**t5_objects()))
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    assert budget == 128 and config.model_type == "t5"
    cfg = TrialConfig.from_tune(spec, {"log2_batch": 4, "alpha": 1.0, "warmup_fraction": 0.0},
                                budget_samples=budget, model_config=config)
    session = RecordingSession()
    train_loop(cfg, data, session)
    assert [r["samples_seen"] for r in session.reports] == [64, 128]
    last = session.reports[-1]
    assert last["accumulation"] == 4 and last["eval_examples"] == 48 and not last["diverged"]
    assert 0.0 <= last["bleu"] <= 100.0 and last["eval_loss"] < session.reports[0]["eval_loss"] + 1.0


def test_a_t5_without_compute_metrics_cannot_search_on_bleu():
    objects = {**t5_objects(), "compute_metrics": None}
    with pytest.raises(SpecError, match="compute_metrics: required for search.metric bleu"):
        prepare(load_spec(None, OBJECTS_SPEC), user_objects(**objects))
