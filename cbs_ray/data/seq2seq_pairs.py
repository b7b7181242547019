"""Encoder-decoder data (``task: seq2seq``): source/target text pairs from the built-in translation
task, the hub or files, tokenized into input ids and target labels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cbs_ray.data.arrays import Pairs, PreparedData
from cbs_ray.data.builtin import builtin_translation
from cbs_ray.data.files import cut_splits, loaded_splits
from cbs_ray.data.tokenize import SPECIAL_TOKENS, load_pretrained_tokenizer
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.schema import DataSpec, SearchSpec

__all__ = ["Seq2SeqData", "prepare_seq2seq_data", "load_text_pairs"]


# ---- seq2seq: source and target text, one tokenizer ------------------------------------------------

@dataclass
class Seq2SeqData(PreparedData):
    """A seq2seq task's arrays: ``*_ids``/``*_mask`` the sources (``data.max_seq_length``), ``*_labels`` the
    target ids (``data.max_target_length``, end-of-sequence included) with -100 at padding, which the loss
    ignores and from which the model makes its decoder inputs (shifted right, -100 read as padding). The
    reference texts and the tokenizer travel along for BLEU, which compares generated text."""

    eval_references: list[str] = field(default_factory=list)
    """The eval set's target texts, as given (BLEU's references)."""
    dev_references: list[str] | None = None
    eos_id: int = 0
    """The end-of-sequence token that ends every target and stops generation."""
    tokenizer: Any = None
    """Turns generated ids back into text: a ``tokenizers.Tokenizer`` or a transformers tokenizer."""

    def decode(self, sequences: list[list[int]]) -> list[str]:
        """Generated ids to text, each cut at its first end-of-sequence, special tokens dropped."""
        cut = [s[:s.index(self.eos_id)] if self.eos_id in s else s for s in sequences]
        if hasattr(self.tokenizer, "batch_decode"):
            return self.tokenizer.batch_decode(cut, skip_special_tokens=True)
        return self.tokenizer.decode_batch(cut, skip_special_tokens=True)


def _pair_columns(ds, d: DataSpec, where: str, *, evaluation: bool = False) -> Pairs:
    """The split's (sources, targets); an empty field is an empty text."""
    text_key = "eval_text_column" if evaluation and d.eval_text_column else "text_column"
    for key in (text_key, "target_column"):
        if getattr(d, key) not in ds.column_names:
            raise SpecError(f"data.{key}: column {getattr(d, key)!r} not in {where} "
                            f"(columns: {', '.join(ds.column_names)})")
    sources, targets = (["" if t is None else str(t) for t in ds[getattr(d, key)]]
                        for key in (text_key, "target_column"))
    return sources, targets


def load_text_pairs(spec: SearchSpec) -> tuple[Pairs, Pairs, Pairs | None]:
    """``load_texts`` for seq2seq: (train sources, targets), (eval sources, targets) and, with
    ``data.holdout_examples``, the dev pairs (the eval set is then held out of the training set)."""
    d = spec.data
    if d.source == "builtin" and d.builtin_task != "translation":
        raise SpecError(f"data.builtin_task: task seq2seq needs source-target pairs; the built-in {d.builtin_task} "
                        f"task has none (set data.builtin_task: translation)")
    if d.source == "builtin":
        train = builtin_translation(d.builtin_train_examples, seed=1)
        evaluation = builtin_translation(d.builtin_eval_examples, seed=2)
    else:
        (train_split, eval_split), wheres = loaded_splits(d)
        train = _pair_columns(train_split, d, wheres[0])
        evaluation = _pair_columns(eval_split, d, wheres[1], evaluation=True)
    return cut_splits(train, evaluation, d)


def _seq2seq_word_tokenizer(texts: list[str], vocab_size: int):
    """A word-level tokenizer trained on sources and targets together (one vocabulary, as T5 shares its
    embeddings between encoder and decoder); every sequence ends with [SEP] as its end-of-sequence."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                                             show_progress=False))
    eos_id, pad_id = tok.token_to_id("[SEP]"), tok.token_to_id("[PAD]")
    tok.post_processor = processors.TemplateProcessing(single="$A [SEP]", special_tokens=[("[SEP]", eos_id)])

    def encode(batch: list[str], max_len: int) -> tuple[np.ndarray, np.ndarray]:
        tok.enable_truncation(max_length=max_len)
        tok.enable_padding(pad_id=pad_id, pad_token="[PAD]", length=max_len)
        out = tok.encode_batch(batch)
        return (np.array([e.ids for e in out], dtype=np.int64),
                np.array([e.attention_mask for e in out], dtype=np.int64))

    return encode, tok.get_vocab_size(), pad_id, eos_id, tok


def _seq2seq_pretrained_tokenizer(name: str):
    tok = load_pretrained_tokenizer(name)
    if tok.eos_token_id is None or tok.pad_token_id is None:
        raise SpecError(f"model.tokenizer: {name!r} has no end-of-sequence or padding token, which seq2seq "
                        f"targets need")

    def encode(batch: list[str], max_len: int) -> tuple[np.ndarray, np.ndarray]:
        out = tok(batch, truncation=True, padding="max_length", max_length=max_len, return_tensors="np")
        return out["input_ids"].astype(np.int64), out["attention_mask"].astype(np.int64)

    return encode, len(tok), tok.pad_token_id, tok.eos_token_id, tok


def target_labels(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Target ids as labels: -100 where the target is padding, so the loss skips it."""
    return np.where(mask == 1, ids, -100).astype(np.int64)


def prepare_seq2seq_data(spec: SearchSpec) -> Seq2SeqData:
    """Load and tokenize a seq2seq task's source-target pairs (``load_text_pairs``)."""
    (train_src, train_tgt), (eval_src, eval_tgt), dev = load_text_pairs(spec)
    d = spec.data
    tokenizer_name = spec.model.tokenizer or spec.model.name
    if tokenizer_name:
        encode, vocab_size, pad_id, eos_id, tok = _seq2seq_pretrained_tokenizer(tokenizer_name)
    else:
        encode, vocab_size, pad_id, eos_id, tok = _seq2seq_word_tokenizer(train_src + train_tgt, spec.model.vocab_size)

    def arrays(sources: list[str], targets: list[str]) -> tuple[Any, Any, Any]:
        ids, mask = encode(sources, d.max_seq_length)
        return ids, mask, target_labels(*encode(targets, d.max_target_length))

    prepared = Seq2SeqData(*arrays(train_src, train_tgt), *arrays(eval_src, eval_tgt), vocab_size, 0, pad_id,
                           eval_references=list(eval_tgt), eos_id=eos_id, tokenizer=tok)
    if dev:
        prepared.dev_ids, prepared.dev_mask, prepared.dev_labels = arrays(*dev)
        prepared.dev_references = list(dev[1])
    return prepared
