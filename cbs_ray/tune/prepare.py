"""Everything that can fail on bad input, done on the driver before Ray starts, for every search method:
the model's config, the tokenized data (or the user's objects, checked), the budget, the trackers and the
study; and where the report goes."""

from __future__ import annotations

import contextlib
import copy
import os
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from cbs_ray.data.prepare import prepare_data
from cbs_ray.report.folder import foreign_report
from cbs_ray.sources.model import check_buildable, model_config, parameter_count
from cbs_ray.spec.checks import BUILTIN_METRICS
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.spec.paths import expand_user
from cbs_ray.spec.resolve import resolve_budget, tokens_per_sample
from cbs_ray.spec.rules import validate
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.tune.free_space import check_free_space
from cbs_ray.tune.tracking import check_installed, check_reachable

__all__ = ["Prepared", "prepare", "prepare_for_outline", "with_model_config", "spec_model", "as_spec",
           "check_before_ray", "check_trackers_and_study", "check_writable", "output_dir_for", "check_own_storage",
           "data_fingerprint"]


def as_spec(spec) -> SearchSpec:
    """The spec ``run_search`` was given, validated as ``load_spec`` would: a path is loaded, a ``SearchSpec``
    copied (the search writes an auto grid into its copy, never into the caller's) and validated again, since
    a caller may have changed a field after loading; anything else is a ``SpecError``."""
    if isinstance(spec, (str, os.PathLike)):
        if not Path(spec).is_file():  # load_spec's message names the command line's --space
            raise SpecError(f"spec: no such file: {spec} (run_search takes a SearchSpec or a spec file's path)")
        return load_spec(spec)
    if not isinstance(spec, SearchSpec):
        raise SpecError(f"spec: expected a SearchSpec (cbs_ray.load_spec) or the path of a spec file, "
                        f"got {type(spec).__name__}")
    spec = copy.deepcopy(spec)
    validate(spec)
    return spec


def check_before_ray(spec: SearchSpec, out: Path, *, resuming: bool = False, dry_run: bool = False) -> None:
    """The checks a search makes before Ray starts that need no data: the trackers and the study, and that
    the report and the experiment can be written where they go. They leave no directory behind (a search
    refused after them left an empty ``./cbs_results/<name>/``): the report's writer and Tune make their
    folders when they write. ``dry_run`` is kept for callers that name it."""
    check_trackers_and_study(spec, resuming=resuming)
    check_writable(spec, out, keep=False)
    if out.is_symlink():  # a link planted as ./cbs_results/<name>; an --output is resolved already
        raise SpecError(f"--output: {out} is a symbolic link (to {os.readlink(out)}), which cbs-ray did not make; "
                        f"remove it, or name the folder you mean with --output")
    if not resuming:  # found before training, not when the report is written
        problem = foreign_report(out, None, spec.name, spec.search.method)
        if problem:
            raise SpecError(problem.removeprefix("report: ").replace("; nothing was removed", ""))


def check_writable(spec: SearchSpec, out: Path, *, keep: bool = True) -> None:
    """``out`` (the report) is a directory or can be made one, and a local ``storage_path`` can be written:
    found now, not after training (an ``--output`` naming a file failed with ``FileExistsError`` once the whole
    search had run). ``keep=False`` removes the directories the check made."""
    if out.exists() and not out.is_dir():
        raise SpecError(f"--output: {out} is a file, not a directory")
    _writable_directory(out, "--output", keep=keep)
    if "://" not in spec.storage_path:  # a URI (s3://, gs://) is checked by Tune when it first writes
        check_own_storage(Path(spec.storage_uri))
        _writable_directory(Path(spec.storage_uri), "storage_path", keep=keep)
    if "://" not in spec.storage_path or spec.storage_path.startswith("file://"):  # file://: local too
        check_free_space(spec.storage_uri)


def check_own_storage(path: Path) -> None:
    """A ``SpecError`` where the storage folder (or its nearest existing parent) belongs to another user and
    others may write into it without the sticky bit: Tune unpickles the experiment's state there on
    ``--resume``, so anyone who can write there could run code as this user."""
    folder = path
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        info = folder.stat()
    except OSError:
        return
    others_write = info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX
    if info.st_uid != os.getuid() and others_write:
        raise SpecError(f"storage_path: {folder} belongs to another user and others can write there; Tune "
                        f"unpickles its state on --resume, so use a folder of your own")


def _writable_directory(path: Path, key: str, *, keep: bool) -> None:
    missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise SpecError(f"{key}: cannot write to {path} ({e.strerror or type(e).__name__})") from None
    finally:
        if not keep:
            for made in missing:  # deepest first
                with contextlib.suppress(OSError):
                    made.rmdir()


@dataclass(frozen=True)
class Prepared:
    """What a search trains on, prepared on the driver before Ray starts (``prepare``): the same record for
    every method, whether the data are the spec's or the user's own objects."""

    data: Any
    """The spec path's tokenized ``data.PreparedData`` (or ``Seq2SeqData``), or the user's checked
    ``sources.user_objects.UserObjects``: what every trial fetches from Ray's object store."""
    budget_samples: int
    """The equal-sample budget, resolved (``budget_epochs`` against the training set, ``budget_tokens`` in whole
    samples)."""
    model_config: Any = None
    """The Hugging Face config the trials build the spec's model from; the objects' model's own (None for a
    plain torch module)."""
    tokens_per_sample: Optional[int] = None
    """Tokens in every training sample where that is one number: the spec's packed texts
    (``data.max_seq_length``), or the user's items' ``input_ids`` where they all have one length; else None."""

    @property
    def on_objects(self) -> bool:
        """Whether the search trains the user's own model and data (``run_search(model_init=…, …)``)."""
        from cbs_ray.sources.user_objects import UserObjects  # (torch: the spec's data need it not)

        return isinstance(self.data, UserObjects)

    @property
    def train_examples(self) -> int:
        return self.data.train_examples


def prepare(spec: SearchSpec, objects=None) -> Prepared:
    """The ``Prepared`` record of the spec. A named model's config first, so an unknown name is reported
    as such, then the tokenized data and the budget. With the user's ``objects``
    (``sources.user_objects.UserObjects``), their checks instead (one micro-batch through the model on the
    driver, ``check_objects``): then the data are the objects themselves, with what the check found for the
    workers (the model's class, its label shift, the columns its forward takes), and the config is the model's
    own (None for a plain torch module). A token budget with objects counts the items' ``input_ids``
    (``token_budget_tokens_per_sample``). ``model_init`` on the spec's streamed corpus (``data.source: parquet``):
    ``check_streamed_objects``, the data a ``sources.user_stream.StreamedObjects``, the budget the spec path's."""
    if objects is not None and spec.data.source == "parquet":  # the user's model on the spec's streamed corpus
        from cbs_ray.sources.object_checks import check_streamed_objects  # (torch)

        streamed, config = check_streamed_objects(spec, objects)
        return Prepared(streamed, resolve_budget(spec, streamed.train_examples), config, tokens_per_sample(spec))
    if objects is not None:
        from cbs_ray.sources.object_checks import check_objects, token_budget_tokens_per_sample  # (torch)

        objects, config = check_objects(spec, objects)
        tokens = token_budget_tokens_per_sample(spec, objects)
        return Prepared(objects, resolve_budget(spec, objects.train_examples, tokens), config, tokens)
    return with_model_config(spec, prepare_for_outline(spec))


def prepare_for_outline(spec: SearchSpec) -> Prepared:
    """The spec's data and budget, the model's config left None: what a method's outline and checks read (a
    ``--dry-run`` prints the outline from it before torch and transformers load). A named model's config first, so
    an unknown name is reported as such."""
    if spec.search.metric not in BUILTIN_METRICS:
        raise SpecError(f"search.metric: {spec.search.metric} is not one the spec's model and data report "
                        f"({', '.join(BUILTIN_METRICS)}); another metric needs run_search(..., compute_metrics=...)")
    if spec.model.name:
        model_config(spec_model(spec), spec.task, vocab_size=0, num_labels=2, pad_id=0,
                     max_seq_length=spec.data.max_seq_length)
    data = prepare_data(spec)
    return Prepared(data, resolve_budget(spec, data.train_examples), None, tokens_per_sample(spec))


def with_model_config(spec: SearchSpec, planned: Prepared) -> Prepared:
    """``planned`` (``prepare_for_outline``) with the model's config for its data, the model built from it on the
    meta device first (``sources.model.check_buildable``: a config transformers accepts can still fail there)."""
    data, model = planned.data, spec_model(spec)
    config = model_config(model, spec.task, vocab_size=data.vocab_size, num_labels=data.num_labels,
                          pad_id=data.pad_id, max_seq_length=spec.data.max_seq_length)
    check_buildable(model, spec.task, config, fsdp=spec.training.parallelism == "fsdp",
                    fsdp_block_class=spec.training.fsdp_block_class)
    return Prepared(data, planned.budget_samples, config, planned.tokens_per_sample)


def sample_tokens(spec: SearchSpec, planned: Prepared) -> Optional[int]:
    """Tokens in every training sample where that is exact: packed texts (``Prepared.tokens_per_sample``) or the
    built-in language and corpus, whose samples are all ``max_seq_length`` tokens; None for padded texts."""
    d = spec.data
    if planned.tokens_per_sample:
        return planned.tokens_per_sample
    full_blocks = d.source == "builtin" and d.builtin_task in ("markov", "python_source")
    return d.max_seq_length if full_blocks and spec.task == "causal-lm" else None


def regime_lines(spec: SearchSpec, planned: Prepared, milestones: Sequence[int] = ()) -> list[str]:
    """``--dry-run``: the model's parameters and the tokens per parameter at the budget D and at each of the
    method's ``milestones`` (the ladder's rungs), the figure that places a run in the regime pre-training runs in
    (~20 at D: Hoffmann et al. 2022; Zhang et al. 2025 measure there). Nothing for a named (pretrained) model."""
    if spec.model.name or planned.model_config is None:
        return []
    params = parameter_count(spec.task, planned.model_config)
    tokens = sample_tokens(spec, planned)
    if tokens is None:
        return [f"model: {params:,} parameters (tokens per parameter not stated: padded samples)"]
    at_d = planned.budget_samples * tokens / params
    lines = [f"model: {params:,} parameters; {at_d:.1f} tokens per parameter at D ({planned.budget_samples} samples "
             f"of {tokens} tokens)" + (" — below the ~20 pre-training runs at" if at_d < 20 else "")]
    if milestones:
        lines.append("  tokens per parameter at each rung: "
                     + ", ".join(f"{m * tokens / params:.2g}" for m in milestones))
    return lines


ONE_PASS = 1.0
"""Past this many passes over the training set a budget repeats its data: the dry run warns."""


def corpus_pass_lines(train_examples: Optional[int], budget_samples: int, milestones: Sequence[int] = ()) -> list[str]:
    """``--dry-run``: the passes over the training set the budget D makes (samples ÷ training examples), and at each
    of the method's ``milestones`` (the ladder's rungs), with a warning line past one pass (a 65 536-sample
    budget over a 12 288-row corpus passes 5.3 times, which nothing said). Nothing where the count is not known."""
    if not train_examples:
        return []
    passes = budget_samples / train_examples
    lines = [f"data: {passes:.3g} passes over the {train_examples:,} training examples at D ({budget_samples} "
             f"samples)" + (", " + ", ".join(f"{m / train_examples:.2g}" for m in milestones) + " at the rungs"
                            if milestones else "")]
    if passes > ONE_PASS:
        lines.append(f"  warning: the budget passes {passes:.3g} times over the training set: every run sees its "
                     f"examples again, which a pre-training run on fresh tokens does not; more data, or a budget of "
                     f"at most {train_examples} samples, keeps it to one pass")
    return lines


def spec_model(spec: SearchSpec) -> dict:
    """The spec's model as ``sources.model`` takes it: its pretrained name or its config keys."""
    return {"name": spec.model.name, "config": spec.model.config}


def data_fingerprint(data) -> Optional[str]:
    """The spec path's ``PreparedData.fingerprint`` (``model_init`` on a streamed corpus: the corpus's); None for
    the user's datasets, which ``resume_search`` gets passed again (hashing arbitrary datasets would cost as much as
    reading them)."""
    fingerprint = getattr(data, "fingerprint", None)
    return fingerprint() if callable(fingerprint) else None


def check_trackers_and_study(spec: SearchSpec, *, resuming: bool = False) -> None:
    """Every tracker the spec names is installed, and the study storage opens and can hold this search's
    study."""
    check_installed(spec.tracking)
    check_reachable(spec.tracking)
    s = spec.search
    if s.study_storage is not None:
        from cbs_ray.tune.study import check_study, open_storage  # (Optuna: only with a study storage)

        storage = open_storage(s.study_storage)
        if s.study_name is not None and not resuming:
            held = check_study(storage, s.study_name, metric=s.metric, mode=s.mode)
            if held:
                print(f"study {s.study_name!r} already holds {held} trials: this search continues it "
                      f"(TPE learns from them too)", flush=True)


def output_dir_for(spec: SearchSpec, output_dir: Optional[str]) -> Path:
    """Where the report goes: ``output_dir`` as given (``~`` expanded), else ``./cbs_results/<name>``."""
    return expand_user(output_dir, "--output").resolve() if output_dir else spec.results_dir
