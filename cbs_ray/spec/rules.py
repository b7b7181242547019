"""Validation: every field's own checks, then the rules that relate fields, as named functions
(``_one_budget``, ``_grace_period_fits_budget``, ...) that ``validate`` applies in order
(``CROSS_FIELD_RULES``). A bad spec raises ``SpecError`` naming the field.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from cbs_ray.maths.budget import samples_for_tokens
from cbs_ray.records.method_registry import method_entry
from cbs_ray.spec.checks import (
    BUILTIN_METRICS,
    admits_none,
    check_power_of_two,
    expand_batch_sizes,
    join_key,
    type_hints_of,
)
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.paths import expand_user
from cbs_ray.spec.scale_rules import SCALE_RULES
from cbs_ray.spec.schema import GenerationSpec, SearchSpec, dataloader_workers
from cbs_ray.spec.sections import METHOD_SECTIONS, spec_tolerances

# ---- validation ------------------------------------------------------------------------------------

def validate(spec: SearchSpec) -> None:
    """Check a built spec, raising ``SpecError`` at the first problem. First the batch grid, which the other
    rules measure against, and the either-or choices (a value that is wrong *and* should not be set at all
    gets the latter message); then every field's own checks, declared beside the field; then the rules that
    relate fields, in ``CROSS_FIELD_RULES`` order, and last each search method's section's own rule (the section, in
    its method's folder, brings its rule with it: ``section_rule(spec)``; ``spec.sections``). Checks against
    the data (the largest batch against the training set, columns, labels) happen once it is loaded:
    ``resolve_budget`` and ``cbs_ray.data``."""
    _batch_grid_is_well_formed(spec)
    _one_model_source(spec)
    _one_budget(spec)
    _check_fields(spec, "")
    for rule in CROSS_FIELD_RULES:
        rule(spec)
    for section in spec.method_sections.values():
        section_rule = getattr(section, "section_rule", None)
        if section_rule is not None:
            section_rule(spec)


def _check_fields(section: Any, where: str) -> None:
    """Apply the checks declared in each field's metadata, section by section in field order (the methods' own
    sections at their place)."""
    hints = type_hints_of(section.__class__)
    for f in dataclasses.fields(section):
        value, path = getattr(section, f.name), join_key(where, f.name)
        if f.name == METHOD_SECTIONS and not where:
            for key, method_section in value.items():
                _check_fields(method_section, key)
        elif dataclasses.is_dataclass(value):
            _check_fields(value, path)
        elif value is not None or not admits_none(hints[f.name]):
            for rule in f.metadata.get("checks", ()):
                rule(value, path)


# The probe of ``search.batch_sizes: auto`` trains at training.base_batch: its errors name that field.
_PROBE_BATCH = "training.base_batch (the probe's batch with search.batch_sizes: auto)"


def _batch_grid_is_well_formed(spec: SearchSpec) -> None:
    if spec.auto_batch_sizes:
        check_power_of_two(spec.training.base_batch, _PROBE_BATCH)
    else:
        expand_batch_sizes(spec.search.batch_sizes)


# ---- cross-field rules: each names the field it blames ----------------------------------------------

def _one_model_source(spec: SearchSpec) -> None:
    if (spec.model.name is None) == (spec.model.config is None):
        raise SpecError("model: set exactly one of model.name (pretrained) and model.config (from scratch)")


def _one_budget(spec: SearchSpec) -> None:
    t = spec.training
    if sum(x is not None for x in (t.budget_samples, t.budget_epochs, t.budget_tokens)) != 1:
        raise SpecError("training: set exactly one of budget_samples, budget_epochs and budget_tokens (the others "
                        "null; budget_samples has a default)")


def _hub_source_names_a_dataset(spec: SearchSpec) -> None:
    if spec.data.source == "hub" and not spec.data.hub_name:
        raise SpecError("data.hub_name: required when data.source is hub")


def _local_files_exist(spec: SearchSpec) -> None:
    if spec.data.source != "files":
        return
    for key in ("train_file", "eval_file"):
        value = getattr(spec.data, key)
        if not value:
            raise SpecError(f"data.{key}: required when data.source is files")
        if not expand_user(value, f"data.{key}").is_file():
            raise SpecError(f"data.{key}: no such file: {value}")
        if Path(value).suffix.lower() not in (".csv", ".tsv", ".json", ".jsonl", ".parquet"):
            raise SpecError(f"data.{key}: unsupported format {Path(value).suffix!r} "
                            "(csv, tsv, json, jsonl, parquet)")


def _probe_batch_splits_over_workers(spec: SearchSpec) -> None:
    t, workers = spec.training, spec.resources.workers_per_trial
    if spec.auto_batch_sizes and t.base_batch % workers:
        raise SpecError(f"{_PROBE_BATCH}: {t.base_batch} does not split over resources.workers_per_trial="
                        f"{workers} workers")


def _reports_land_on_whole_batches(spec: SearchSpec) -> None:
    """Every report lands on an exact sample milestone of every batch size (with auto: of the probe's)."""
    t, largest = spec.training, spec.batch_sizes[-1]
    if t.eval_every_samples > 0 and not t.eval_every_samples % largest:
        return
    if spec.auto_batch_sizes:
        raise SpecError(f"training.eval_every_samples: must be a positive multiple of {_PROBE_BATCH}, "
                        f"{t.base_batch}, got {t.eval_every_samples}")
    raise SpecError(f"training.eval_every_samples: must be a positive multiple of the largest batch "
                    f"size {largest}, got {t.eval_every_samples}")


def _budget_samples_fit(spec: SearchSpec) -> None:
    if spec.training.budget_samples is not None:
        check_budget(spec, spec.training.budget_samples)


def _tokens_need_a_causal_lm(spec: SearchSpec) -> None:
    """A token budget and packing are a causal LM's (a classifier's or seq2seq model's example is a unit, not
    a run of tokens), and a token budget needs packed texts: only then is every sample the same tokens."""
    if spec.task != "causal-lm":
        if spec.training.budget_tokens is not None:
            raise SpecError(f"training.budget_tokens: counts the tokens of the spec's own packed texts, a causal "
                            f"LM's (the task is {spec.task}), never a train_dataset passed to run_search (used as "
                            f"given); use training.budget_samples or training.budget_epochs")
        if spec.data.packing:
            raise SpecError(f"data.packing: only a causal LM's texts are packed (the task is {spec.task}); "
                            "drop data.packing")
    elif spec.training.budget_tokens is not None and spec.data.packing is False:
        raise SpecError("data.packing: a token budget (training.budget_tokens) needs packed texts, every sample "
                        "data.max_seq_length tokens; drop data.packing: false or use training.budget_samples")


def _budget_tokens_fit(spec: SearchSpec) -> None:
    """The budget ``budget_tokens`` makes (``maths.budget.samples_for_tokens``) fills a report interval and obeys
    the budget rules."""

    t = spec.training
    if t.budget_tokens is None:
        return
    samples, _ = samples_for_tokens(t.budget_tokens, spec.data.max_seq_length, t.eval_every_samples)
    if samples <= 0:
        raise SpecError(f"training.budget_tokens: {t.budget_tokens} tokens is less than one report interval "
                        f"({t.eval_every_samples} samples of {spec.data.max_seq_length} tokens = "
                        f"{t.eval_every_samples * spec.data.max_seq_length} tokens)")
    check_budget(spec, samples)


def check_budget(spec: SearchSpec, budget: int) -> None:
    """The budget rules, for ``budget_samples`` or the budget ``budget_epochs`` resolves to."""
    _budget_fits_the_cadence(spec, budget)
    _grace_period_fits_budget(spec, budget)


def _budget_fits_the_cadence(spec: SearchSpec, budget: int) -> None:
    t, largest = spec.training, spec.batch_sizes[-1]
    if budget < largest:
        raise SpecError(f"training.budget_samples: {budget} is smaller than the largest batch size {largest}")
    if budget % t.eval_every_samples:
        raise SpecError(f"training.budget_samples: must be a multiple of training.eval_every_samples "
                        f"({t.eval_every_samples}), got {budget}")


def _grace_period_fits_budget(spec: SearchSpec, budget: int) -> None:
    # Checked with batch_sizes: auto too, or the search would fail only after the probe.
    if spec.asha.grace_period_samples > budget:
        raise SpecError(f"asha.grace_period_samples: {spec.asha.grace_period_samples} exceeds the budget {budget}")


def _persistent_workers_need_workers(spec: SearchSpec) -> None:
    t = spec.training
    if t.persistent_workers and dataloader_workers(t, spec.resources.use_gpu) == 0:
        raise SpecError("training.persistent_workers: needs DataLoader workers; set training.dataloader_workers "
                        "above 0 (it is 0 on a CPU unless set)")


def _every_batch_size_is_trained(spec: SearchSpec) -> None:
    s, count = spec.search, len(spec.batch_sizes)
    if s.num_trials < count and s.strategy != "grid":
        raise SpecError(f"search.num_trials: must be at least the number of batch sizes ({count}) "
                        f"so every batch size is trained, got {s.num_trials}")


def _accuracy_needs_classification(spec: SearchSpec) -> None:
    if spec.search.metric == "accuracy" and spec.task != "sequence-classification":
        raise SpecError("search.metric: accuracy needs task sequence-classification; use eval_loss")


def _bleu_needs_seq2seq(spec: SearchSpec) -> None:
    if spec.search.metric == "bleu" and spec.task != "seq2seq":
        raise SpecError(f"search.metric: bleu needs task seq2seq (the task is {spec.task}); use eval_loss")


def _translation_is_seq2seq(spec: SearchSpec) -> None:
    """The built-in translation task is a seq2seq task's. (A seq2seq task on the built-in sentiment data is
    refused where the data are loaded: with the objects path's own data the data section stays at its
    default, which names the sentiment task.)"""
    d = spec.data
    if d.source == "builtin" and d.builtin_task == "translation" and spec.task != "seq2seq":
        raise SpecError(f"data.builtin_task: translation is a seq2seq task; set task: seq2seq (got {spec.task})")


def _markov_is_a_causal_lm(spec: SearchSpec) -> None:
    """The built-in ``markov`` language is a causal LM's; its exact excess loss exists for it alone, and its
    generated training set is sized by the budget (no epochs of it)."""
    d, t = spec.data, spec.training
    markov = d.source == "builtin" and d.builtin_task == "markov"
    if markov and spec.task != "causal-lm":
        raise SpecError(f"data.builtin_task: markov is a causal LM's language; set task: causal-lm (got {spec.task})")
    if spec.search.metric == "excess_loss" and not markov:
        raise SpecError("search.metric: excess_loss needs the built-in markov language (data.source: builtin, "
                        "data.builtin_task: markov), whose true next-token distribution is known; use eval_loss")
    if markov and t.budget_samples is None and t.budget_tokens is None:
        raise SpecError("training.budget_epochs: the markov language generates fresh sequences for the budget; "
                        "give training.budget_samples (or budget_tokens) instead")
    if d.source == "builtin" and d.builtin_task == "python_source" and spec.task != "causal-lm":
        raise SpecError("data.builtin_task: python_source is a corpus for a causal LM; set task: causal-lm "
                        f"(got {spec.task})")


def _seq2seq_has_no_probe(spec: SearchSpec) -> None:
    if spec.task == "seq2seq" and spec.training.probe_micro_batch:
        raise SpecError("training.probe_micro_batch: not available with task seq2seq yet (the probe trains on "
                        "random single sequences, not source-target pairs); set training.micro_batch_size")


def _generation_needs_seq2seq(spec: SearchSpec) -> None:
    if spec.generation != GenerationSpec() and spec.task != "seq2seq":
        raise SpecError(f"generation: only a seq2seq task generates (the task is {spec.task}); drop the section")


def _mode_matches_metric(spec: SearchSpec) -> None:
    s = spec.search
    if s.metric not in BUILTIN_METRICS:
        return  # a compute_metrics key: its direction is the user's to say
    expected = "max" if s.metric in ("accuracy", "bleu") else "min"
    if s.mode != expected:
        better = "higher" if expected == "max" else "lower"
        raise SpecError(f"search.mode: {s.metric} is better when it is {better}; use mode {expected}")


def _one_tolerance(spec: SearchSpec) -> None:
    """A loss metric's turning-point tolerance and a method's ε (branch mode's) are one (``spec.tolerance``)."""
    spec_tolerances(spec)


def _grid_trains_to_the_full_budget(spec: SearchSpec) -> None:
    if spec.search.strategy == "grid" and spec.search.early_stopping:
        raise SpecError("search.early_stopping: the grid strategy trains every point to the full budget; "
                        "set search.early_stopping=false")


def _grace_period_is_whole_report_intervals(spec: SearchSpec) -> None:
    grace, every = spec.asha.grace_period_samples, spec.training.eval_every_samples
    if grace <= 0 or grace % every:
        raise SpecError(f"asha.grace_period_samples: must be a positive multiple of "
                        f"training.eval_every_samples ({every}), got {grace}")


def _batch_sizes_split_over_workers(spec: SearchSpec) -> None:
    workers = spec.resources.workers_per_trial
    for b in spec.batch_sizes:
        if b % workers:
            raise SpecError(f"search.batch_sizes: {b} does not split over "
                            f"resources.workers_per_trial={workers} workers")


def _study_needs_optuna(spec: SearchSpec) -> None:
    if spec.search.study_storage is not None and spec.search.strategy == "grid":
        raise SpecError("search.study_storage: the grid strategy does not use Optuna; set search.strategy to "
                        "tpe or random, or drop the study storage")
    if spec.search.study_name is not None and spec.search.study_storage is None:
        raise SpecError("search.study_name: names a study in search.study_storage, which is not set")


def _method_can_do_what_is_asked(spec: SearchSpec) -> None:
    refuse_what_the_method_cannot_do(spec.search.method, auto_batch_sizes=spec.auto_batch_sizes,
                                     study=spec.search.study_storage is not None)


def refuse_what_the_method_cannot_do(method: str, *, auto_batch_sizes: bool, study: bool) -> None:
    """A probe-chosen grid or an Optuna study with a method whose registry entry cannot take it (``auto_batches``,
    ``supports_study``): the one rule for every method, the built-in ones too (the driver asks it again of a probe
    handed to it directly)."""
    entry = method_entry(method)
    if auto_batch_sizes and not entry.auto_batches:
        raise SpecError(f"search.batch_sizes: auto is not available with search.method {entry.name} (its runs need "
                        f"their batches before anything trains); list the batch sizes")
    if study and not entry.supports_study:
        what = "trains a fixed grid, not an Optuna study" if entry.fixed_grid else "keeps no Optuna study"
        raise SpecError(f"search.study_storage: search.method {entry.name} {what}; drop the study storage")


CROSS_FIELD_RULES: tuple[Callable[[SearchSpec], None], ...] = (
    _hub_source_names_a_dataset, _local_files_exist, _probe_batch_splits_over_workers,
    _reports_land_on_whole_batches, _budget_samples_fit, _tokens_need_a_causal_lm, _budget_tokens_fit,
    _persistent_workers_need_workers, _every_batch_size_is_trained, _accuracy_needs_classification, _bleu_needs_seq2seq,
    _translation_is_seq2seq,
    _markov_is_a_causal_lm,
    _seq2seq_has_no_probe, _generation_needs_seq2seq, _mode_matches_metric, _one_tolerance,
    _grid_trains_to_the_full_budget, _grace_period_is_whole_report_intervals, _batch_sizes_split_over_workers,
    _study_needs_optuna, _method_can_do_what_is_asked, *SCALE_RULES,
)
"""The rules that relate fields, in the order ``validate`` applies them; the first that fails is the error.
A rule comes after those it relies on: ``_reports_land_on_whole_batches`` makes ``eval_every_samples`` a
positive divisor before the budget and grace-period rules divide by it."""
