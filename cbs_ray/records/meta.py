"""What a search records about its experiment beside Tune's files (``cbs_spec.json``): one ``ExperimentMeta``.

The driver writes it before the first trial starts and updates it before each later stage (the repeats, the
schedule run), recording which stage runs and where (``stages``), so that a killed search can be resumed and
reported from it alone. Its keys are this
dataclass's fields, defined once here, and the method's own record (``method_record``: what its folder writes and
reads, e.g. branch mode's resolved ``branch:`` section and where its trunk's checkpoints are), one mapping under its
key. An experiment written before the record kept the method's keys flat beside the fields (branch mode's
``checkpoint_dir``, ``schedule_experiment`` and ``schedule`` were fields): ``from_dict`` reads that layout into the
record, and ``recorded`` gives the methods' readings the flat mapping they read either way.

``format`` says which cbs-ray wrote it: 1 (no ``format`` key) before the package moved into subpackages,
2 since, with ``data_fingerprint`` (``data.arrays.PreparedData.fingerprint``: a digest of the tokens the trials
trained on), which ``--resume`` compares with what the spec prepares now, so that a spec that would resolve
to other data (a generator that changed, a file edited since) is an error instead of a silent change.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Optional

from cbs_ray.records.method_registry import DEFAULT_METHOD, UnknownMethodError, method_entry
from cbs_ray.records.names import name_problem
from cbs_ray.records.storage import ReportError, read_meta, write_meta

__all__ = ["ExperimentMeta", "FORMAT", "METHOD_RECORD"]

FORMAT = 2
"""The metadata's format this cbs-ray writes (see the module docstring)."""

MAPPING_FIELDS = ("spec", "study", "user_objects", "method_record")
"""The metadata's fields that hold a mapping (``spec`` never None)."""

METHOD_RECORD = "method_record"
"""The file's key of the method's own record."""


@dataclass
class ExperimentMeta:
    """One experiment's ``cbs_spec.json``."""

    name: str
    """The spec's name (the experiment directory adds the date and time)."""
    metric: str
    """The metric the search selects on (``eval_loss`` for a branch search)."""
    mode: str
    """``max`` or ``min``: which way the metric is better."""
    spec: dict[str, Any]
    """The validated spec, as ``spec.load.spec_to_dict`` writes it: what ``--resume`` continues."""
    budget_samples: Optional[int] = None
    """The resolved equal-sample budget every trial trains."""
    method: str = DEFAULT_METHOD
    """The search method (``search.method``) that wrote the experiment: which method resumes and reports it."""
    format: int = FORMAT
    """1: written before the subpackages (no fingerprint), 2: this format."""
    data_fingerprint: Optional[str] = None
    """``PreparedData.fingerprint`` of the data the trials trained on; None with the user's own objects
    (``resume_search`` gets them passed again) and in format 1."""
    tolerance: Optional[float] = None
    """The turning point's (or branch mode's) tolerance the search ran with."""
    tolerance_unit: Optional[str] = None
    """``nats`` or ``relative`` (``spec.tolerance``); None, written before the unit was recorded: relative."""
    tokens_per_sample: Optional[int] = None
    """Tokens in every sample with packed texts (a token budget), else None."""
    mlflow_parent_run_id: Optional[str] = None
    """The MLflow run that holds the trials' runs (``tracking.mlflow``)."""
    study: Optional[dict[str, Any]] = None
    """``{"storage": ..., "name": ...}``: the persistent Optuna study (``search.study_storage``)."""
    user_objects: Optional[dict[str, Any]] = None
    """What the user's objects were (``sources.object_checks.objects_meta``), when the search ran on them."""
    stages: Optional[list[dict[str, str]]] = None
    """The method's stages the driver started, in order, each ``{"name": ..., "experiment": ...}`` (its name in the
    method's ``tune.search_method.Stage`` list, its Tune experiment's path; the first is this experiment), each
    recorded before it starts: the last is the one that ran last, the one ``--resume`` restores
    (``tune.driver.resume_actions``). None in an experiment written before the record:
    ``stage_record`` reads it from ``repeats_experiment`` and the record's ``schedule_experiment``."""
    repeats_experiment: Optional[str] = None
    """The repeats' Tune experiment, recorded before they start (the report reads it)."""
    method_record: dict[str, Any] = field(default_factory=dict)
    """What the method records of its own, written and read by its folder alone (branch mode: its resolved section,
    ``checkpoint_dir``, the schedule run's ``schedule_experiment`` and ``schedule``; the ladder: its resolved
    section); empty for a method that records nothing more."""

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ExperimentMeta:
        """From the file's mapping: the fields by name and the method's record under its key, or, written before the
        record, every other key (the method's, flat beside the fields); a mapping without ``format`` is format 1."""
        names = {f.name for f in fields(cls)} - {METHOD_RECORD}
        missing = [k for k in ("name", "metric", "mode", "spec") if k not in raw]
        if missing:
            raise ReportError(f"{', '.join(missing)} missing from the experiment's metadata")
        problem = name_problem(raw["name"])
        if problem:  # the name becomes the report's folder: never a path that leads outside ./cbs_results/
            raise ReportError(f"the experiment's metadata is damaged: name {problem}")
        try:  # an unknown method is one line, never another method's steps nor its report folder
            method_entry(raw.get("method", DEFAULT_METHOD))
        except UnknownMethodError as e:
            raise UnknownMethodError(f"the experiment's metadata names an {e}") from None
        not_mappings = [k for k in MAPPING_FIELDS if k in raw and not isinstance(raw[k], dict)
                        and not (raw[k] is None and k != "spec")]
        if not_mappings:  # a tampered spec that is a list ended in AttributeError
            raise ReportError(f"the experiment's metadata is damaged: {', '.join(not_mappings)} is not a mapping")
        if raw.get("stages") is not None and not _stage_list(raw["stages"]):
            raise ReportError("the experiment's metadata is damaged: stages is not a list of {name, experiment}")
        known = {k: v for k, v in raw.items() if k in names}
        # the layout before the record kept the method's keys flat beside the fields: they are read into it
        record = {k: v for k, v in raw.items() if k not in names and k != METHOD_RECORD}
        return cls(**{"format": 1, **known}, method_record={**record, **(raw.get(METHOD_RECORD) or {})})

    def stage_record(self, first_stage: str, path: str) -> list[tuple[str, str]]:
        """The stages started, in order, as (name, Tune experiment): ``stages``, or in an experiment written before
        it, ``first_stage`` (the name the method gives its first) and the later stages its old fields name; the
        first's experiment is ``path``, where the experiment is now (it may have been moved since)."""
        if self.stages is not None:
            recorded = [(s["name"], s["experiment"]) for s in self.stages]
        else:
            later = (("repeats", self.repeats_experiment), ("schedule", self.method_record.get("schedule_experiment")))
            recorded = [(first_stage, path), *((name, e) for name, e in later if e)]
        return [(recorded[0][0], path), *recorded[1:]] if recorded else [(first_stage, path)]

    def to_dict(self) -> dict[str, Any]:
        """The file's mapping: the fields that are set, the method's record (where it has one) under its key."""
        return {k: v for k, v in asdict(self).items() if v is not None and (k != METHOD_RECORD or v)}

    def recorded(self) -> dict[str, Any]:
        """What a method's reading reads: the fields that are set and the method's record's keys beside them (the
        flat mapping the readings were written against, whichever layout the file has)."""
        raw = {k: v for k, v in asdict(self).items() if k != METHOD_RECORD and v is not None}
        return {**raw, **self.method_record}

    def updated(self, changes: dict[str, Any]) -> ExperimentMeta:
        """This metadata with ``changes`` (the file's keys a later stage records) set; the keys of their
        ``method_record`` are added to this one's record, not put in its place."""
        record = {**self.method_record, **changes.get(METHOD_RECORD, {})}
        return ExperimentMeta.from_dict({**self.to_dict(), **changes, METHOD_RECORD: record})

    @classmethod
    def read(cls, experiment_uri: str) -> ExperimentMeta:
        """The experiment's metadata; ``ReportError`` when it is missing or damaged."""
        try:
            return cls.from_dict(read_meta(experiment_uri))
        except TypeError as e:
            raise ReportError(f"{experiment_uri}: the experiment's metadata is damaged ({e})") from None

    def write(self, experiment_uri: str) -> None:
        write_meta(experiment_uri, self.to_dict())


def _stage_list(value: Any) -> bool:
    """Whether ``value`` is a stage record: a list of ``{"name": str, "experiment": str}``."""
    return isinstance(value, list) and all(
        isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("experiment"), str) for s in value)
