"""A ``ray.data.Dataset`` as ``run_search(train_dataset=…)``: a tokenised corpus the user already holds in Ray Data,
searched as a streamed Parquet corpus (``data.source: parquet``, docs/large-models.md), on the spec's model or on
``model_init``'s (``sources.user_stream``).

The dataset is written once, by Ray Data's own write tasks, as Parquet shards into a fresh folder under the
search's ``storage_path`` (``<storage_path>/datasets/<name>-<time>[-n]/``), and the search then runs on that folder as
on any Parquet corpus: the driver reads footers and the evaluation rows only, the trials stream their rows through
Ray Data, and the experiment's spec names the folder, so ``--resume`` finds the same rows. The dataset is never
materialised on the driver, nor put whole into the object store: ``write_parquet`` streams its blocks to the files.
The last shard in name order is the evaluation set (as for any Parquet corpus): a dataset written as one block,
one file, is refused for it.
"""

from __future__ import annotations

import copy
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

from cbs_ray.data.parquet_checks import causes
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.schema import SearchSpec

__all__ = ["is_ray_dataset", "search_ray_dataset", "removed_on_refusal", "estimated_bytes"]


def is_ray_dataset(value: Any) -> bool:
    """Whether ``value`` is a ``ray.data.Dataset`` (asked by its class's module: Ray is not imported to ask)."""
    return any(kind.__module__.startswith("ray.data") and kind.__name__ == "Dataset" for kind in type(value).__mro__)


def search_ray_dataset(spec: SearchSpec, dataset, others: dict[str, Any], *, model_init=None,
                       dry_run: bool = False) -> SearchSpec:
    """A copy of ``spec`` that searches ``dataset`` written as Parquet shards (``data.source: parquet``,
    ``data.path``: the folder written). ``others``: ``run_search``'s object arguments about data, which must be
    unset (the dataset is streamed as Parquet, its last shard the evaluation set). The spec's model trains on it,
    or ``model_init``'s (``sources.user_stream``), whose forward is checked against the corpus's columns first
    (``object_checks.check_model_for_corpus``). One ``SpecError`` line for bad input, before anything is
    written."""
    given = [name for name, value in others.items() if value is not None]
    if given:
        raise SpecError(f"{given[0]}: not taken with a ray.data.Dataset train_dataset (it is streamed as Parquet, "
                        f"and its last shard is the evaluation set)")
    if spec.task != "causal-lm":
        raise SpecError(f"train_dataset: a ray.data.Dataset is searched as a causal LM's corpus; set task: causal-lm "
                        f"(got {spec.task})")
    if "://" in spec.storage_path and not spec.storage_path.startswith("file://"):
        raise SpecError(f"storage_path: a ray.data.Dataset is written as Parquet under a local storage_path (got "
                        f"{spec.storage_path}); write it there yourself and set data.source: parquet, data.path")
    if spec.data.source != "builtin" or spec.data.path:
        raise SpecError("data.source: the train_dataset given is the data; leave data.source and data.path unset")
    if model_init is not None:
        from cbs_ray.sources.object_checks import check_model_for_corpus  # (torch; the spec's model needs it not)

        check_model_for_corpus(spec, model_init)
    datasets = Path(spec.storage_uri.removeprefix("file://")) / "datasets"
    base = f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if dry_run:
        raise SpecError(f"train_dataset: a ray.data.Dataset is written as Parquet shards when the search starts "
                        f"(into {datasets}/); dry-run that folder with data.source: parquet, data.path")
    folder = _fresh_folder(_datasets_folder(datasets), base)
    with removed_on_refusal(str(folder)):
        _check_free_space(dataset, datasets)
        _write(dataset, folder)
        shards = sorted(folder.glob("*.parquet"))
        if len(shards) < 2:
            raise SpecError(f"train_dataset: written as {len(shards)} Parquet shard into {folder} (removed); the last "
                            f"shard is the evaluation set's, so at least two are needed (dataset.repartition(n) "
                            f"before passing it)")
    searched = copy.deepcopy(spec)
    searched.data.source, searched.data.path = "parquet", str(folder)
    print(f"train_dataset: the ray.data.Dataset written as {len(shards)} Parquet shards into {folder}", flush=True)
    return searched


def _datasets_folder(datasets: Path) -> Path:
    """``<storage_path>/datasets``, made where missing; one line where a link or anything but a folder stands
    there (the shards are written only into a folder of the storage's own)."""
    if datasets.is_symlink():  # dangling or not: never followed
        raise SpecError(f"storage_path: {datasets} is a symbolic link; the dataset's shards are written only into "
                        f"a folder of the storage's own")
    try:
        datasets.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file, a FIFO: exist_ok accepts only a folder
        raise SpecError(f"storage_path: {datasets} is not a folder; the dataset's shards are written into "
                        f"<storage_path>/datasets/: move that file away") from None
    except OSError as e:
        raise SpecError(f"storage_path: cannot make {datasets} ({e.strerror})") from None
    return datasets


def _fresh_folder(datasets: Path, base: str) -> Path:
    """A new, empty folder ``<datasets>/<base>``, with ``-2``, ``-3``, ... when a search of the same name started in
    the same second already took it (as experiment folders, ``tune.runner.new_experiment``). ``mkdir`` is atomic,
    so two searches never write into one, and nothing is written through a link planted there."""
    for n in range(1, 1000):
        folder = datasets / (base if n == 1 else f"{base}-{n}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
        except OSError as e:
            raise SpecError(f"storage_path: cannot make {folder} ({e.strerror})") from None
    raise SpecError(f"storage_path: {datasets} holds 999 datasets named {base}; remove the old ones")


@contextmanager
def removed_on_refusal(folder: Optional[str]) -> Iterator[None]:
    """The dataset's Parquet copy ``folder`` removed where what runs inside refuses or fails (a write cut short, a
    dataset of one shard, rows the driver's checks refuse): nothing of a search that never started stays in the
    storage. None: nothing was written."""
    try:
        yield
    except BaseException:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        raise


def estimated_bytes(dataset) -> Optional[int]:
    """The dataset's in-memory size where Ray Data knows it without computing anything (a dataset from items or
    from arrays, a materialised one), else None. Parquet is usually smaller: an estimate from above."""
    try:
        size = dataset._logical_plan.dag.infer_metadata().size_bytes
    except Exception:
        return None
    return int(size) if isinstance(size, int) and size >= 0 else None


def _check_free_space(dataset, datasets: Path) -> None:
    """A ``SpecError`` line where the storage has less room than the dataset's estimated size, before writing."""
    size = estimated_bytes(dataset)
    free = shutil.disk_usage(datasets).free
    if size is not None and size > free:
        raise SpecError(f"storage_path: the ray.data.Dataset takes about {size / 1e6:.1f} MB in memory and {datasets} "
                        f"has {free / 1e6:.1f} MB free; free some space or set storage_path elsewhere")


def _write(dataset, folder: Path) -> None:
    """``dataset.write_parquet`` into ``folder`` (Ray Data's write tasks: block by block, nothing gathered on the
    driver); a write that fails on the storage (a full disk) is one ``SpecError`` line, not Ray's several hundred."""
    try:
        dataset.write_parquet(str(folder))
    except Exception as e:
        storage = next((c for c in causes(e) if isinstance(c, OSError) and c.strerror), None)
        if storage is None:
            raise
        raise SpecError(f"storage_path: writing the ray.data.Dataset as Parquet into {folder} failed "
                        f"({storage.strerror}); the partial copy is removed") from None
