"""Data from the hub (``datasets.load_dataset(hub_name, hub_config)``, e.g. ``glue``/``sst2``) and local
files (csv / tsv / json(l) / parquet through ``datasets``' own file builders): the text and label columns,
label ids, and a held-out split where the data have none.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from cbs_ray.data.arrays import Texts
from cbs_ray.data.builtin import builtin_sentiment
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.paths import expand_user
from cbs_ray.spec.schema import DataSpec, SearchSpec

__all__ = ["load_texts"]


# ---- loading text ----------------------------------------------------------------------------------

def _file_dataset(path: str, key: str):
    import datasets

    path = str(expand_user(path, f"data.{key}"))  # as validation reads it
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


def loaded_splits(d: DataSpec) -> tuple[tuple, tuple[str, str]]:
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
            loaded[key] = _file_dataset(getattr(d, key), key)
        except Exception as e:
            raise SpecError(f"data.{key}: cannot read: {str(e).splitlines()[0]}") from None
    return (loaded["train_file"], loaded["eval_file"]), (str(d.train_file), str(d.eval_file))


def cut_splits(train: tuple, evaluation: tuple, d: DataSpec) -> tuple[tuple, tuple, tuple | None]:
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
        (train_split, eval_split), wheres = loaded_splits(d)
        train = _columns(train_split, d, needs_labels, wheres[0])
        evaluation = _columns(eval_split, d, needs_labels, wheres[1], evaluation=True)
        if needs_labels:
            train_labels, eval_labels = label_ids([(wheres[0], train[1]), (wheres[1], evaluation[1])])
            train, evaluation = (train[0], train_labels), (evaluation[0], eval_labels)
    return cut_splits(train, evaluation, d)
