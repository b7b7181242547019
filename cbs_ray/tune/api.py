"""Run a critical-batch experiment on Ray: the Python API behind ``python -m cbs_ray.search``.

Spec → data and model config (validated before any Ray process starts, ``tune.prepare``) → the search
method's Tune experiments (``method_named``: ``methods.scratch.search``, ``methods.branch.search``,
``methods.ladder.search``, each run by ``tune.driver``) → its report written to the output directory.
``resume_search`` continues a killed experiment from its directory with the method that wrote it. An experiment's
report is rebuilt without any of this
(``report.methods.report_experiment``: the report command).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Iterator, Optional

from cbs_ray.records.meta import FORMAT, ExperimentMeta
from cbs_ray.records.method_registry import method_entry, method_names
from cbs_ray.records.storage import ReportError, damaged_tune_state
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import spec_from_dict
from cbs_ray.spec.paths import expand_user
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.spec.tolerance import as_recorded
from cbs_ray.tune.owner import experiment_owner
from cbs_ray.tune.prepare import (
    Prepared,
    as_spec,
    check_before_ray,
    corpus_pass_lines,
    data_fingerprint,
    output_dir_for,
    prepare,
    prepare_for_outline,
    regime_lines,
    with_model_config,
)
from cbs_ray.tune.probe import probe_spec
from cbs_ray.tune.result import SearchResult
from cbs_ray.tune.search_method import method_named

__all__ = ["SearchResult", "run_search", "resume_search", "probe_search", "prepare", "method_names", "method_named",
           "dry_run_lines"]


def run_search(spec: SearchSpec | str, *, model_init=None, train_dataset=None, eval_dataset=None, data_collator=None,
               compute_metrics=None, preprocess_logits_for_metrics=None, address: str | None = None,
               output_dir: str | None = None, verbose: bool | int = False, dry_run: bool = False):
    """Run the search the spec describes and write its report; the Python API behind the CLI.

    Data are loaded and tokenized and the model config is built first, so a bad spec fails before Ray
    starts. With ``batch_sizes: auto`` a probe run measures the noise scale first and the grid is
    centred on it. A local Ray instance started here (dashboard on 127.0.0.1) is shut down at the end.

    A pipeline's own model, data and metric go in under HF Trainer's names: ``model_init`` (returns a
    fresh ``torch.nn.Module`` whose ``model(**batch)`` gives ``loss`` and ``logits``), ``train_dataset``
    and ``eval_dataset`` (map-style), optionally ``data_collator``, ``compute_metrics`` and
    ``preprocess_logits_for_metrics`` (see ``cbs_ray.sources.user_objects`` for the contract). Then the spec's
    model and data sections stay unset, and one micro-batch runs through the model on the driver before Ray
    starts. ``model_init`` alone (with ``compute_metrics`` where wanted) trains the user's model on the spec's
    streamed corpus (``data.source: parquet``; ``cbs_ray.sources.user_stream``: its batches hold
    ``input_ids``, ``attention_mask`` and ``labels``, and a ``forward`` that takes neither ``input_ids`` nor
    ``labels`` is refused in one line before Ray starts). A ``ray.data.Dataset`` of token-id lists as
    ``train_dataset`` is written once as Parquet shards under the ``storage_path`` and streamed
    (``cbs_ray.sources.ray_dataset``), on the spec's model or ``model_init``'s. A spec whose ``name`` is the default's
    names the experiment after the model's class instead
    (``gpt2-lm-head-model``), so that it is not filed under the demo's name.

    ``spec`` is a ``SearchSpec`` (``load_spec``) or the path of a spec file; it is validated here (a field
    changed after loading is checked as loading would) and never changed: the search works on a copy.

    The search is the one ``search.method`` names (``method_names()``); every method returns a ``SearchResult``
    (``.answer``, ``.summary``, ``.experiment_path``, ``.report_dir``; branch mode's critical batch over training
    and schedule, the ladder's prediction as its properties).

    While it runs it shows a progress display (``tune.progress``: a live block on a terminal, a line per
    finished trial elsewhere); ``verbose=True`` (or Tune's level, 1 to 3) shows Tune's tables and the workers'
    log lines instead.

    ``dry_run=True``: nothing trains and Ray does not start; the checks a search makes before Ray run (the
    objects' too) and the plan comes back as a list of lines, the command line's ``--dry-run``.
    """
    spec = as_spec(spec)
    from cbs_ray.sources.ray_dataset import is_ray_dataset, removed_on_refusal, search_ray_dataset
    from cbs_ray.sources.user_objects import user_objects
    from cbs_ray.tune import driver

    written = None  # a ray.data.Dataset's Parquet copy: removed if the search is refused before it starts
    if is_ray_dataset(train_dataset):  # written once as Parquet shards, then streamed (sources.ray_dataset)
        spec = as_spec(search_ray_dataset(spec, train_dataset, dict(
            eval_dataset=eval_dataset, data_collator=data_collator), model_init=model_init, dry_run=dry_run))
        train_dataset, written = None, spec.data.path

    with removed_on_refusal(written):
        objects = user_objects(streamed=spec.data.source == "parquet", model_init=model_init,
                               train_dataset=train_dataset, eval_dataset=eval_dataset,
                               data_collator=data_collator, compute_metrics=compute_metrics,
                               preprocess_logits_for_metrics=preprocess_logits_for_metrics)
        # Fail fast on bad input, before Ray starts; with auto batch sizes the search's own data are
        # prepared only once the probe has chosen the grid. The objects are checked first: the experiment
        # and its report's folder may be named after the model the check builds.
        probe = probe_spec(spec) if spec.auto_batch_sizes else None
        prepared = prepare(probe or spec, objects) if objects is not None else None
        if prepared is not None and _named_after_the_model(spec, prepared.data) and probe is not None:
            probe = probe_spec(spec)
        out = output_dir_for(spec, output_dir)
        if dry_run:
            return _outline_without_training(spec, probe, prepared, out)
        check_before_ray(spec, out)
        if prepared is None:
            prepared = prepare(probe or spec)
    return driver.run_method(method_named(spec.search.method), spec, prepared, probe=probe, out=out,
                             verbose=verbose, address=address)


def resume_search(experiment_path: str, *, model_init=None, train_dataset=None, eval_dataset=None,
                  data_collator=None, compute_metrics=None, preprocess_logits_for_metrics=None,
                  address: str | None = None, output_dir: str | None = None, verbose: bool | int = False):
    """Continue a killed or interrupted search from its experiment directory (``Tuner.restore``).

    The spec is the one the experiment was started with (read back from its ``cbs_spec.json``). Finished
    trials are kept as they are, unfinished and errored ones continue from their last checkpoint, the
    searcher (Optuna's state) picks up where it stopped, and the repeats run if they had not. Ray warns
    that restoring unpickles the experiment's state: resume only experiment directories you wrote.

    The data must be what the trials trained on: the budget and (on the spec path) the data's fingerprint
    recorded at the start are compared with what the spec prepares now, and an experiment written before
    the fingerprint existed (format 1) is refused, since nothing could tell a change (the report still
    reads it).

    An experiment run with objects (``run_search(spec, model_init=…, …)``) resumes only with the same
    objects passed again, and one run from its spec only without them; the command line cannot resume
    an objects experiment and says so. A branch search (``search.method: branch``) resumes its trunk and
    branches, then its schedule run; a ladder its runs.
    """
    from cbs_ray.sources.object_checks import check_resume
    from cbs_ray.sources.user_objects import user_objects

    path = experiment_path if "://" in experiment_path else str(expand_user(experiment_path, "--resume").resolve())
    try:
        meta = ExperimentMeta.read(path)
    except ReportError as e:
        raise SpecError(f"--resume: {e}") from None
    streamed = (meta.spec.get("data") or {}).get("source") == "parquet"  # model_init alone, on its corpus
    objects = user_objects(streamed=streamed, model_init=model_init, train_dataset=train_dataset,
                           eval_dataset=eval_dataset, data_collator=data_collator, compute_metrics=compute_metrics,
                           preprocess_logits_for_metrics=preprocess_logits_for_metrics)
    check_resume(meta, objects, path)
    with experiment_owner(path):  # one driver at a time: a second resume is refused while this one runs
        return _resume_held(path, meta, objects, address=address, output_dir=output_dir, verbose=verbose)


def _resume_held(path: str, meta: ExperimentMeta, objects, *, address, output_dir, verbose):
    """``resume_search`` once it holds the experiment."""
    from ray import tune  # the API module stays importable without starting anything of Ray's

    from cbs_ray.tune import driver

    damage = damaged_tune_state(path)
    if damage:  # Tune would start afresh and the report would lose every trial before it
        raise SpecError(f"--resume: {path}: Tune's experiment state: {damage}; nothing was started; the trials' "
                        f"own results are intact: cbs-ray report {shlex.quote(path)} reads them")
    if not tune.Tuner.can_restore(path):
        raise SpecError(f"--resume: {path}: Tune has no experiment state to restore there")
    # as it ran (a spec recorded before the tolerance had a unit reads it as it did then)
    spec = spec_from_dict(as_recorded(meta.spec, meta.tolerance_unit, method_entry(meta.method).loss_epsilon))
    # Its report goes beside its own experiment (another search of the same name may own ./cbs_results/<name>).
    out = expand_user(output_dir, "--output").resolve() if output_dir else _beside(path)
    check_before_ray(spec, out, resuming=True)
    prepared = prepare(spec, objects)
    _check_same_data(meta, prepared, path)
    return driver.resume_method(method_named(meta.method), spec, path, meta, prepared, out=out, verbose=verbose,
                                address=address)


def probe_search(spec: SearchSpec, *, address: str | None = None, verbose: bool | int = False) -> list[int]:
    """``--probe``: the probe alone (``tune.probe``: one short trial measuring B_simple) in the driver's Ray session;
    returns the batch-size grid centred on what it measured."""
    from cbs_ray.tune import driver

    probe = probe_spec(spec)
    return driver.probe_only(probe, prepare(probe), verbose=verbose, address=address)


def dry_run_lines(spec: SearchSpec, *, estimate_time: bool = True) -> Iterator[str]:
    """``--dry-run``: the method's outline against the spec's data and budget (with ``batch_sizes: auto``, the
    probe's, which runs first), each line as soon as it is known, after the checks a search makes before Ray;
    the passes over the corpus; then the model's checks (its config, a build on the meta device: torch and
    transformers, seconds to import), so a model that cannot be built is a ``SpecError`` after its outline.
    ``estimate_time`` (on unless ``--no-estimate-time``): the search's wall time from steps timed here, every
    method's planned runs (``tune.time_estimate``; under a second on the tiny spaces)."""
    if spec.auto_batch_sizes:
        yield "batch sizes: auto — a probe run measures B_simple first; the probe:"
        spec = probe_spec(spec)
    method, planned = method_named(spec.search.method), prepare_for_outline(spec)
    method.check(spec, planned)
    yield from method.outline_lines(spec, planned)
    milestones = getattr(method, "milestone_samples", None)
    rungs = milestones(spec, planned) if milestones else ()
    yield from corpus_pass_lines(_train_examples(planned), planned.budget_samples, rungs)
    configured = with_model_config(spec, planned)
    yield from regime_lines(spec, configured, rungs)
    if estimate_time:
        from cbs_ray.tune.time_estimate import estimate_lines

        planned_stages = getattr(method, "planned_stages", None)
        if planned_stages is None:
            yield f"time estimate: search.method {spec.search.method} lays out no runs before they run"
        else:
            yield from estimate_lines(spec, configured, planned_stages(spec, configured))


def _outline_without_training(spec: SearchSpec, probe: SearchSpec | None, prepared: Prepared | None,
                              out: Path) -> list[str]:
    """``run_search(..., dry_run=True)``: the checks before Ray, then the method's outline (the probe's with auto
    batch sizes), as lines; the spec path's are ``dry_run_lines``'."""
    check_before_ray(spec, out, dry_run=True)
    if prepared is None:
        return list(dry_run_lines(spec))
    planned = probe or spec
    method = method_named(planned.search.method)
    method.check(planned, prepared)
    head = ["batch sizes: auto — a probe run measures B_simple first; the probe:"] if probe is not None else []
    return head + list(method.outline_lines(planned, prepared)) + corpus_pass_lines(
        _train_examples(prepared), prepared.budget_samples)


def _train_examples(prepared: Prepared) -> Optional[int]:
    """The training set's size where it is known (a ``len``-less iterable of the user's: None)."""
    try:
        return int(prepared.train_examples)
    except (TypeError, AttributeError, ValueError):
        return None


def _named_after_the_model(spec: SearchSpec, objects) -> bool:
    """Name the experiment after the objects' model (``sources.user_objects.experiment_name`` of its class)
    where the spec's ``name`` is the default's, the built-in demo's (``tiny-bert-sentiment``), whose folder
    ``./cbs_results/<name>`` it would otherwise share. A name written out equal to the default cannot be told
    from one left out (as the model and data sections: ``check_objects``). True when renamed."""
    if spec.name != SearchSpec().name or not objects.model_class:
        return False
    from cbs_ray.sources.user_objects import experiment_name

    spec.name = experiment_name(objects.model_class)
    print(f"name: {spec.name} (after the model's class {objects.model_class}; set name=... to choose one)", flush=True)
    return True


def _beside(experiment_path: str) -> Path:
    """A resumed search's report: ``<experiment>/report`` for a local experiment, else ``./cbs_results/<its
    directory's name>`` (an experiment on s3:// has no local folder to sit beside)."""
    if "://" in experiment_path:
        return Path("cbs_results", experiment_path.rstrip("/").rsplit("/", 1)[-1]).resolve()
    return Path(experiment_path) / "report"


def _check_same_data(meta: ExperimentMeta, prepared: Prepared, path: str) -> None:
    """The spec prepares what the experiment's trials trained on: the same budget, the same fingerprint."""
    data, budget = prepared.data, prepared.budget_samples
    if meta.format < FORMAT and meta.user_objects is None:
        raise SpecError(f"--resume: {path} was written by an earlier cbs-ray (metadata format {meta.format}, "
                        f"without a fingerprint of its data), so resuming could not tell whether the spec "
                        f"still prepares the same data; start a new search (cbs-ray report still "
                        f"reads this one)")
    if budget != meta.budget_samples:
        raise SpecError(f"--resume: the data changed: the budget is now {budget} samples, the experiment "
                        f"used {meta.budget_samples}")
    fingerprint = data_fingerprint(data)
    if meta.data_fingerprint is not None and fingerprint != meta.data_fingerprint:
        raise SpecError(f"--resume: the data changed: the spec now prepares other tokens than the experiment's "
                        f"trials trained on (fingerprint {fingerprint}, recorded {meta.data_fingerprint}); "
                        f"start a new search")
