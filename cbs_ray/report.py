"""The report: ``python -m cbs_ray.report EXPERIMENT_DIR [--output DIR] [--tolerance 0.01] [--target VALUE]``.

Reads only what Tune persisted (no cluster needed), so it works on finished, partially finished, still
running and resumed experiments; the search runs it at the end. Writes ``summary.json``, ``trials.csv``,
``history.csv``, four PNG plots, ``report.md`` and a self-contained ``report.html`` (images embedded).
"""

from __future__ import annotations

import base64
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd

from .summary import summarize, write_summary

__all__ = ["Report", "ReportError", "analyze", "META_FILE", "write_meta", "read_meta"]

META_FILE = "cbs_spec.json"


class ReportError(ValueError):
    """Nothing can be reported (no experiment, no trial); the message says why."""


def _filesystem(uri: str):
    import pyarrow.fs

    if "://" in uri:
        return pyarrow.fs.FileSystem.from_uri(uri)
    return pyarrow.fs.LocalFileSystem(), str(Path(uri).expanduser().resolve())


def write_meta(experiment_uri: str, meta: dict) -> None:
    """Store what the report needs (metric, mode, budget, spec) beside Tune's own experiment files."""
    fs, path = _filesystem(experiment_uri)
    fs.create_dir(path, recursive=True)
    with fs.open_output_stream(f"{path}/{META_FILE}") as f:
        f.write(json.dumps(meta, indent=2).encode())


def read_meta(experiment_uri: str) -> dict:
    fs, path = _filesystem(experiment_uri)
    try:
        with fs.open_input_stream(f"{path}/{META_FILE}") as f:
            return json.loads(f.read().decode())
    except (FileNotFoundError, OSError):
        raise ReportError(f"{experiment_uri}: not a cbs-ray experiment directory (no {META_FILE})") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ReportError(f"{experiment_uri}: {META_FILE} is damaged ({str(e).splitlines()[0]})") from None


def load_history(experiment_uri: str) -> pd.DataFrame:
    """Every milestone every trial reported, from Tune's persisted results."""
    from ray.tune import ExperimentAnalysis

    try:
        analysis = ExperimentAnalysis(experiment_uri)
    except Exception as e:
        raise ReportError(f"{experiment_uri}: cannot read the Tune experiment ({str(e).splitlines()[0]})") from None
    failed = {t.trial_id for t in analysis.trials if t.status == "ERROR"}
    frames = [df.assign(trial_id=trial_id, failed=trial_id in failed)
              for trial_id, df in analysis.trial_dataframes.items() if len(df) and "samples_seen" in df]
    if not frames:
        return pd.DataFrame()
    # A trial restarted from a checkpoint older than its last report reports that milestone again.
    return pd.concat(frames, ignore_index=True).drop_duplicates(["trial_id", "samples_seen"], keep="last")


def error_lines(trial) -> list[str]:
    """The non-blank lines of a trial's error file on the experiment's storage (local or a URI, no Ray
    session needed); [] when it has none or it cannot be read."""
    try:
        fs = trial.storage.storage_filesystem
        with fs.open_input_stream(f"{trial.storage.trial_fs_path}/{trial.run_metadata.error_filename}") as f:
            text = f.readall().decode(errors="replace")
    except Exception:  # no error file, no trial directory name, storage gone: it is only a hint
        return []
    return [line.strip() for line in text.splitlines() if line.strip()]


def failed_trials(experiment_uri: str) -> tuple[list, int]:
    """(the trials that failed, how many trials there are). A trial stopped while Tune was retrying it
    is not marked ERROR, but its error file is recorded."""
    from ray.tune import ExperimentAnalysis

    try:
        trials = ExperimentAnalysis(experiment_uri).trials
    except Exception:
        return [], 0
    return [t for t in trials if t.status == "ERROR" or t.run_metadata.error_filename], len(trials)


def _first_error(experiment_uri: str) -> str:
    """'; N of M trials failed, the first with: <its exception line>' when trials failed, else ''. The line is
    the last of the trial's error file, where Ray puts the exception."""
    failed, total = failed_trials(experiment_uri)
    if not failed:
        return ""
    first = next((lines[-1] for lines in map(error_lines, failed) if lines), None)
    return f"; {len(failed)} of {total} trials failed" + (f", the first with: {first}" if first else "")


@dataclass
class Report:
    """The analysed experiment. ``summary`` is what summary.json holds; the properties are views of it."""

    summary: dict
    history: pd.DataFrame
    experiment_path: str

    @property
    def per_batch(self) -> pd.DataFrame:
        return pd.DataFrame(self.summary["per_batch"])

    @property
    def critical_batch(self) -> dict:
        return self.summary["critical_batch"]

    @property
    def tradeoff(self) -> dict:
        return self.summary["critical_batch"]["tradeoff"]

    @property
    def pareto(self) -> pd.DataFrame:
        return pd.DataFrame(self.summary["pareto"])

    @property
    def recommendation(self) -> Optional[dict]:
        return self.summary["recommendation"]

    def write(self, directory: str | os.PathLike) -> Path:
        """Write every output into ``directory``; returns the path of report.html."""
        from .plots import all_plots

        directory = Path(directory)
        write_summary(self.summary, self.history, directory)
        plots = all_plots(self.summary, directory, self.history) if self.summary["trials"] else {}
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
        raise ReportError(f"{experiment}: no trial has reported a result yet" + _first_error(experiment))
    summary = summarize(history, metric=meta["metric"], mode=meta["mode"], budget_samples=meta["budget_samples"],
                        tolerance=meta["tolerance"] if tolerance is None else tolerance, target=target,
                        turning_fit=turning_fit or ((meta.get("spec") or {}).get("search", {})
                                                    .get("turning_point", "monotone")))
    summary["experiment_path"] = experiment
    summary["name"] = meta.get("name")
    summary["spec"] = meta.get("spec")
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


def headline(summary: dict) -> list[str]:
    """The three critical-batch figures and the recommendation, one line each."""
    cb, metric = summary["critical_batch"], summary["metric"]
    tp, tr, oh = cb["turning_point"], cb["tradeoff"], cb["overhead_20pct"]
    fit = tp.get("fit", "raw")
    other = "raw" if fit == "monotone" else "monotone"
    lines = [f"Critical batch, turning point (equal samples, tolerance {cb['tolerance']:.1%}, "
             f"{READINGS[fit]}): "
             + (f"{tp['batch_size']}" if tp["batch_size"] is not None else "not determined")
             + (f" (read off the {READINGS[other]}: {tp[other + '_batch_size']})"
                if tp.get(other + "_batch_size") not in (None, tp["batch_size"]) else "")
             + (f"  [{tp['reason']}]" if tp["reason"] else "")]
    unc = tp.get("uncertainty")
    if unc and unc.get("verdict"):
        v = unc["verdict"]
        lines.append(f"  noise: largest standard error {unc['noise_se_max']:.3g} vs tolerance {v['tolerance_abs']:.3g} "
                     f"({metric}); turning point range at {unc['level']:.0%}: {unc['range'][0]}–{unc['range'][1]}; "
                     f"{v['text']}")
    elif unc:
        lines.append(f"  noise: {unc['reason']}")
    if tr["b_crit"] is not None:
        ci = (f", 95% CI {tr['ci95'][0]:.3g}–" + (f"{tr['ci95'][1]:.3g}" if tr["ci95"][1] is not None else
                                                  "unbounded (some resamples scale perfectly)")
              if tr["ci95"] else ", no CI (too few points)")
        lines.append(f"Critical batch, steps/samples tradeoff (McCandlish 2018): B_crit = {tr['b_crit']:.3g}{ci} "
                     f"(S_min {tr['s_min']:.3g} steps, E_min {tr['e_min']:.3g} samples)")
    else:
        lines.append(f"Critical batch, steps/samples tradeoff (McCandlish 2018): not determined [{tr['reason']}]")
    lines.append("Critical batch, 20% overhead rule (Zhang 2025): "
                 + (f"{oh['batch_size']}" if oh["batch_size"] is not None else "not determined")
                 + (f"  [{oh['reason']}]" if oh["reason"] else ""))
    if summary["target"] is not None:
        lines.append(f"Target for the tradeoff and the 20% rule: {metric} {summary['target']:.4g} "
                     f"({summary['target_source']})")
        if tr.get("left_out"):
            lines.append(f"  {tr['left_out']}")
    noise = summary.get("noise_scale") or {}
    if noise.get("mean") is not None:
        early = f"{noise['early']:.3g}" if noise.get("early") is not None else "–"
        lines.append(f"Gradient noise scale B_simple (McCandlish 2018, a predictor of the critical batch): "
                     f"{early} early in training, {noise['mean']:.3g} averaged over training"
                     + (f" ({noise['reports_left_out']} of {noise['reports']} reports left out: their |G|² or "
                        f"tr Σ estimate was not positive, the noise not yet averaged out)"
                        if noise.get("reports_left_out") else ""))
    else:
        lines.append(f"Gradient noise scale B_simple: {noise.get('note') or 'not measured'}")
    unstable = [r for r in summary["per_batch"] if r.get("diverged")]
    if unstable:
        lines.append("Diverged (non-finite or exploding loss; worst metric recorded): " + "; ".join(
            f"B={r['batch_size']}: {r['diverged']} trial(s), peak lr "
            + ", ".join(f"{lr:.3g}" for lr in r.get("diverged_peak_lrs", [])) for r in unstable))
    rec = summary["recommendation"]
    if rec:
        lines.append(f"Recommendation: batch {rec['batch_size']}, alpha {rec['alpha']:.3g}, peak lr "
                     f"{rec['peak_lr']:.3g}, warmup {rec['warmup_fraction']:.3g} of the steps "
                     f"({rec['warmup_steps']} steps) -> {metric} {rec[metric]:.4g}, "
                     f"{rec['projected_time_s']:.1f} s projected")
    else:
        lines.append("Recommendation: none (no trial reached the full budget)")
    return lines


def _snippet(summary: dict) -> str:
    rec = summary["recommendation"]
    if not rec:
        return ""
    keys = ["batch_size", "alpha", "peak_lr", "warmup_fraction", "warmup_steps", "budget_samples",
            "optimizer_steps"]
    return "\n".join(f"{k}: {rec[k]}" for k in keys) + "\n"


PER_BATCH_COLUMNS = ["batch_size", "trials", "completed", "stopped", "diverged", "diverged_peak_lrs", "failed",
                     "best_{metric}", "fit_{metric}", "dev_{metric}", "runs",
                     "mean_{metric}", "se_{metric}", "alpha",
                     "warmup_fraction", "peak_lr", "steps_to_target", "samples_to_target", "wall_time_s",
                     "samples_per_s", "b_simple_early", "b_simple_mean"]
PARETO_COLUMNS = ["batch_size", "alpha", "warmup_fraction", "peak_lr", "projected_time_s", "wall_time_s", "{metric}"]


def render_markdown(summary: dict, plots: dict[str, Path]) -> str:
    metric = summary["metric"]
    cols = [c.format(metric=metric) for c in PER_BATCH_COLUMNS]
    pcols = [c.format(metric=metric) for c in PARETO_COLUMNS]
    parts = [f"# Critical batch report: {summary.get('name') or ''}\n",
             f"Experiment: `{summary.get('experiment_path')}`; metric **{metric}** ({summary['mode']}), "
             f"equal-sample budget {summary['budget_samples']} samples per trial.\n",
             "\n".join(f"- {line}" for line in headline(summary)) + "\n"]
    if summary["recommendation"]:
        parts.append("Paste into a training config:\n\n```yaml\n" + _snippet(summary) + "```\n")
    parts += ["## Per batch size\n", _table(summary["per_batch"], cols),
              "\n## Pareto front (projected time = budget ÷ measured samples/s)\n",
              _table(summary["pareto_projected"], pcols),
              "\n## Pareto front (measured wall time)\n", _table(summary["pareto"], pcols)]
    for name, path in plots.items():
        parts.append(f"\n![{name}]({path.name})\n")
    return "\n".join(parts)


def render_html(summary: dict, plots: dict[str, Path]) -> str:
    import html

    metric = summary["metric"]
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
<h1>Critical batch report: {html.escape(str(summary.get('name') or ''))}</h1>
<p>Experiment <code>{html.escape(str(summary.get('experiment_path')))}</code>; metric <b>{metric}</b>
({summary['mode']}), equal-sample budget {summary['budget_samples']} samples per trial.</p>
<ul>{items}</ul>
{f'<p>Paste into a training config:</p><pre>{html.escape(snippet)}</pre>' if snippet else ''}
<h2>Per batch size</h2>{table(summary['per_batch'], cols)}
<h2>Pareto front (projected time)</h2>{table(summary['pareto_projected'], pcols)}
<h2>Pareto front (measured wall time)</h2>{table(summary['pareto'], pcols)}
<h2>Plots</h2>{images}
</body></html>
"""


if __name__ == "__main__":
    from .cli import report_main

    sys.exit(report_main())
