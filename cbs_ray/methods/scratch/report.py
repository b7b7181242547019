"""The report of a from-scratch search: ``python -m cbs_ray.report EXPERIMENT_DIR [--output DIR]
[--tolerance 0.01] [--target VALUE]``.

Reads only what Tune persisted (through ``records.storage``; no cluster needed), so it works on finished,
partially finished, still running and resumed experiments; the search runs it at the end. Writes
``summary.json``, ``trials.csv``, ``history.csv``, the PNG plots, ``report.md`` and a self-contained
``report.html`` (images embedded). ``ScratchReport`` is the method's report steps (``report.methods`` holds it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from cbs_ray.maths.lr_schedule import seed_warmup_fraction
from cbs_ray.methods.scratch.headline import headline
from cbs_ray.methods.scratch.page import render_html, render_markdown
from cbs_ray.methods.scratch.plots import all_plots
from cbs_ray.methods.scratch.reading import summarize, write_summary
from cbs_ray.methods.scratch.summary import CriticalBatch, Recommendation, Summary, Tradeoff
from cbs_ray.records.columns import Column
from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.storage import ReportError, first_error, load_history, read_meta
from cbs_ray.report.folder import report_folder
from cbs_ray.report.reading import Reading, next_search_of
from cbs_ray.spec.paths import expand_user
from cbs_ray.spec.tolerance import unit_of_record

__all__ = ["Report", "analyze", "seeded_configurations", "ScratchReport", "REPORT"]


@dataclass
class Report:
    """The analysed experiment. ``summary`` is the typed answer (summary.json is its ``to_json``); the
    properties are views of it."""

    summary: Summary
    history: pd.DataFrame
    experiment_path: str

    @property
    def per_batch(self) -> pd.DataFrame:
        return pd.DataFrame(self.summary.per_batch)

    @property
    def critical_batch(self) -> CriticalBatch:
        return self.summary.critical_batch

    @property
    def tradeoff(self) -> Tradeoff:
        return self.summary.critical_batch.tradeoff

    @property
    def pareto(self) -> pd.DataFrame:
        return pd.DataFrame(self.summary.pareto)

    @property
    def recommendation(self) -> Optional[Recommendation]:
        return self.summary.recommendation

    def write(self, directory: str | os.PathLike) -> Path:
        """Write every output into ``directory``; returns the path of report.html."""

        with report_folder(directory, self.summary.experiment_path, name=self.summary.name,
                           method="scratch") as folder:
            write_summary(self.summary, self.history, folder)
            plots = all_plots(self.summary, folder, self.history) if self.summary.trials else {}
            (folder / "report.md").write_text(render_markdown(self.summary, plots))
            html = folder / "report.html"
            html.write_text(render_html(self.summary, plots))
        return html


def seeded_configurations(spec: dict, batch_sizes) -> Optional[dict]:
    """batch size → the (alpha, warmup fraction) a TPE or random search seeded it with (``tune.search_space``'s
    seeds: the middle alpha, ``maths.lr_schedule.seed_warmup_fraction``), from the experiment's recorded spec;
    None for a grid, which seeds nothing, or a spec that does not say. An experiment seeded by the rule before
    it (the warmup spread over the grid) matches none: its report says nothing of seeds."""
    search, training = spec.get("search") or {}, spec.get("training") or {}
    alphas, warmups, base = search.get("alpha_range"), search.get("warmup_fraction_range"), training.get("base_batch")
    if search.get("strategy", "tpe") == "grid" or not (alphas and warmups and base):
        return None
    return {int(b): (sum(alphas) / 2, seed_warmup_fraction(warmups, int(b), int(base))) for b in batch_sizes}


def analyze(source, *, tolerance: Optional[float] = None, target: Optional[float] = None,
            turning_fit: Optional[str] = None) -> Report:
    """Analyse an experiment directory (path or URI) or a ``ray.tune.ResultGrid`` of a cbs-ray search.
    ``tolerance`` and ``turning_fit`` default to the spec's ``search.tolerance`` and ``search.turning_point``; the
    tolerance is in the unit the experiment recorded (``spec.tolerance.unit_of_record``: none recorded, relative)."""
    experiment = getattr(source, "experiment_path", None) or str(source)
    if "://" not in experiment and not expand_user(experiment, "EXPERIMENT_DIR").is_dir():
        raise ReportError(f"{experiment}: no such experiment directory")
    meta = read_meta(experiment)
    history = load_history(experiment)
    if meta.get("repeats_experiment") and not history.empty:
        try:
            repeats = load_history(meta["repeats_experiment"])
        except ReportError:  # the repeats were killed before Tune saved anything: report the search alone
            repeats = pd.DataFrame()
        if not repeats.empty:
            history = pd.concat([history.assign(**{Column.repeat: False}), repeats.assign(**{Column.repeat: True})],
                                ignore_index=True)
    if history.empty:
        raise ReportError(f"{experiment}: no trial has reported a result yet" + first_error(experiment))
    raw_spec = meta.get("spec")
    spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}  # a tampered one: the defaults
    summary = summarize(history, metric=meta["metric"], mode=meta["mode"], budget_samples=meta["budget_samples"],
                        tolerance=meta["tolerance"] if tolerance is None else tolerance, target=target,
                        tolerance_unit=unit_of_record(meta.get("tolerance_unit")),
                        turning_fit=turning_fit or spec.get("search", {}).get("turning_point", "monotone"),
                        # a next search never proposes a batch smaller than the workers it splits over
                        min_batch_size=int(spec.get("resources", {}).get("workers_per_trial") or 1),
                        seeds=seeded_configurations(spec, history[Column.batch_size].unique()),
                        next_search=next_search_of(spec or None))
    summary = replace(summary, experiment_path=experiment, name=meta.get("name"), spec=spec or None)
    return Report(summary, history, experiment)


class ScratchReport:
    """``search.method: scratch``: the report rebuilt from what Tune stored (``report.reading.MethodReport``)."""

    name = "scratch"
    described = "a from-scratch search"
    report_flags = ("--tolerance", "--target", "--turning-point")

    def summarize(self, path: str, meta: Optional[ExperimentMeta], *, tolerance: Optional[float] = None,
                  target: Optional[float] = None, turning_fit: Optional[str] = None) -> Reading[Summary]:
        """``analyze`` (where ``meta`` cannot be read its report says why)."""
        rebuilt = analyze(path, tolerance=tolerance, target=target, turning_fit=turning_fit)
        summary = rebuilt.summary
        return Reading(summary, rebuilt.history, tuple(headline(summary)), summary.answer, source=rebuilt)

    def render(self, reading: Reading[Summary], out: Path) -> Path:
        assert reading.source is not None  # summarize keeps the rebuilt report to write
        return reading.source.write(out)

    def run_lines(self, reading: Reading[Summary]) -> list[str]:
        """The best metric per batch size at the full budget, as a table."""
        summary = reading.summary
        metric, per_batch = summary.metric, pd.DataFrame(summary.per_batch)
        cols = [c for c in ["batch_size", "trials", "completed", "stopped", "diverged", f"best_{metric}",
                            f"dev_{metric}", "alpha", "warmup_fraction", "peak_lr", "steps_to_target", "wall_time_s"]
                if c in per_batch]
        return ["\nBest metric per batch size at the full budget:",
                per_batch[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}")]

    def report_lines(self, page: Path, out: Path, path: str) -> list[str]:
        return [f"Report: {page.resolve()}"]


REPORT = ScratchReport()
"""What its entry in ``records.method_registry`` names."""
