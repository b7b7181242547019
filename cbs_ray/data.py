"""Training and evaluation data: loaded, tokenized once in the driver, handed to trials as arrays.

Three sources (``data.source``):

* ``builtin`` – an offline sentiment task generated here, so the default run and the tests need no
  download: sentences of filler words with an odd number of sentiment words, some negated by "not";
  the label says whether positive polarity outnumbers negative, and 5 % of labels are flipped so the
  best reachable accuracy is about 0.95 (a ceiling that makes quality differences between batch sizes
  measurable instead of everybody reaching 1.0).
* ``hub`` – ``datasets.load_dataset(hub_name, hub_config)``, e.g. ``glue``/``sst2``.
* ``files`` – local csv / tsv / json(l) / parquet through ``datasets``' own file builders.

Tokenization: a pretrained model's tokenizer (``transformers.AutoTokenizer``), or for models built from
a config a word-level tokenizer trained locally on the training text with ``tokenizers``.

Packing (``data.packing``, on with ``training.budget_tokens``; causal LMs only): the texts, tokenized whole
and each ended by EOS (or [SEP]), are concatenated and cut into blocks of exactly ``max_seq_length`` tokens,
as pretraining does (``pack``). The arrays keep their shapes (the mask is all ones), so the training loop
needs no change, and every sample is the same number of tokens.
"""

from __future__ import annotations

import csv
import functools
import itertools
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .budget import packing_on
from .spec import DataSpec, SearchSpec, SpecError

__all__ = ["PreparedData", "Seq2SeqData", "prepare_data", "prepare_seq2seq_data", "builtin_sentiment",
           "builtin_translation", "translate", "translation_dictionary", "load_texts", "load_text_pairs", "pack",
           "token_stream", "blocks"]

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@dataclass
class PreparedData:
    """Tokenized arrays (int64, shape [examples, max_seq_length]) plus what the model needs to know."""

    train_ids: np.ndarray
    train_mask: np.ndarray
    train_labels: np.ndarray
    eval_ids: np.ndarray
    eval_mask: np.ndarray
    eval_labels: np.ndarray
    vocab_size: int
    num_labels: int
    pad_id: int
    dev_ids: np.ndarray | None = None
    """With ``data.holdout_examples`` the eval arrays hold the held-out training sample the search selects
    on, and these the eval file/split, evaluated once at the end of each trial (``dev_*`` metrics)."""
    dev_mask: np.ndarray | None = None
    dev_labels: np.ndarray | None = None

    @property
    def train_examples(self) -> int:
        return len(self.train_ids)

    @property
    def eval_examples(self) -> int:
        return len(self.eval_ids)


# ---- the built-in offline task ---------------------------------------------------------------------

POSITIVE = ("good great excellent superb lovely brilliant fine wonderful charming delightful "
            "moving clever fresh warm vivid gripping solid elegant funny tender").split()
NEGATIVE = ("bad awful dull poor boring weak clumsy tedious bland messy "
            "flat stale shallow lifeless silly grim sloppy tired hollow muddled").split()


def _filler_words(count: int, rng: random.Random) -> list[str]:
    syllables = ["ka", "lo", "mi", "ren", "to", "sa", "vi", "dun", "pe", "ro", "ta", "ne", "shu", "bo"]
    words: set[str] = set()
    while len(words) < count:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 3))))
    return sorted(words)


def builtin_sentiment(examples: int, *, seed: int, label_noise: float = 0.05, negation: float = 0.0,
                      counts: tuple[int, ...] = (1, 1, 3)) -> tuple[list[str], list[int]]:
    """Generate ``examples`` sentences and their 0/1 labels, deterministically from ``seed``.

    Each sentence is 3-10 filler words with a number of sentiment words drawn from ``counts`` (an odd
    number: no ties) inserted at random places; the label is whether positive words outnumber negative
    ones, then flipped with probability ``label_noise``. ``negation`` is the chance that a sentiment word
    is preceded by "not", which flips it. The default has no negation: with it, a tiny model learns the
    flip as a sudden jump after a plateau whose length varies from seed to seed by more than a factor 2
    of optimizer steps, which made the default search's critical batch a coin toss; without it, accuracy
    rises smoothly with steps and reaches the ~0.95 ceiling the label noise leaves."""
    rng = random.Random(seed)
    filler = _filler_words(60, random.Random(0))
    texts, labels = [], []
    for _ in range(examples):
        words = [rng.choice(filler) for _ in range(rng.randint(3, 10))]
        score = 0
        for _ in range(rng.choice(counts)):
            positive = rng.random() < 0.5
            word = rng.choice(POSITIVE if positive else NEGATIVE)
            negated = negation > 0 and rng.random() < negation
            polarity = (1 if positive else -1) * (-1 if negated else 1)
            score += polarity
            at = rng.randint(0, len(words))
            words[at:at] = ["not", word] if negated else [word]
        label = int(score > 0)
        if rng.random() < label_noise:
            label = 1 - label
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


# ---- the built-in translation task (seq2seq) -------------------------------------------------------

NOUNS = "dog cat bird horse fish child king river house boat".split()
ADJECTIVES = "red big old small green happy".split()
VERBS = "sees finds likes carries hears".split()
DETERMINERS = "the a every".split()
CONNECTORS = "and near with".split()


def translation_dictionary() -> dict[str, str]:
    """The built-in translation's fixed dictionary: every source word to its own made-up target word
    (syllables drawn from seed 0, the same in every run), one to one."""
    rng = random.Random(0)
    syllables = ["ka", "lo", "mi", "ren", "to", "sa", "vi", "dun", "pe", "ro", "ta", "ne", "shu", "bo", "gal", "ir"]
    source = NOUNS + ADJECTIVES + VERBS + DETERMINERS + CONNECTORS
    targets: list[str] = []
    while len(targets) < len(source):
        word = "".join(rng.choice(syllables) for _ in range(rng.randint(2, 3)))
        if word not in targets:
            targets.append(word)
    return dict(zip(source, targets))


def translate(words: list[str], dictionary: dict[str, str]) -> list[str]:
    """The built-in translation of a source sentence: each word through ``dictionary``, in order, except
    that an adjective goes behind the noun that follows it ("the red dog" -> "the' dog' red'")."""
    out: list[str] = []
    i = 0
    while i < len(words):
        if words[i] in ADJECTIVES and i + 1 < len(words) and words[i + 1] in NOUNS:
            out += [dictionary[words[i + 1]], dictionary[words[i]]]
            i += 2
        else:
            out.append(dictionary[words[i]])
            i += 1
    return out


def builtin_translation(examples: int, *, seed: int, connected: float = 0.0) -> tuple[list[str], list[str]]:
    """Generate ``examples`` (source, target) sentence pairs, deterministically from ``seed``.

    A source is ``noun-phrase verb noun-phrase`` (3 to 7 words), with probability ``connected`` followed by
    ``connector noun-phrase`` (up to 11 words), a noun phrase being ``[determiner] [adjective] noun``; its
    target is ``translate`` of it: a word for word dictionary lookup plus one reordering rule. There is no
    noise: a perfect model reaches BLEU 100, and how close a batch size gets within the budget is what the
    search compares. (Without the connected sentences a 2-layer T5 learns it about twice as fast: with
    relative positions only, aligning the target's words with the source's is the hard part.)"""
    rng = random.Random(seed)
    dictionary = translation_dictionary()

    def noun_phrase() -> list[str]:
        words = [rng.choice(DETERMINERS)] if rng.random() < 0.6 else []
        words += [rng.choice(ADJECTIVES)] if rng.random() < 0.5 else []
        return words + [rng.choice(NOUNS)]

    sources, targets = [], []
    for _ in range(examples):
        words = noun_phrase() + [rng.choice(VERBS)] + noun_phrase()
        if rng.random() < connected:
            words += [rng.choice(CONNECTORS)] + noun_phrase()
        sources.append(" ".join(words))
        targets.append(" ".join(translate(words, dictionary)))
    return sources, targets


# ---- loading text ----------------------------------------------------------------------------------

def _file_dataset(path: str):
    import datasets

    path = str(Path(path).expanduser())  # as validation reads it
    suffix = Path(path).suffix.lower()
    if suffix in (".csv", ".tsv"):
        kwargs = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if suffix == ".tsv" else {}
        return datasets.load_dataset("csv", data_files=path, split="train", **kwargs)
    if suffix in (".json", ".jsonl"):
        return datasets.load_dataset("json", data_files=path, split="train")
    return datasets.load_dataset("parquet", data_files=path, split="train")


def _columns(ds, d: DataSpec, needs_labels: bool, where: str, *,
             evaluation: bool = False) -> tuple[list[str], list]:
    """The split's texts (an empty field is an empty text) and its labels as stored (see ``label_ids``)."""
    text_key = "eval_text_column" if evaluation and d.eval_text_column else "text_column"
    text_column = getattr(d, text_key)
    for key, column in ((text_key, text_column), ("label_column", d.label_column)):
        if key == "label_column" and not needs_labels:
            continue
        if column not in ds.column_names:
            raise SpecError(f"data.{key}: column {column!r} not in {where} "
                            f"(columns: {', '.join(ds.column_names)})")
    texts = ["" if t is None else str(t) for t in ds[text_column]]
    labels = list(ds[d.label_column]) if needs_labels else [0] * len(texts)
    return texts, labels


def _is_integer(x) -> bool:
    if isinstance(x, (int, np.integer)):
        return True
    if isinstance(x, float):
        return x.is_integer()
    return isinstance(x, str) and x.strip().lstrip("-").isdigit()


def label_ids(splits: list[tuple[str, list]]) -> list[list[int]]:
    """Class ids for the labels of each (where, labels) split, training split first: integers as they are
    (they must be non-negative), or names (e.g. "positive") numbered in the sorted order of the training
    split's names. An empty label, a negative one, or a name the training split lacks is a SpecError naming
    the split."""
    for where, labels in splits:
        for row, x in enumerate(labels, start=1):
            if x is None or (isinstance(x, float) and math.isnan(x)) or (isinstance(x, str) and not x.strip()):
                raise SpecError(f"data.label_column: empty label in {where} (row {row})")
    if all(_is_integer(x) for _, labels in splits for x in labels):
        ids = [[int(x) for x in labels] for _, labels in splits]  # integral floats and digit strings too
        for (where, _), values in zip(splits, ids):
            if values and min(values) < 0:
                raise SpecError(f"data.label_column: labels must be non-negative integers ({where} has {min(values)})")
        return ids
    names = sorted({str(x).strip() for x in splits[0][1]})
    index = {name: i for i, name in enumerate(names)}
    for where, labels in splits[1:]:
        unknown = sorted({str(x).strip() for x in labels} - index.keys())
        if unknown:
            raise SpecError(f"data.label_column: label {unknown[0]!r} in {where} does not occur in the training "
                            f"labels ({', '.join(names)})")
    return [[index[str(x).strip()] for x in labels] for _, labels in splits]


Texts = tuple[list[str], list[int]]


def hold_out(train: Texts, count: int, *, seed: int = 0) -> tuple[Texts, Texts]:
    """(the rest, ``count`` examples drawn at random without replacement): a fixed sample for a given seed,
    whatever the search's seed, so that every run of a space selects on the same examples."""
    texts, labels = train
    if count >= len(texts):
        raise SpecError(f"data.holdout_examples: {count} would leave nothing to train on "
                        f"(the training set has {len(texts)} examples)")
    held = set(np.random.default_rng(seed).choice(len(texts), size=count, replace=False).tolist())
    rest = [i for i in range(len(texts)) if i not in held]
    held_in_order = sorted(held)
    return (([texts[i] for i in rest], [labels[i] for i in rest]),
            ([texts[i] for i in held_in_order], [labels[i] for i in held_in_order]))


def _loaded_splits(d: DataSpec) -> tuple[tuple, tuple[str, str]]:
    """The training and evaluation splits of ``data.source`` hub or files, as loaded (columns not yet
    read), and what errors call them (``split train``, the file's path)."""
    if d.source == "hub":
        import datasets

        try:
            ds = datasets.load_dataset(d.hub_name, d.hub_config)
        except Exception as e:  # the hub raises many types; the user needs the one line
            raise SpecError(f"data.hub_name: cannot load {d.hub_name!r}/{d.hub_config!r}: "
                            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        for key in ("train_split", "eval_split"):
            if getattr(d, key) not in ds:
                raise SpecError(f"data.{key}: no split {getattr(d, key)!r} (splits: {', '.join(ds)})")
        return (ds[d.train_split], ds[d.eval_split]), (f"split {d.train_split}", f"split {d.eval_split}")
    loaded = {}
    for key in ("train_file", "eval_file"):
        try:
            loaded[key] = _file_dataset(getattr(d, key))
        except Exception as e:
            raise SpecError(f"data.{key}: cannot read: {str(e).splitlines()[0]}") from None
    return (loaded["train_file"], loaded["eval_file"]), (d.train_file, d.eval_file)


def _cut_splits(train: tuple, evaluation: tuple, d: DataSpec) -> tuple[tuple, tuple, tuple | None]:
    """``max_eval_examples``, then ``holdout_examples`` (the eval set becomes the dev set, a held-out sample
    of the training set the eval set), then ``max_train_examples``; each split a tuple of parallel lists."""
    if d.max_eval_examples:
        evaluation = tuple(column[:d.max_eval_examples] for column in evaluation)
    dev = None
    if d.holdout_examples:
        train, held = hold_out(train, d.holdout_examples)
        evaluation, dev = held, evaluation
    if d.max_train_examples:
        train = tuple(column[:d.max_train_examples] for column in train)
    if not train[0] or not evaluation[0]:
        raise SpecError("data: the training or evaluation set is empty")
    return train, evaluation, dev


def load_texts(spec: SearchSpec) -> tuple[Texts, Texts, Texts | None]:
    """(train texts, labels), (eval texts, labels) and, with ``data.holdout_examples``, (dev texts,
    labels): then the eval set is that many examples held out of the training set and the dev set is the
    eval file/split."""
    d = spec.data
    needs_labels = spec.task == "sequence-classification"
    if d.source == "builtin":
        train = builtin_sentiment(d.builtin_train_examples, seed=1, negation=d.builtin_negation)
        evaluation = builtin_sentiment(d.builtin_eval_examples, seed=2, negation=d.builtin_negation)
    else:
        (train_split, eval_split), wheres = _loaded_splits(d)
        train = _columns(train_split, d, needs_labels, wheres[0])
        evaluation = _columns(eval_split, d, needs_labels, wheres[1], evaluation=True)
        if needs_labels:
            train_labels, eval_labels = label_ids([(wheres[0], train[1]), (wheres[1], evaluation[1])])
            train, evaluation = (train[0], train_labels), (evaluation[0], eval_labels)
    return _cut_splits(train, evaluation, d)


# ---- packing: a causal LM's texts as one stream of full blocks -------------------------------------

def token_stream(ids, mask=None, separator: int | None = None) -> np.ndarray:
    """The tokens of every example in order as one int64 array: an example's tokens are those its ``mask``
    keeps (all of them without a mask; rows of ragged lists or of padded arrays), followed by ``separator``
    unless they already end with it; an example without tokens adds nothing."""
    pieces = []
    for i, row in enumerate(ids):
        tokens = row if mask is None else np.asarray(row)[np.asarray(mask[i]) != 0]
        if len(tokens):
            pieces.append(tokens)
            if separator is not None and tokens[-1] != separator:
                pieces.append((separator,))
    return np.fromiter(itertools.chain.from_iterable(pieces), dtype=np.int64)


def blocks(stream: np.ndarray, block_length: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, mask) of shape [blocks, block_length]: ``stream`` cut into whole blocks, the last partial block
    dropped; the mask is all ones (no padding)."""
    count = len(stream) // block_length
    ids = np.asarray(stream[:count * block_length], dtype=np.int64).reshape(count, block_length)
    return ids, np.ones_like(ids)


def pack(ids, mask=None, *, block_length: int, separator: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Pack examples as pretraining does: concatenate their tokens (``token_stream``: each followed by the
    ``separator``, e.g. EOS, and without padding) and cut the stream into blocks of exactly ``block_length``
    tokens (``blocks``), so every sample holds the same tokens and none is padding."""
    return blocks(token_stream(ids, mask, separator), block_length)


def _pack_texts(documents, texts: list[str], *, block_length: int, chunk: int = 10_000) -> tuple[np.ndarray, np.ndarray]:
    """``texts`` tokenized whole by ``documents`` (each ending in the tokenizer's EOS or [SEP]) and packed, a
    chunk of texts at a time so that only the stream, not every text's token list, is held at once. Blank
    texts (wikitext's empty lines) add nothing. SpecError when not one block fills."""
    texts = [t for t in texts if t.strip()]
    parts = [token_stream(documents(texts[i:i + chunk])) for i in range(0, len(texts), chunk)]
    stream = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if len(stream) < block_length:
        raise SpecError(f"data.max_seq_length: packed, the {len(texts)} texts hold {len(stream)} tokens, not one "
                        f"block of {block_length}")
    return blocks(stream, block_length)


# ---- tokenization ----------------------------------------------------------------------------------

def _train_word_tokenizer(texts: list[str], vocab_size: int, max_len: int):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    whole = Tokenizer.from_str(tok.to_str())  # for packing: neither truncated nor padded
    tok.enable_truncation(max_length=max_len)
    tok.enable_padding(pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]", length=max_len)

    def encode(batch: list[str]) -> tuple[np.ndarray, np.ndarray]:
        out = tok.encode_batch(batch)
        return (np.array([e.ids for e in out], dtype=np.int64),
                np.array([e.attention_mask for e in out], dtype=np.int64))

    def documents(batch: list[str]) -> list[list[int]]:
        return [e.ids for e in whole.encode_batch(batch)]  # [CLS] … [SEP]: the [SEP] ends each document

    return encode, documents, tok.get_vocab_size(), tok.token_to_id("[PAD]")


def _pretrained_tokenizer(name: str, max_len: int):
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(name)
    except Exception as e:
        raise SpecError(f"model.tokenizer: cannot load {name!r}: {str(e).splitlines()[0]}") from None
    if tok.pad_token is None:  # GPT-style tokenizers have none; pad with EOS, masked out anyway
        tok.pad_token = tok.eos_token

    def encode(batch: list[str]) -> tuple[np.ndarray, np.ndarray]:
        out = tok(batch, truncation=True, padding="max_length", max_length=max_len, return_tensors="np")
        return out["input_ids"].astype(np.int64), out["attention_mask"].astype(np.int64)

    def documents(batch: list[str]) -> list[list[int]]:
        # Whole texts (a packed block spans them); GPT-2 adds no special tokens, so each text ends in EOS.
        ids = tok(batch, truncation=False, padding=False, verbose=False)["input_ids"]
        eos = tok.eos_token_id
        return [d + [eos] if d and eos is not None and d[-1] != eos else d for d in ids]

    return encode, documents, len(tok), tok.pad_token_id


def prepare_data(spec: SearchSpec) -> PreparedData:
    """Load and tokenize the spec's data. Raises SpecError for missing files, columns or splits."""
    if spec.task == "seq2seq":
        return prepare_seq2seq_data(spec)
    (train_texts, train_labels), (eval_texts, eval_labels), dev = load_texts(spec)
    max_len = spec.data.max_seq_length
    tokenizer_name = spec.model.tokenizer or spec.model.name
    if tokenizer_name:
        encode, documents, vocab_size, pad_id = _pretrained_tokenizer(tokenizer_name, max_len)
    else:
        encode, documents, vocab_size, pad_id = _train_word_tokenizer(train_texts, spec.model.vocab_size, max_len)
    if packing_on(spec):  # a causal LM's texts as one stream cut into full blocks (the labels are unused)
        encode = functools.partial(_pack_texts, documents, block_length=max_len)
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


Pairs = tuple[list[str], list[str]]


def _pair_columns(ds, d: DataSpec, where: str, *, evaluation: bool = False) -> Pairs:
    """The split's (sources, targets); an empty field is an empty text."""
    text_key = "eval_text_column" if evaluation and d.eval_text_column else "text_column"
    for key in (text_key, "target_column"):
        if getattr(d, key) not in ds.column_names:
            raise SpecError(f"data.{key}: column {getattr(d, key)!r} not in {where} "
                            f"(columns: {', '.join(ds.column_names)})")
    return tuple(["" if t is None else str(t) for t in ds[getattr(d, key)]] for key in (text_key, "target_column"))


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
        (train_split, eval_split), wheres = _loaded_splits(d)
        train = _pair_columns(train_split, d, wheres[0])
        evaluation = _pair_columns(eval_split, d, wheres[1], evaluation=True)
    return _cut_splits(train, evaluation, d)


def _seq2seq_word_tokenizer(texts: list[str], vocab_size: int):
    """A word-level tokenizer trained on sources and targets together (one vocabulary, as T5 shares its
    embeddings between encoder and decoder); every sequence ends with [SEP] as its end-of-sequence."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS))
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
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(name)
    except Exception as e:
        raise SpecError(f"model.tokenizer: cannot load {name!r}: {str(e).splitlines()[0]}") from None
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

    def arrays(sources: list[str], targets: list[str]):
        ids, mask = encode(sources, d.max_seq_length)
        return ids, mask, target_labels(*encode(targets, d.max_target_length))

    prepared = Seq2SeqData(*arrays(train_src, train_tgt), *arrays(eval_src, eval_tgt), vocab_size, 0, pad_id,
                           eval_references=list(eval_tgt), eos_id=eos_id, tokenizer=tok)
    if dev:
        prepared.dev_ids, prepared.dev_mask, prepared.dev_labels = arrays(*dev)
        prepared.dev_references = list(dev[1])
    return prepared
