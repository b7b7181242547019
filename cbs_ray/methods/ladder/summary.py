"""The ladder's summary as typed records (``LadderSummary`` and its parts), each with ``to_dict`` (the mapping
``summary.json`` holds, keys in the order it has always written them) and ``from_dict`` (that mapping read back).
``methods.ladder.reading.summarize_ladder`` builds them; ``methods.ladder.report`` reads them by attribute.

A key that only some summaries carry (``ladder.predict`` and ``ladder.through_loss`` with ``ladder.predict: loss``;
the predictor's own figures where ``maths.prediction`` made the prediction) is a field that is None where the key is
absent: ``to_dict`` leaves it out there, so a summary reads and writes byte for byte as before these types
(``tests/golden/test_ladder_summary_types.py``). Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from cbs_ray.analysis.decision import Decision
from cbs_ray.analysis.json_values import json_clean
from cbs_ray.maths.prediction import Prior
from cbs_ray.records.columns import Column

__all__ = ["RungRecord", "NoiseScale", "ThroughLoss", "LadderFit", "PredictorFigures", "LadderPrediction",
           "JudgedBaseline", "PowerLawBeside", "PredictionValidation", "ReferenceLaw", "ReferenceLaws", "LadderCost",
           "LadderSummary"]

Interval = Optional[list[float]]
"""A ``[low, high]`` pair as summary.json holds it, or None."""


def _pair(value: Any) -> Optional[list[Any]]:
    return list(value) if value is not None else None


@dataclass(frozen=True)
class RungRecord:
    """One rung (``maths.ladder.Rung``) as summary.json records it."""

    samples_seen: float
    b_crit: Optional[float]
    b_crit_ci: Interval
    """Its 95 % bootstrap interval."""
    overhead_20pct: Optional[int]
    """The 20 % rule's batch (Zhang et al. 2025)."""
    target_loss: Optional[float]
    steps_by_batch: dict[str, float]
    """Batch (a string, as in JSON) → the optimizer steps S(B) its seed-mean curve took to the target."""
    reason: Optional[str]
    """Why there is no B_crit, where there is none."""
    censored: list[int]
    """The batches already below the target at their first evaluation."""

    def to_dict(self) -> dict:
        return json_clean({Column.samples_seen: self.samples_seen, "b_crit": self.b_crit, "b_crit_ci": self.b_crit_ci,
                           "overhead_20pct": self.overhead_20pct, "target_loss": self.target_loss,
                           "steps_by_batch": self.steps_by_batch, "reason": self.reason, "censored": self.censored})

    @classmethod
    def from_dict(cls, d: Mapping) -> RungRecord:
        return cls(d[Column.samples_seen], d["b_crit"], _pair(d["b_crit_ci"]), d["overhead_20pct"], d["target_loss"],
                   dict(d["steps_by_batch"]), d["reason"], list(d["censored"]))


@dataclass(frozen=True)
class NoiseScale:
    """The gradient noise scale B_simple the runs measured on the way (``reading.noise_scale_at``): a diagnostic."""

    by_rung: list[list[float]]
    """``[samples_seen, median B_simple, runs]`` at each rung where some run reported it."""
    exponent: Optional[float]
    """Its power law in D (None with fewer than 3 rungs)."""
    constant: Optional[float]

    def to_dict(self) -> dict:
        return json_clean({"by_rung": self.by_rung, "exponent": self.exponent, "constant": self.constant})

    @classmethod
    def from_dict(cls, d: Mapping) -> NoiseScale:
        return cls([list(x) for x in d["by_rung"]], d["exponent"], d["constant"])


@dataclass(frozen=True)
class ThroughLoss:
    """``ladder.predict: loss``'s own figures (``maths.ladder_loss``): B_crit = constant·L^exponent over the rungs and
    the loss at D by its own power law over the last octave before the stop."""

    constant: Optional[float]
    exponent: Optional[float]
    exponent_ci: Interval
    fit_p_value: Optional[float]
    refusal: Optional[str]
    loss_at_budget: Optional[float]
    loss_exponent: Optional[float]
    loss_octave_samples: Optional[list[float]]
    loss_anchor: Optional[list[Optional[float]]]
    """``[samples, loss]`` the loss law is anchored at."""

    def to_dict(self) -> dict:
        return json_clean({"constant": self.constant, "exponent": self.exponent, "exponent_ci": self.exponent_ci,
                           "fit_p_value": self.fit_p_value, "refusal": self.refusal,
                           "loss_at_budget": self.loss_at_budget, "loss_exponent": self.loss_exponent,
                           "loss_octave_samples": self.loss_octave_samples, "loss_anchor": self.loss_anchor})

    @classmethod
    def from_dict(cls, d: Mapping) -> ThroughLoss:
        return cls(d["constant"], d["exponent"], _pair(d["exponent_ci"]), d["fit_p_value"], d["refusal"],
                   d["loss_at_budget"], d["loss_exponent"], _pair(d["loss_octave_samples"]), _pair(d["loss_anchor"]))


@dataclass(frozen=True)
class LadderFit:
    """summary.json's ``ladder``: the rungs, the power law in D over them (``maths.ladder.fit_ladder``) and how they
    were read."""

    fraction_samples: int
    """The ladder's stop: where the smallest batch's runs end (D × the fraction)."""
    rungs: list[RungRecord]
    exponent: Optional[float]
    exponent_ci: Interval
    exponent_se: Optional[float]
    constant: Optional[float]
    fit_p_value: Optional[float]
    rungs_used: list[float]
    """The rungs the power law was fitted on (samples seen)."""
    refusal: Optional[str]
    """Why the power law made no prediction, where it made none."""
    overhead_exponent: Optional[float]
    curve: str
    """``ladder.curve``: how the rungs read each batch's curve."""
    reading: str
    """``ladder.reading``: ``raw`` or ``ewa`` (the average of the iterates)."""
    column: str
    """The history column the rungs read."""
    cap_samples: int
    step_count: str
    """``ladder.step_count``: ``optimizer`` or ``lr_weighted``."""
    warmup_steps: Optional[dict[str, int]]
    """Each batch's warmup steps, as the metadata recorded them."""
    cuts: dict[str, float]
    """Batch → where a ladder alone would have stopped its runs (``reading_stop.ladder_cuts``)."""
    rung_span: Optional[float]
    """The largest fitted rung over the smallest."""
    noise_scale: Optional[NoiseScale]
    predict: Optional[str] = None
    """``loss`` with ``ladder.predict: loss``; None (no key) for the power law, as every summary before the key."""
    through_loss: Optional[ThroughLoss] = None

    def to_dict(self) -> dict:
        loss = {"predict": self.predict, "through_loss": self.through_loss} if self.predict is not None else {}
        return json_clean({
            "fraction_samples": self.fraction_samples, "rungs": self.rungs, "exponent": self.exponent,
            "exponent_ci": self.exponent_ci, "exponent_se": self.exponent_se, "constant": self.constant,
            "fit_p_value": self.fit_p_value, "rungs_used": self.rungs_used, "refusal": self.refusal,
            "overhead_exponent": self.overhead_exponent, "curve": self.curve, "reading": self.reading,
            "column": self.column, "cap_samples": self.cap_samples, "step_count": self.step_count,
            Column.warmup_steps: self.warmup_steps, "cuts": self.cuts, "rung_span": self.rung_span,
            "noise_scale": self.noise_scale, **loss})

    @classmethod
    def from_dict(cls, d: Mapping) -> LadderFit:
        noise, through = d["noise_scale"], d.get("through_loss")
        return cls(d["fraction_samples"], [RungRecord.from_dict(r) for r in d["rungs"]], d["exponent"],
                   _pair(d["exponent_ci"]), d["exponent_se"], d["constant"], d["fit_p_value"], list(d["rungs_used"]),
                   d["refusal"], d["overhead_exponent"], d["curve"], d["reading"], d["column"], d["cap_samples"],
                   d["step_count"], d[Column.warmup_steps], dict(d["cuts"]), d["rung_span"],
                   NoiseScale.from_dict(noise) if noise is not None else None, d.get("predict"),
                   ThroughLoss.from_dict(through) if through is not None else None)


@dataclass(frozen=True)
class PredictorFigures:
    """Where the prediction's exponent came from (``maths.prediction.Prediction``), where that predictor made it."""

    source: Optional[str]
    """``rungs``, ``prior`` or ``combined``."""
    exponent: Optional[float]
    exponent_sd: Optional[float]
    form: Optional[str]
    anchor_samples: Optional[float]
    """The anchor: the rungs' centroid (samples), where the prediction is carried to D from."""
    rungs_exponent: Optional[float]
    rungs_exponent_se: Optional[float]
    rung_share: Optional[float]
    """The rungs' share of the exponent's precision."""
    prior: Optional[Prior]
    anchor_b_crit: Optional[float] = None
    """B_crit at the anchor (the rungs' centroid)."""
    literature_band: Optional[list[float]] = None
    """``[low, high]``: the same anchor carried with the literature's smallest and largest exponent."""
    warnings: list[str] = field(default_factory=list)
    """One line each: flat or falling rungs, too few rungs in use, rungs left out."""
    left_out: list[dict] = field(default_factory=list)
    """The rungs the prediction left out: ``{"samples", "b_crit", "reason"}`` (off the batch grid, ...)."""

    KEYS = ("source", "exponent", "exponent_sd", "form", "anchor_samples", "rungs_exponent", "rungs_exponent_se",
            "rung_share", "prior")
    NEW_KEYS = ("anchor_b_crit", "literature_band", "warnings", "left_out")
    """Written since the prediction was re-posed (rungs inside the grid, the centroid anchor); a summary written
    before has none of them."""

    def to_dict(self) -> dict:
        p = self.prior
        prior = None if p is None else {"definition": p.definition, "mean": p.mean, "sd": p.sd, "source": p.source}
        return json_clean({**{k: getattr(self, k) for k in self.KEYS[:-1]}, "prior": prior,
                           **{k: getattr(self, k) for k in self.NEW_KEYS}})

    @classmethod
    def from_dict(cls, d: Mapping) -> PredictorFigures:
        prior = d["prior"]
        return cls(**{k: d[k] for k in cls.KEYS[:-1]}, prior=Prior(**prior) if prior is not None else None,
                   anchor_b_crit=d.get("anchor_b_crit"), literature_band=_pair(d.get("literature_band")),
                   warnings=list(d.get("warnings") or []), left_out=[dict(r) for r in d.get("left_out") or []])


@dataclass(frozen=True)
class LadderPrediction:
    """summary.json's ``prediction``: B_crit at the full budget with its 90 % interval, the batch it recommends and
    that batch's LR and warmup, or ``refusal``."""

    budget_samples: int
    b_crit: Optional[float]
    interval_90: Interval
    batch_size: Optional[int]
    """The recommended batch (``maths.ladder.recommend_batch`` on the interval's low end)."""
    overhead_20pct: Optional[float]
    refusal: Optional[str]
    peak_lr: Optional[float]
    """The peak LR at ``batch_size`` (``ladder.alpha``'s rule)."""
    warmup_steps: Optional[int]
    alpha: float
    batch_size_schedule: Optional[dict]
    """Branch mode's schedule for the same spec, as ``methods.branch.same_spec.same_spec_schedule`` reads it."""
    warmup_samples: Optional[int]
    b_simple_prediction: Optional[float]
    """What B_simple's power law over the rungs gives at D."""
    figures: Optional[PredictorFigures] = None
    """None where the prediction went through the loss (``ladder.predict: loss``)."""

    def to_dict(self) -> dict:
        return json_clean({
            "budget_samples": self.budget_samples, "b_crit": self.b_crit, "interval_90": self.interval_90,
            Column.batch_size: self.batch_size, "overhead_20pct": self.overhead_20pct, "refusal": self.refusal,
            Column.peak_lr: self.peak_lr, Column.warmup_steps: self.warmup_steps, Column.alpha: self.alpha,
            "batch_size_schedule": self.batch_size_schedule, "warmup_samples": self.warmup_samples,
            "b_simple_prediction": self.b_simple_prediction,
            **(self.figures.to_dict() if self.figures is not None else {})})

    @classmethod
    def from_dict(cls, d: Mapping) -> LadderPrediction:
        return cls(d["budget_samples"], d["b_crit"], _pair(d["interval_90"]), d[Column.batch_size], d["overhead_20pct"],
                   d["refusal"], d[Column.peak_lr], d[Column.warmup_steps], d[Column.alpha], d["batch_size_schedule"],
                   d["warmup_samples"], d["b_simple_prediction"],
                   PredictorFigures.from_dict(d) if "source" in d else None)


@dataclass(frozen=True)
class JudgedBaseline:
    """A baseline's (or B_simple's) B_crit at D and its |log2 error| against the measurement (None: not judged)."""

    b_crit: Optional[float]
    log2_error: Optional[float]

    def to_dict(self) -> dict:
        return json_clean({"b_crit": self.b_crit, "log2_error": self.log2_error})

    @classmethod
    def from_dict(cls, d: Mapping) -> JudgedBaseline:
        return cls(d["b_crit"], d["log2_error"])


@dataclass(frozen=True)
class PowerLawBeside:
    """The power law in D's own prediction on the same rungs, judged against the same measurement."""

    b_crit: Optional[float]
    interval_90: Interval
    refusal: Optional[str]
    log2_error: Optional[float]
    within_interval: Optional[bool]

    def to_dict(self) -> dict:
        return json_clean({"b_crit": self.b_crit, "interval_90": self.interval_90, "refusal": self.refusal,
                           "log2_error": self.log2_error, "within_interval": self.within_interval})

    @classmethod
    def from_dict(cls, d: Mapping) -> PowerLawBeside:
        return cls(d["b_crit"], _pair(d["interval_90"]), d["refusal"], d["log2_error"], d["within_interval"])


@dataclass(frozen=True)
class PredictionValidation:
    """summary.json's ``prediction_validation`` (``ladder.validate``): the prediction against B_crit measured at D,
    beside the naive baselines; the judgements are None where nothing was measured or predicted."""

    measured_b_crit: Optional[float]
    measured_b_crit_ci: Interval
    measured_overhead_20pct: Optional[int]
    measured_reason: Optional[str]
    """Why B_crit at D could not be measured, where it could not."""
    measured_censored: Optional[list[int]]
    measurement_samples: int
    samples_ratio: Optional[float]
    """The ladder's samples over the measurement's."""
    log2_target: float
    measurement_cap_samples: Optional[int]
    b_crit_beyond_rungs: list[list[float]]
    """``[samples, B_crit]`` at every evaluation of the smallest batch from the fraction to D."""
    exponent_beyond_rungs: Optional[float]
    within_interval: Optional[bool]
    log2_error: Optional[float]
    baselines: dict[str, JudgedBaseline]
    beats_baselines: Optional[bool]
    b_simple_prediction: JudgedBaseline
    target_met: Optional[bool]
    power_law_prediction: PowerLawBeside

    def to_dict(self) -> dict:
        names = ("measured_b_crit", "measured_b_crit_ci", "measured_overhead_20pct", "measured_reason",
                 "measured_censored", "measurement_samples", "samples_ratio", "log2_target", "measurement_cap_samples",
                 "b_crit_beyond_rungs", "exponent_beyond_rungs", "within_interval", "log2_error", "baselines",
                 "beats_baselines", "b_simple_prediction", "target_met", "power_law_prediction")
        return json_clean({k: getattr(self, k) for k in names})

    @classmethod
    def from_dict(cls, d: Mapping) -> PredictionValidation:
        return cls(d["measured_b_crit"], _pair(d["measured_b_crit_ci"]), d["measured_overhead_20pct"],
                   d["measured_reason"], _pair(d["measured_censored"]), d["measurement_samples"], d["samples_ratio"],
                   d["log2_target"], d["measurement_cap_samples"], [list(x) for x in d["b_crit_beyond_rungs"]],
                   d["exponent_beyond_rungs"], d["within_interval"], d["log2_error"],
                   {k: JudgedBaseline.from_dict(v) for k, v in d["baselines"].items()}, d["beats_baselines"],
                   JudgedBaseline.from_dict(d["b_simple_prediction"]), d["target_met"],
                   PowerLawBeside.from_dict(d["power_law_prediction"]))


@dataclass(frozen=True)
class ReferenceLaw:
    """What one closed-form law gives at the budget, in tokens and in samples per batch."""

    tokens: float
    samples: float

    def to_dict(self) -> dict:
        return json_clean({"tokens": self.tokens, "samples": self.samples})


@dataclass(frozen=True)
class ReferenceLaws:
    """summary.json's ``reference_laws``: the closed-form laws by name and a note on what they are (None: no key);
    empty (``{}``) without tokens per sample."""

    laws: dict[str, ReferenceLaw]
    note: Optional[str] = None

    def to_dict(self) -> dict:
        return json_clean({**self.laws, **({"note": self.note} if self.note is not None else {})})

    @classmethod
    def from_dict(cls, d: Mapping) -> ReferenceLaws:
        return cls({k: ReferenceLaw(v["tokens"], v["samples"]) for k, v in d.items() if k != "note"}, d.get("note"))


@dataclass(frozen=True)
class LadderCost:
    """summary.json's ``cost``: the samples the ladder trained against a from-scratch search at D."""

    ladder_samples: int
    full_budget_samples: int
    fraction_of_full: float

    def to_dict(self) -> dict:
        return json_clean({"ladder_samples": self.ladder_samples, "full_budget_samples": self.full_budget_samples,
                           "fraction_of_full": self.fraction_of_full})

    @classmethod
    def from_dict(cls, d: Mapping) -> LadderCost:
        return cls(d["ladder_samples"], d["full_budget_samples"], d["fraction_of_full"])


@dataclass(frozen=True)
class LadderSummary:
    """The ladder's answer; ``to_json`` is ``summary.json``, ``from_json`` reads it back."""

    ladder: LadderFit
    prediction: LadderPrediction
    prediction_validation: Optional[PredictionValidation]
    """With ``ladder.validate``; else None."""
    reference_laws: ReferenceLaws
    """What closed-form laws give here, in samples per batch, for reference only."""
    curves: dict[str, list[list[float]]]
    """Seed-mean learning curves by batch: ``[[samples_seen, eval_loss], ...]``."""
    cost: LadderCost
    batch_sizes: list[int]
    name: Optional[str] = None
    experiment_path: Optional[str] = None
    method: str = "ladder"
    metric: str = "eval_loss"
    decision: Optional[Decision] = None
    """What to train the run at (decision.py's ``decide_ladder``), after ``method``; None (no key) in a summary
    written before the decision line."""

    def to_dict(self) -> dict:
        decision = {"decision": self.decision} if self.decision is not None else {}
        return json_clean({"method": self.method, **decision, "ladder": self.ladder, "prediction": self.prediction,
                           "prediction_validation": self.prediction_validation,
                           "reference_laws": self.reference_laws, "curves": self.curves, "cost": self.cost,
                           "batch_sizes": self.batch_sizes, "name": self.name,
                           "experiment_path": self.experiment_path, "metric": self.metric})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    @classmethod
    def from_dict(cls, d: Mapping) -> LadderSummary:
        v = d["prediction_validation"]
        return cls(LadderFit.from_dict(d["ladder"]), LadderPrediction.from_dict(d["prediction"]),
                   PredictionValidation.from_dict(v) if v is not None else None,
                   ReferenceLaws.from_dict(d["reference_laws"]), {k: [list(p) for p in c] for k, c in
                                                                  d["curves"].items()},
                   LadderCost.from_dict(d["cost"]), list(d["batch_sizes"]), d["name"], d["experiment_path"],
                   d["method"], d["metric"], Decision.from_dict(d["decision"]) if d.get("decision") else None)

    @classmethod
    def from_json(cls, text: str) -> LadderSummary:
        return cls.from_dict(json.loads(text))
