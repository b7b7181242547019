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

from .importance import MIN_TRIALS, MIN_TRIALS_PER_BATCH, PARAMS, TOP_QUANTILE
from .summary import (CROSS_CHECKS, EFFORT_MARK, READINGS, CriticalBatch, NoiseScale, Recommendation, Summary,
                      Tradeoff, bound_text, summarize, write_summary)
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
    spec = meta.get("spec") or {}
    summary = summarize(history, metric=meta["metric"], mode=meta["mode"], budget_samples=meta["budget_samples"],
                        tolerance=meta["tolerance"] if tolerance is None else tolerance, target=target,
                        turning_fit=turning_fit or spec.get("search", {}).get("turning_point", "monotone"),
                        # a next search never proposes a batch smaller than the workers it splits over
                        min_batch_size=int(spec.get("resources", {}).get("workers_per_trial") or 1))
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


def _turning_point_lines(cb: CriticalBatch, metric: str) -> list[str]:
    """The turning point (and the other reading where it differs), then its noise."""
    tp = cb.turning_point
    other = "raw" if tp.fit == "monotone" else "monotone"
    other_batch = tp.raw_batch_size if other == "raw" else tp.monotone_batch_size
    lines = [f"Critical batch, turning point (equal samples, tolerance {cb.tolerance:.1%}, "
             f"{READINGS[tp.fit]}): "
             + bound_text(tp.batch_size, tp.bound)
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
        return ("Critical batch, steps/samples tradeoff (McCandlish 2018): "
                + (f"B_crit {bound_text(tr.b_crit_bound, tr.bound, '{:.3g}')}" if tr.bound else "not determined")
                + f" [{tr.reason}]")
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
            f"{rec.projected_time_s:.1f} s projected" + (f"\n  {rec.note}" if rec.note else ""))


def headline(summary: Summary) -> list[str]:
    """The one answer (``Summary.answer``), its cross-checks and notes, then the three critical-batch figures
    and the recommendation, one line each (a reading at the edge of the grid written as a bound, "≥ 128")."""
    cb, metric = summary.critical_batch, summary.metric
    oh = cb.overhead_20pct
    lines = [summary.answer.text, summary.answer.cross_checks]
    lines += [f"Unequal search effort: {note}" for note in summary.answer.notes]
    lines += _turning_point_lines(cb, metric)
    lines.append(_tradeoff_line(cb.tradeoff))
    lines.append("Critical batch, 20% overhead rule (Zhang 2025): " + bound_text(oh.batch_size, oh.bound)
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
    lines += _recommendation_line(summary.recommendation, metric).split("\n")
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
# The per-batch columns the page shows first (the rest fold under "all columns"): what the answer rests on.
KEY_COLUMNS = ["batch_size", "trials", "completed", "best_{metric}", "mean_{metric}", "se_{metric}", "fit_{metric}",
               "peak_lr", "steps_to_target"]
PARETO_COLUMNS = ["batch_size", "alpha", "warmup_fraction", "peak_lr", "projected_time_s", "wall_time_s", "{metric}"]
FIRST_PLOT = "metric_vs_batch"  # shown right under the answer; the others after the tables


def _columns(names: list[str], metric: str) -> list[str]:
    return [c.format(metric=metric) for c in names]


IMPORTANCE_COLUMNS = ["over", "trials", *PARAMS, "note"]  # a parameter's share as a percentage


def _importance(summary: Summary) -> tuple[str, list[dict]]:
    """The "What mattered" section: the line saying how to read it, and its table (over all trials, then per
    batch size; "–" where a parameter did not vary, or was not read at all)."""
    imp = summary.importance
    intro = (f"Each parameter's share of the importance ({imp.evaluator}, Optuna: how differently its values "
             f"spread among the top {TOP_QUANTILE:.0%} of completed trials by {summary.metric} than among all of "
             f"them). Within a batch size only alpha and warmup vary. A reading needs {MIN_TRIALS} completed "
             f"trials overall, {MIN_TRIALS_PER_BATCH} per batch size.")
    rows = [{"over": "all trials" if r.batch_size is None else f"B={r.batch_size}", "trials": r.trials,
             **{p: f"{v:.0%}" for p, v in (r.params or {}).items() if v is not None}, "note": r.note}
            for r in [imp.overall, *imp.per_batch_size]]
    return intro, rows


def _answer_parts(summary: Summary) -> tuple[str, str]:
    """The answer's value ("≥ 128") and the rest of its line (reading, bound, how sure, cross-checks)."""
    answer = summary.answer
    value = bound_text(answer.batch_size, answer.bound)
    rest = answer.text.split(f"Critical batch: {value}", 1)[-1].strip()
    return value, rest[1:-1] if rest.startswith("(") and rest.endswith(")") else rest


def _readings(summary: Summary) -> list[str]:
    """The headline after the answer, its cross-checks and notes, up to the recommendation: every reading
    in full (the answer box says the rest)."""
    lines = headline(summary)[2 + len(summary.answer.notes):]
    return lines[:next((i for i, line in enumerate(lines) if line.startswith("Recommendation:")), len(lines))]


def render_markdown(summary: Summary, plots: dict[str, Path]) -> str:
    """report.md: the answer on top (a quote block), the metric-vs-batch plot, every reading, the tables
    (key columns, then all), the other plots."""
    metric, answer = summary.metric, summary.answer
    pcols = _columns(PARETO_COLUMNS, metric)
    value, rest = _answer_parts(summary)
    importance_intro, importance_rows = _importance(summary)
    box = [f"**Critical batch: {value}**" + (f" ({rest})" if rest else ""), answer.cross_checks]
    box += [f"Unequal search effort: {note}" for note in answer.notes]
    box += _recommendation_line(summary.recommendation, metric).split("\n")
    parts = [f"# Critical batch report: {summary.name or ''}\n",
             f"Experiment: `{summary.experiment_path}`; metric **{metric}** ({summary.mode}), "
             f"equal-sample budget {summary.budget_samples} samples per trial.\n",
             "\n>\n".join(f"> {line.strip()}" for line in box) + "\n"]
    if summary.recommendation:
        parts.append("Paste into a training config:\n\n```yaml\n" + _snippet(summary) + "```\n")
    if FIRST_PLOT in plots:
        parts.append(f"![{FIRST_PLOT}]({plots[FIRST_PLOT].name})\n")
    parts += ["## Readings\n", "\n".join(f"- {line}" for line in _readings(summary)) + "\n",
              "## Per batch size\n", _table(summary.per_batch, _columns(KEY_COLUMNS, metric)),
              "\nAll columns:\n", _table(summary.per_batch, _columns(PER_BATCH_COLUMNS, metric)),
              "\n## What mattered\n", importance_intro + "\n", _table(importance_rows, IMPORTANCE_COLUMNS),
              "\n## Pareto front (projected time = budget ÷ measured samples/s)\n",
              _table(summary.pareto_projected, pcols),
              "\n## Pareto front (measured wall time)\n", _table(summary.pareto, pcols)]
    parts += [f"\n![{name}]({path.name})\n" for name, path in plots.items() if name != FIRST_PLOT]
    return "\n".join(parts)


STYLE = """body{font-family:system-ui,sans-serif;max-width:980px;margin:1.5em auto;padding:0 1em;color:#222;
line-height:1.4}h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin:1.4em 0 .4em}
.meta{color:#555;font-size:.9em;margin-top:0}
.answer{border:2px solid #2a7a3f;border-radius:8px;background:#f2faf4;padding:.8em 1.2em;margin:1em 0}
.answer.unsure{border-color:#c98a00;background:#fff9ec}.answer .cb{font-size:1.9em;font-weight:600}
.answer .how{font-size:1.02em;margin:.1em 0}.answer .small{font-size:.88em;color:#333;margin:.5em 0 .25em}
.answer .note{font-size:.88em;color:#7a4d00;margin:.25em 0}.answer .cols{display:flex;flex-wrap:wrap;gap:1.2em}
.answer .main{flex:3 1 420px}.answer .rec{flex:1 1 220px;font-size:.9em;border-left:1px solid #ddd;padding-left:1em}
.answer pre{background:#fff;border:1px solid #ddd;padding:.4em .7em;font-size:.82em;margin:.4em 0 0;
display:block;overflow-x:auto}ul.readings{font-size:.86em;padding-left:1.2em}ul.readings li{margin:.15em 0}
table{border-collapse:collapse;font-size:.8em;margin:.3em 0}td,th{border:1px solid #ccc;padding:2px 6px;
text-align:right}th{background:#f1f1f1}.wide{overflow-x:auto;max-width:100%}
details{margin:.5em 0}summary{cursor:pointer;color:#1f4e8c;font-size:.9em}
figure{margin:.5em 0}img{max-width:100%;height:auto}figcaption{font-size:.8em;color:#666}
.lead img{max-width:640px;width:100%}.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));
gap:1em}"""
CAPTIONS = {"metric_vs_batch": "Quality at equal samples vs batch size: the turning point",
            "steps_vs_samples": "Steps vs samples to the target: the tradeoff and the 20% rule",
            "pareto": "Training time vs quality: the Pareto front and the recommendation",
            "lr_vs_batch": "Best peak learning rate vs batch size",
            "noise_scale": "Gradient noise scale during training"}


def _answer_box(summary: Summary) -> str:
    """The page's first block: the critical batch, how sure, cross-checks, notes, the recommended config."""
    import html

    answer, esc = summary.answer, html.escape
    value, rest = _answer_parts(summary)
    sure = answer.resolved is True and answer.bound is None and answer.cross_checks_agree is not False
    rec_lines = _recommendation_line(summary.recommendation, summary.metric).split("\n")
    notes = [f"Unequal search effort: {n}" for n in answer.notes] + [line.strip() for line in rec_lines[1:]]
    snippet = _snippet(summary)
    # One row per part of the answer line; its short cross-check and note marks give way to the full lines.
    rows = [part for part in rest.split("; ") if part not in set(CROSS_CHECKS.values()) | {EFFORT_MARK}]
    return (f'<div class="answer{"" if sure else " unsure"}"><div class="cols"><div class="main">'
            f'<div class="cb">Critical batch: {esc(value)}</div>'
            + "".join(f'<div class="how">{esc(row)}</div>' for row in rows)
            + f'<div class="small">{esc(answer.cross_checks)}</div>'
            + "".join(f'<div class="note">{esc(n)}</div>' for n in notes)
            + f'</div><div class="rec"><b>Recommended config</b><br>{esc(rec_lines[0].split(": ", 1)[-1])}'
            + (f"<pre>{esc(snippet)}</pre>" if snippet else "") + "</div></div></div>")


def render_html(summary: Summary, plots: dict[str, Path]) -> str:
    """report.html, self-contained (images embedded): the answer in a box, the metric-vs-batch plot, every
    reading, the tables fitting the page (key columns; the rest folded under <details>), the other plots."""
    import html

    metric = summary.metric
    pcols = _columns(PARETO_COLUMNS, metric)

    def table(records, columns):
        frame = pd.DataFrame(records)
        if frame.empty:
            return "<p><em>none</em></p>"
        # Cells as the markdown writes them (None, NaN, lists); headers may wrap after an underscore.
        frame = frame[[c for c in columns if c in frame]].map(lambda v: html.escape(_fmt(v)))
        frame.columns = [html.escape(c).replace("_", "_<wbr>") for c in frame.columns]
        return '<div class="wide">' + frame.to_html(index=False, border=0, escape=False) + "</div>"

    def figure(name, path):
        data = base64.b64encode(path.read_bytes()).decode()
        return (f'<figure><img alt="{name}" src="data:image/png;base64,{data}">'
                f"<figcaption>{html.escape(CAPTIONS.get(name, name))}</figcaption></figure>")

    lead = figure(FIRST_PLOT, plots[FIRST_PLOT]) if FIRST_PLOT in plots else ""
    others = "".join(figure(name, path) for name, path in plots.items() if name != FIRST_PLOT)
    readings = "".join(f"<li>{html.escape(line.strip())}</li>" for line in _readings(summary))
    importance_intro, importance_rows = _importance(summary)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Critical batch report: {html.escape(str(summary.name or ''))}</title><style>{STYLE}</style></head><body>
<h1>Critical batch report: {html.escape(str(summary.name or ''))}</h1>
<p class="meta">Experiment <code>{html.escape(str(summary.experiment_path))}</code>; metric <b>{metric}</b>
({summary.mode}), equal-sample budget {summary.budget_samples} samples per trial.</p>
{_answer_box(summary)}
<div class="lead">{lead}</div>
<h2>Readings</h2><ul class="readings">{readings}</ul>
<h2>Per batch size</h2>{table(summary.per_batch, _columns(KEY_COLUMNS, metric))}
<details><summary>All columns</summary>{table(summary.per_batch, _columns(PER_BATCH_COLUMNS, metric))}</details>
<h2>What mattered</h2><p class="meta">{html.escape(importance_intro)}</p>{table(importance_rows, IMPORTANCE_COLUMNS)}
<h2>Pareto front (projected time = budget ÷ measured samples/s)</h2>{table(summary.pareto_projected, pcols)}
<details><summary>Pareto front on measured wall time</summary>{table(summary.pareto, pcols)}</details>
<h2>Other plots</h2><div class="plots">{others}</div>
</body></html>
"""


if __name__ == "__main__":
    from .cli import report_main

    sys.exit(report_main())
