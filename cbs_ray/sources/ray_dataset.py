"""A ``ray.data.Dataset`` as ``run_search(train_dataset=…)``: a tokenised corpus the user already holds in Ray Data,
searched as a streamed Parquet corpus (``data.source: parquet``, docs/large-models.md), on the spec's model or on
``model_init``'s (``sources.user_stream``).

The dataset is written once, by Ray Data's own write tasks, as Parquet shards into a fresh folder under the
search's ``storage_path`` (``<storage_path>/datasets/<name>-<time>/``), and the search then runs on that folder as
on any Parquet corpus: the driver reads footers and the evaluation rows only, the trials stream their rows through
Ray Data, and the experiment's spec names the folder, so ``--resume`` finds the same rows. The dataset is never
materialised on the driver, nor put whole into the object store: ``write_parquet`` streams its blocks to the files.
The last shard in name order is the evaluation set (as for any Parquet corpus): a dataset written as one block,
one file, is refused for it.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.schema import SearchSpec

__all__ = ["is_ray_dataset", "search_ray_dataset"]


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
    folder = datasets / f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if dry_run:
        raise SpecError(f"train_dataset: a ray.data.Dataset is written as Parquet shards when the search starts "
                        f"(into {folder.parent}/); dry-run that folder with data.source: parquet, data.path")
    try:
        datasets.mkdir(parents=True, exist_ok=True)
        if datasets.is_symlink():
            raise SpecError(f"storage_path: {datasets} is a symbolic link; the dataset's shards are written only into "
                            f"a folder of the storage's own")
        folder.mkdir()  # a fresh folder: never into one that exists (a link, or a search started the same second)
    except FileExistsError:
        raise SpecError(f"train_dataset: {folder} exists already; start the search again in a second, or remove "
                        f"it") from None
    except OSError as e:
        raise SpecError(f"storage_path: cannot make {folder} ({e.strerror})") from None
    dataset.write_parquet(str(folder))  # Ray Data's write tasks: block by block, nothing gathered on the driver
    shards = sorted(folder.glob("*.parquet"))
    if len(shards) < 2:
        raise SpecError(f"train_dataset: written as {len(shards)} Parquet shard into {folder}; the last shard is the "
                        f"evaluation set's, so at least two are needed (dataset.repartition(n) before passing it)")
    searched = copy.deepcopy(spec)
    searched.data.source, searched.data.path = "parquet", str(folder)
    print(f"train_dataset: the ray.data.Dataset written as {len(shards)} Parquet shards into {folder}", flush=True)
    return searched
