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
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .spec import DataSpec, SearchSpec, SpecError

__all__ = ["PreparedData", "prepare_data", "builtin_sentiment", "load_texts"]

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


def load_texts(spec: SearchSpec) -> tuple[Texts, Texts, Texts | None]:
    """(train texts, labels), (eval texts, labels) and, with ``data.holdout_examples``, (dev texts,
    labels): then the eval set is that many examples held out of the training set and the dev set is the
    eval file/split."""
    d = spec.data
    needs_labels = spec.task == "sequence-classification"
    if d.source == "builtin":
        train = builtin_sentiment(d.builtin_train_examples, seed=1, negation=d.builtin_negation)
        evaluation = builtin_sentiment(d.builtin_eval_examples, seed=2, negation=d.builtin_negation)
    elif d.source == "hub":
        import datasets

        try:
            ds = datasets.load_dataset(d.hub_name, d.hub_config)
        except Exception as e:  # the hub raises many types; the user needs the one line
            raise SpecError(f"data.hub_name: cannot load {d.hub_name!r}/{d.hub_config!r}: "
                            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        for key in ("train_split", "eval_split"):
            if getattr(d, key) not in ds:
                raise SpecError(f"data.{key}: no split {getattr(d, key)!r} (splits: {', '.join(ds)})")
        wheres = (f"split {d.train_split}", f"split {d.eval_split}")
        train = _columns(ds[d.train_split], d, needs_labels, wheres[0])
        evaluation = _columns(ds[d.eval_split], d, needs_labels, wheres[1], evaluation=True)
    else:
        loaded = {}
        for key in ("train_file", "eval_file"):
            try:
                loaded[key] = _file_dataset(getattr(d, key))
            except Exception as e:
                raise SpecError(f"data.{key}: cannot read: {str(e).splitlines()[0]}") from None
        wheres = (d.train_file, d.eval_file)
        train = _columns(loaded["train_file"], d, needs_labels, wheres[0])
        evaluation = _columns(loaded["eval_file"], d, needs_labels, wheres[1], evaluation=True)
    if needs_labels and d.source != "builtin":
        train_labels, eval_labels = label_ids([(wheres[0], train[1]), (wheres[1], evaluation[1])])
        train, evaluation = (train[0], train_labels), (evaluation[0], eval_labels)
    if d.max_eval_examples:
        evaluation = (evaluation[0][:d.max_eval_examples], evaluation[1][:d.max_eval_examples])
    dev = None
    if d.holdout_examples:
        train, held = hold_out(train, d.holdout_examples)
        evaluation, dev = held, evaluation
    if d.max_train_examples:
        train = (train[0][:d.max_train_examples], train[1][:d.max_train_examples])
    if not train[0] or not evaluation[0]:
        raise SpecError("data: the training or evaluation set is empty")
    return train, evaluation, dev


# ---- tokenization ----------------------------------------------------------------------------------

def _train_word_tokenizer(texts: list[str], vocab_size: int, max_len: int):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    tok.enable_truncation(max_length=max_len)
    tok.enable_padding(pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]", length=max_len)

    def encode(batch: list[str]) -> tuple[np.ndarray, np.ndarray]:
        out = tok.encode_batch(batch)
        return (np.array([e.ids for e in out], dtype=np.int64),
                np.array([e.attention_mask for e in out], dtype=np.int64))

    return encode, tok.get_vocab_size(), tok.token_to_id("[PAD]")


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

    return encode, len(tok), tok.pad_token_id


def prepare_data(spec: SearchSpec) -> PreparedData:
    """Load and tokenize the spec's data. Raises SpecError for missing files, columns or splits."""
    (train_texts, train_labels), (eval_texts, eval_labels), dev = load_texts(spec)
    max_len = spec.data.max_seq_length
    tokenizer_name = spec.model.tokenizer or spec.model.name
    if tokenizer_name:
        encode, vocab_size, pad_id = _pretrained_tokenizer(tokenizer_name, max_len)
    else:
        encode, vocab_size, pad_id = _train_word_tokenizer(train_texts, spec.model.vocab_size, max_len)
    train_ids, train_mask = encode(train_texts)
    eval_ids, eval_mask = encode(eval_texts)
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
    return prepared
