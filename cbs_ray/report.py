"""The report: ``python -m cbs_ray.report EXPERIMENT_DIR [--output DIR] [--tolerance 0.01] [--target VALUE]``.

Reads only what Tune persisted (through ``tune_storage``; no cluster needed), so it works on finished,
partially finished, still running and resumed experiments; the search runs it at the end. Writes
``summary.json``, ``trials.csv``, ``history.csv``, four PNG plots, ``report.md`` and a self-contained
``report.html`` (images embedded).
"""

from __future__ import annotations

import base64
import math
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import pandas as pd

from .summary import CriticalBatch, NoiseScale, Recommendation, Summary, Tradeoff, summarize, write_summary
# ReportError and the spec file's helpers live with the rest of the storage reading; named here too, as
# they were this module's before.
from .tune_storage import META_FILE, ReportError, first_error, load_history, read_meta, write_meta

__all__ = ["Report", "ReportError", "analyze", "headline", "render_markdown", "render_html", "META_FILE",
           "write_meta", "read_meta"]


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
        from .plots import all_plots

        directory = Path(directory)
        write_summary(self.summary, self.history, directory)
        plots = all_plots(self.summary, directory, self.history) if self.summary.trials else {}
        (directory / "report.md").write_text(render_markdown(self.summary, plots))
        html = directory / "report.html"
        html.write_text(render_html(self.summary, plots))
        return html


def analyze(source, *, tolerance: Optional[float] = None, target: Optional[float] = None,
            turning_fit: Optional[str] = None) -> Report:
    """Analyse an experiment directory (path or URI) or a ``ray.tune.ResultGrid`` of a cbs-ray search.
    ``tolerance`` and ``turning_fit`` default to the spec's ``search.tolerance`` and ``search.turning_point``."""
    experiment = getattr(source, "experiment_path", None) or str(source)
    if "://" not in experiment and not Path(experiment).expanduser().is_dir():
        raise ReportError(f"{experiment}: no such experiment directory")
    meta = read_meta(experiment)
    history = load_history(experiment)
    if meta.get("repeats_experiment") and not history.empty:
        try:
            repeats = load_history(meta["repeats_experiment"])
        except ReportError:  # the repeats were killed before Tune saved anything: report the search alone
            repeats = pd.DataFrame()
        if not repeats.empty:
            history = pd.concat([history.assign(repeat=False), repeats.assign(repeat=True)], ignore_index=True)
    if history.empty:
        raise ReportError(f"{experiment}: no trial has reported a result yet" + first_error(experiment))
    summary = summarize(history, metric=meta["metric"], mode=meta["mode"], budget_samples=meta["budget_samples"],
                        tolerance=meta["tolerance"] if tolerance is None else tolerance, target=target,
                        turning_fit=turning_fit or ((meta.get("spec") or {}).get("search", {})
                                                    .get("turning_point", "monotone")))
    summary = replace(summary, experiment_path=experiment, name=meta.get("name"), spec=meta.get("spec"))
    return Report(summary, history, experiment)


# ---- rendering -------------------------------------------------------------------------------------

def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return ", ".join(_fmt(x) for x in v) or "–"
    return str(v)


def _table(records: list[dict], columns: list[str]) -> str:
    columns = [c for c in columns if any(c in r for r in records)]
    if not records or not columns:
        return "_none_\n"
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |" for r in records]
    return "\n".join(lines) + "\n"


READINGS = {"monotone": "monotone fit", "raw": "raw bests"}  # search.turning_point


def _turning_point_lines(cb: CriticalBatch, metric: str) -> list[str]:
    """The turning point (and the other reading where it differs), then its noise."""
    tp = cb.turning_point
    other = "raw" if tp.fit == "monotone" else "monotone"
    other_batch = tp.raw_batch_size if other == "raw" else tp.monotone_batch_size
    lines = [f"Critical batch, turning point (equal samples, tolerance {cb.tolerance:.1%}, "
             f"{READINGS[tp.fit]}): "
             + (f"{tp.batch_size}" if tp.batch_size is not None else "not determined")
             + (f" (read off the {READINGS[other]}: {other_batch})"
                if other_batch not in (None, tp.batch_size) else "")
             + (f"  [{tp.reason}]" if tp.reason else "")]
    unc = tp.uncertainty
    if unc and unc.verdict:
        v = unc.verdict
        lines.append(f"  noise: largest standard error {unc.noise_se_max:.3g} vs tolerance {v.tolerance_abs:.3g} "
                     f"({metric}); turning point range at {unc.level:.0%}: {unc.range[0]}–{unc.range[1]}; "
                     f"{v.text}")
    elif unc:
        lines.append(f"  noise: {unc.reason}")
    return lines


def _tradeoff_line(tr: Tradeoff) -> str:
    if tr.b_crit is None:
        return f"Critical batch, steps/samples tradeoff (McCandlish 2018): not determined [{tr.reason}]"
    ci = (f", 95% CI {tr.ci95[0]:.3g}–" + (f"{tr.ci95[1]:.3g}" if tr.ci95[1] is not None else
                                          "unbounded (some resamples scale perfectly)")
          if tr.ci95 else ", no CI (too few points)")
    return (f"Critical batch, steps/samples tradeoff (McCandlish 2018): B_crit = {tr.b_crit:.3g}{ci} "
            f"(S_min {tr.s_min:.3g} steps, E_min {tr.e_min:.3g} samples)")


def _noise_scale_line(noise: NoiseScale) -> str:
    if noise.mean is None:
        return f"Gradient noise scale B_simple: {noise.note or 'not measured'}"
    early = f"{noise.early:.3g}" if noise.early is not None else "–"
    return (f"Gradient noise scale B_simple (McCandlish 2018, a predictor of the critical batch): "
            f"{early} early in training, {noise.mean:.3g} averaged over training"
            + (f" ({noise.reports_left_out} of {noise.reports} reports left out: their |G|² or "
               f"tr Σ estimate was not positive, the noise not yet averaged out)"
               if noise.reports_left_out else ""))


def _recommendation_line(rec: Optional[Recommendation], metric: str) -> str:
    if not rec:
        return "Recommendation: none (no trial reached the full budget)"
    return (f"Recommendation: batch {rec.batch_size}, alpha {rec.alpha:.3g}, peak lr "
            f"{rec.peak_lr:.3g}, warmup {rec.warmup_fraction:.3g} of the steps "
            f"({rec.warmup_steps} steps) -> {metric} {rec.metric_value:.4g}, "
            f"{rec.projected_time_s:.1f} s projected")


def headline(summary: Summary) -> list[str]:
    """The three critical-batch figures and the recommendation, one line each."""
    cb, metric = summary.critical_batch, summary.metric
    oh = cb.overhead_20pct
    lines = _turning_point_lines(cb, metric)
    lines.append(_tradeoff_line(cb.tradeoff))
    lines.append("Critical batch, 20% overhead rule (Zhang 2025): "
                 + (f"{oh.batch_size}" if oh.batch_size is not None else "not determined")
                 + (f"  [{oh.reason}]" if oh.reason else ""))
    if summary.target is not None:
        lines.append(f"Target for the tradeoff and the 20% rule: {metric} {summary.target:.4g} "
                     f"({summary.target_source})")
        if cb.tradeoff.left_out:
            lines.append(f"  {cb.tradeoff.left_out}")
    lines.append(_noise_scale_line(summary.noise_scale))
    unstable = [r for r in summary.per_batch if r.get("diverged")]
    if unstable:
        lines.append("Diverged (non-finite or exploding loss; worst metric recorded): " + "; ".join(
            f"B={r['batch_size']}: {r['diverged']} trial(s), peak lr "
            + ", ".join(f"{lr:.3g}" for lr in r.get("diverged_peak_lrs", [])) for r in unstable))
    lines.append(_recommendation_line(summary.recommendation, metric))
    return lines


SNIPPET_KEYS = ["batch_size", "alpha", "peak_lr", "warmup_fraction", "warmup_steps", "budget_samples",
                "optimizer_steps"]  # the recommendation's lines to paste into a training config


def _snippet(summary: Summary) -> str:
    rec = summary.recommendation
    if not rec:
        return ""
    return "\n".join(f"{k}: {getattr(rec, k)}" for k in SNIPPET_KEYS) + "\n"


PER_BATCH_COLUMNS = ["batch_size", "trials", "completed", "stopped", "diverged", "diverged_peak_lrs", "failed",
                     "best_{metric}", "fit_{metric}", "dev_{metric}", "runs",
                     "mean_{metric}", "se_{metric}", "alpha",
                     "warmup_fraction", "peak_lr", "steps_to_target", "samples_to_target", "wall_time_s",
                     "samples_per_s", "b_simple_early", "b_simple_mean"]
PARETO_COLUMNS = ["batch_size", "alpha", "warmup_fraction", "peak_lr", "projected_time_s", "wall_time_s", "{metric}"]


def render_markdown(summary: Summary, plots: dict[str, Path]) -> str:
    metric = summary.metric
    cols = [c.format(metric=metric) for c in PER_BATCH_COLUMNS]
    pcols = [c.format(metric=metric) for c in PARETO_COLUMNS]
    parts = [f"# Critical batch report: {summary.name or ''}\n",
             f"Experiment: `{summary.experiment_path}`; metric **{metric}** ({summary.mode}), "
             f"equal-sample budget {summary.budget_samples} samples per trial.\n",
             "\n".join(f"- {line}" for line in headline(summary)) + "\n"]
    if summary.recommendation:
        parts.append("Paste into a training config:\n\n```yaml\n" + _snippet(summary) + "```\n")
    parts += ["## Per batch size\n", _table(summary.per_batch, cols),
              "\n## Pareto front (projected time = budget ÷ measured samples/s)\n",
              _table(summary.pareto_projected, pcols),
              "\n## Pareto front (measured wall time)\n", _table(summary.pareto, pcols)]
    for name, path in plots.items():
        parts.append(f"\n![{name}]({path.name})\n")
    return "\n".join(parts)


def render_html(summary: Summary, plots: dict[str, Path]) -> str:
    import html

    metric = summary.metric
    cols = [c.format(metric=metric) for c in PER_BATCH_COLUMNS]
    pcols = [c.format(metric=metric) for c in PARETO_COLUMNS]

    def table(records, columns):
        frame = pd.DataFrame(records)
        if frame.empty:
            return "<p><em>none</em></p>"
        return frame[[c for c in columns if c in frame]].to_html(index=False, na_rep="–", float_format=_fmt)

    images = "".join(
        f'<figure><img alt="{name}" src="data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()}">'
        f"<figcaption>{name}</figcaption></figure>" for name, path in plots.items())
    items = "".join(f"<li>{html.escape(line)}</li>" for line in headline(summary))
    snippet = _snippet(summary)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Critical batch report</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}img{{max-width:100%}}</style></head><body>
<h1>Critical batch report: {html.escape(str(summary.name or ''))}</h1>
<p>Experiment <code>{html.escape(str(summary.experiment_path))}</code>; metric <b>{metric}</b>
({summary.mode}), equal-sample budget {summary.budget_samples} samples per trial.</p>
<ul>{items}</ul>
{f'<p>Paste into a training config:</p><pre>{html.escape(snippet)}</pre>' if snippet else ''}
<h2>Per batch size</h2>{table(summary.per_batch, cols)}
<h2>Pareto front (projected time)</h2>{table(summary.pareto_projected, pcols)}
<h2>Pareto front (measured wall time)</h2>{table(summary.pareto, pcols)}
<h2>Plots</h2>{images}
</body></html>
"""


if __name__ == "__main__":
    from .cli import report_main

    sys.exit(report_main())
