"""Training and evaluation data: loaded, tokenized once in the driver, handed to trials as arrays
(``data.arrays.PreparedData``). Three sources (``data.source``): ``builtin`` (``data.builtin``), ``hub`` and ``files``
(``data.files``); tokenization and packing in ``data.tokenize``.
"""

from __future__ import annotations

import functools

import numpy as np

from cbs_ray.data.arrays import PreparedData
from cbs_ray.data.files import load_texts
from cbs_ray.data.markov import FRESH_BUDGETS, markov_data
from cbs_ray.data.parquet import prepare_parquet_data
from cbs_ray.data.python_source import VOCAB_SIZE, python_source_corpus
from cbs_ray.data.seq2seq_pairs import prepare_seq2seq_data
from cbs_ray.data.tokenize import pack_texts, pretrained_tokenizer, train_word_tokenizer
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.resolve import packing_on
from cbs_ray.spec.schema import SearchSpec

__all__ = ["prepare_data", "prepare_markov_data", "prepare_python_source_data"]


def prepare_data(spec: SearchSpec) -> PreparedData:
    """Load and tokenize the spec's data. Raises SpecError for missing files, columns or splits."""
    if spec.task == "seq2seq":
        return prepare_seq2seq_data(spec)
    if spec.data.source == "parquet":  # streamed: the driver reads the schemas, row counts and evaluation rows
        return prepare_parquet_data(spec)
    if spec.data.source == "builtin" and spec.data.builtin_task == "markov":
        return prepare_markov_data(spec)
    if spec.data.source == "builtin" and spec.data.builtin_task == "python_source":
        return prepare_python_source_data(spec)
    (train_texts, train_labels), (eval_texts, eval_labels), dev = load_texts(spec)
    max_len = spec.data.max_seq_length
    tokenizer_name = spec.model.tokenizer or spec.model.name
    if tokenizer_name:
        encode, documents, vocab_size, pad_id = pretrained_tokenizer(tokenizer_name, max_len)
    else:
        encode, documents, vocab_size, pad_id = train_word_tokenizer(train_texts, spec.model.vocab_size, max_len)
    if packing_on(spec):  # a causal LM's texts as one stream cut into full blocks (the labels are unused)
        encode = functools.partial(pack_texts, documents, block_length=max_len)
    train_ids, train_mask = encode(train_texts)
    eval_ids, eval_mask = encode(eval_texts)
    if packing_on(spec):
        train_labels, eval_labels = [0] * len(train_ids), [0] * len(eval_ids)
        print(f"packing: {len(train_ids)} training samples of {max_len} tokens ({len(train_ids) * max_len} tokens, "
              f"the last partial block dropped), {len(eval_ids)} evaluation samples", flush=True)
    labels = np.array(train_labels, dtype=np.int64)  # class ids (label_ids): non-negative
    dev_labels = dev[1] if dev else []
    num_labels = (int(max(labels.max(), max(eval_labels), max(dev_labels, default=0))) + 1
                  if spec.task == "sequence-classification" else 0)
    if spec.task == "sequence-classification" and len(set(labels.tolist())) < 2:
        raise SpecError(f"data.label_column: the training labels hold one class ({int(labels[0])}); "
                        "classification needs at least two")
    prepared = PreparedData(train_ids, train_mask, labels, eval_ids, eval_mask,
                            np.array(eval_labels, dtype=np.int64), vocab_size, num_labels, pad_id)
    if dev:
        prepared.dev_ids, prepared.dev_mask = encode(dev[0])
        prepared.dev_labels = np.array(dev_labels, dtype=np.int64)
        if packing_on(spec):
            prepared.dev_labels = np.zeros(len(prepared.dev_ids), dtype=np.int64)
    return prepared


def prepare_markov_data(spec: SearchSpec) -> PreparedData:
    """The built-in ``markov`` language (``data.markov``) as token arrays: its tokens are the ids (no tokenizer,
    no padding: every sequence is ``max_seq_length`` tokens), and the chain's next-token log-probabilities go
    with them for the exact excess loss. The training set holds at least ``FRESH_BUDGETS`` budgets of fresh
    sequences (``data.builtin_train_examples`` if larger); ``max_train_examples`` still cuts it."""
    d, t = spec.data, spec.training
    budget = t.budget_samples if t.budget_samples is not None else (t.budget_tokens or 0) // d.max_seq_length
    train_examples = max(d.builtin_train_examples, FRESH_BUDGETS * budget)
    if d.max_train_examples:
        train_examples = min(train_examples, d.max_train_examples)
    eval_examples = min(d.builtin_eval_examples, d.max_eval_examples or d.builtin_eval_examples)
    chain, train, evaluation = markov_data(
        vocab_size=d.markov_vocab_size, rank=d.markov_rank, zipf_exponent=d.markov_zipf_exponent,
        coupling=d.markov_coupling, seed=d.markov_seed, length=d.max_seq_length, train_examples=train_examples,
        eval_examples=eval_examples)
    zeros = np.zeros
    return PreparedData(train, np.ones_like(train), zeros(len(train), dtype=np.int64), evaluation,
                        np.ones_like(evaluation), zeros(len(evaluation), dtype=np.int64), d.markov_vocab_size, 0, 0,
                        true_next_log_probs=chain.next_log_probs)


def prepare_python_source_data(spec: SearchSpec) -> PreparedData:
    """The built-in ``python_source`` corpus (``data.python_source``) as token arrays: bytes as ids, blocks of
    ``max_seq_length`` (no padding). ``max_train_examples`` keeps the first N training blocks; the evaluation set is
    ``builtin_eval_examples`` blocks (``max_eval_examples`` if smaller) spaced evenly over the held-out files' blocks,
    so that it samples every held-out file rather than the first few in name order."""
    d = spec.data
    corpus = python_source_corpus(d.max_seq_length)
    train = corpus.train[:d.max_train_examples] if d.max_train_examples else corpus.train
    wanted = min(d.builtin_eval_examples, d.max_eval_examples or d.builtin_eval_examples, len(corpus.evaluation))
    evaluation = corpus.evaluation[np.linspace(0, len(corpus.evaluation) - 1, wanted).round().astype(np.int64)]
    zeros = np.zeros
    return PreparedData(train, np.ones_like(train), zeros(len(train), dtype=np.int64), evaluation,
                        np.ones_like(evaluation), zeros(len(evaluation), dtype=np.int64), VOCAB_SIZE, 0, 0)
