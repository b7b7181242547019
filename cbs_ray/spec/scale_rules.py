"""The rules of pre-training scale: FSDP (``training.parallelism: fsdp``) and streamed Parquet shards
(``data.source: parquet``), applied by ``spec.rules.validate`` after its own. What needs the model (its blocks) or
the shards' contents (their schemas) is checked once they are at hand, still before Ray starts
(``tune.prepare``)."""

from __future__ import annotations

import stat
from pathlib import Path

from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.paths import expand_user
from cbs_ray.spec.schema import DataSpec, SearchSpec

__all__ = ["SCALE_RULES", "parquet_shards"]


def parquet_shards(path: str) -> list[Path]:
    """The ``*.parquet`` files of the folder ``path``, in name order; a ``SpecError`` where the folder does not
    exist or holds none."""
    folder = expand_user(path, "data.path")
    if not folder.is_dir():
        raise SpecError(f"data.path: no such folder: {path}")
    shards = sorted(folder.glob("*.parquet"))
    if not shards:
        raise SpecError(f"data.path: no *.parquet file in {path}")
    for shard in shards:
        _regular_shard(shard)
    return shards


def _regular_shard(shard: Path) -> None:
    """A ``SpecError`` naming ``shard`` unless it is a regular file (a link to one is): a FIFO would block its
    reader forever, a device could be endless, and a dangling link cannot be read. Checked with ``stat`` before
    anything opens it."""
    try:
        mode = shard.stat().st_mode
    except OSError as e:
        raise SpecError(f"data.path: cannot read the shard {shard} ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
        raise SpecError(f"data.path: {shard} is {kind}, not a regular Parquet file; move it out of the folder")


def _fsdp_runs_what_shards_in_lockstep(spec: SearchSpec) -> None:
    """FSDP's blocks are named only under FSDP. (Every forward under FSDP is a collective, so every rank runs as
    many: the evaluations add spare forwards, a seq2seq generation steps until every rank is done; nothing of
    the spec's is refused for it.)"""
    if spec.training.parallelism != "fsdp" and spec.training.fsdp_block_class is not None:
        raise SpecError("training.fsdp_block_class: names FSDP's blocks; set training.parallelism: fsdp")


def _parquet_is_a_folder_of_token_shards(spec: SearchSpec) -> None:
    """``data.source: parquet``: a causal LM's corpus in a folder that exists and holds shards."""
    d = spec.data
    if d.source != "parquet":
        if d.path is not None:
            raise SpecError("data.path: names a folder of Parquet shards; set data.source: parquet")
        return
    if spec.task != "causal-lm":
        raise SpecError(f"data.source: parquet streams a causal LM's corpus; set task: causal-lm (got {spec.task})")
    if not d.path:
        raise SpecError("data.path: required when data.source is parquet (a folder of *.parquet shards)")
    parquet_shards(d.path)
    if spec.training.budget_epochs is not None:
        raise SpecError("training.budget_epochs: a streamed corpus is not counted before the search; set "
                        "training.budget_samples or training.budget_tokens")
    if d.packing:
        raise SpecError("data.packing: a Parquet corpus is cut into max_seq_length blocks row by row; drop "
                        "data.packing")
    _parquet_takes_no_subsets(d)


def _parquet_takes_no_subsets(d: DataSpec) -> None:
    """The files' and hub's subsets (``max_train_examples``, ``max_eval_examples``, ``holdout_examples``) are not
    applied to a streamed corpus: refused rather than ignored. Its evaluation set is ``data.eval_examples``."""
    for key, instead in (("holdout_examples", "the last shard's first data.eval_examples rows are held out"),
                         ("max_train_examples", "write the training shards you mean to train on, or set "
                                                "training.budget_samples"),
                         ("max_eval_examples", "set data.eval_examples")):
        if getattr(d, key) is not None:
            raise SpecError(f"data.{key}: not applied to a streamed Parquet corpus (data.source: parquet); "
                            f"{instead}")


SCALE_RULES = (_fsdp_runs_what_shards_in_lockstep, _parquet_is_a_folder_of_token_shards)
"""The rules of this module, in the order ``validate`` applies them (after ``spec.rules.CROSS_FIELD_RULES``)."""
