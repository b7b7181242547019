"""The from-scratch report's figures (PNG): each function takes the typed ``Summary`` and a path."""

from __future__ import annotations

from pathlib import Path

import matplotlib.ticker
import numpy as np

from cbs_ray.analysis.bounds import bound_text
from cbs_ray.maths.critical_batch import LOWER, UPPER
from cbs_ray.methods.scratch.summary import Summary
from cbs_ray.records.columns import Column
from cbs_ray.report.plots import plt, save_figure  # (sets matplotlib's Agg backend)

__all__ = ["metric_vs_batch", "steps_vs_samples", "pareto_plot", "lr_vs_batch", "noise_scale_plot", "all_plots"]


def _batch_axis(ax) -> None:
    """Batch sizes on a log-2 axis, labelled 16, 32, … rather than 2⁴, 2⁵."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}"))


def metric_vs_batch(summary: Summary, path: Path) -> Path:
    metric = summary.metric
    rows = [r for r in summary.per_batch if r.get(f"best_{metric}") is not None]
    fig, ax = plt.subplots(figsize=(6, 4))
    trials = [t for t in summary.trials if t[Column.status] == "completed" and t.get(metric) is not None]
    ax.scatter([t[Column.batch_size] for t in trials], [t[metric] for t in trials], s=14, color="0.7",
               label="completed trials")
    means = [r.get(f"mean_{metric}", r[f"best_{metric}"]) for r in rows]
    errors = [1.96 * (r.get(f"se_{metric}") or 0.0) for r in rows]
    ax.errorbar([r[Column.batch_size] for r in rows], means, yerr=errors, fmt="o-", capsize=3,
                label="best config per batch (mean ± 1.96 SE)")
    fitted = [r for r in rows if r.get(f"fit_{metric}") is not None]
    if fitted and summary.critical_batch.turning_point.fit == "monotone":
        ax.plot([r[Column.batch_size] for r in fitted], [r[f"fit_{metric}"] for r in fitted],
                color="tab:orange", ls=":", label="monotone fit (the turning point's)")
    _batch_axis(ax)
    critical = summary.critical_batch.batch_size
    if critical is not None:
        ax.axvline(critical, color="tab:red", ls="--", label=_turning_label(summary))
        _bound_arrow(ax, summary)
    ax.set_xlabel("batch size")
    ax.set_ylabel(f"{metric} at {summary.budget_samples} samples")
    ax.set_title("Quality at equal samples vs batch size")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def _turning_label(summary: Summary) -> str:
    """ "turning point B=64", or as a bound, "turning point B ≥ 128"."""
    tp = summary.critical_batch.turning_point
    return f"turning point B {bound_text(tp.batch_size, tp.bound)}" if tp.bound else f"turning point B={tp.batch_size}"


def _bound_arrow(ax, summary: Summary) -> None:
    """A turning point that is a bound: an arrow from it toward where the critical batch lies, annotated
    "≥ 128 (drop not reached)" or "≤ 8 (drop right after it)", the axis widened to show the direction."""
    tp = summary.critical_batch.turning_point
    critical, bound = tp.batch_size, tp.bound
    if bound not in (LOWER, UPPER) or critical is None:
        return
    why = ("drop not reached" if not tp.reason else "next batch not measured") if bound == LOWER \
        else "drop right after it"
    step = 2.0 if bound == LOWER else 0.5
    left, right = ax.get_xlim()
    ax.set_xlim(min(left, critical * step * 0.8), max(right, critical * step * 1.25))
    where = ("data", "axes fraction")
    ax.annotate("", xy=(critical * step, 0.9), xytext=(critical, 0.9), xycoords=where, textcoords=where,
                arrowprops=dict(arrowstyle="->", color="tab:red", lw=1.5))
    ax.annotate(f"{bound_text(critical, bound)} ({why})", xy=(critical, 0.93), xycoords=where, color="tab:red",
                fontsize=8, ha="left" if bound == LOWER else "right", xytext=(3 if bound == LOWER else -3, 0),
                textcoords="offset points")


def steps_vs_samples(summary: Summary, path: Path) -> Path:
    fit = summary.critical_batch.tradeoff
    rows = [r for r in summary.per_batch if r.get(Column.steps_to_target) is not None]
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        # Reached by the first report: an upper bound, left out of the fit (hollow, "≤").
        bound = bool(r.get(Column.target_at_first_report))
        ax.plot(r[Column.samples_to_target], r[Column.steps_to_target], "o", color="tab:blue",
                markerfacecolor="none" if bound else "tab:blue")
        ax.annotate(f"B={r[Column.batch_size]}" + (" ≤ (left out)" if bound else ""),
                    (r[Column.samples_to_target], r[Column.steps_to_target]), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    if fit.b_crit is not None and fit.s_min is not None and fit.e_min is not None:
        s_min, e_min = fit.s_min, fit.e_min
        b = np.logspace(np.log2(min(r[Column.batch_size] for r in rows)) - 1,
                        np.log2(max(r[Column.batch_size] for r in rows)) + 2, 200, base=2)
        steps = s_min + e_min / b
        ax.plot(steps * b, steps, "-", color="tab:orange",
                label=f"S = {s_min:.3g} + {e_min:.3g}/B,  B_crit = {fit.b_crit:.3g}")
        ax.plot(2 * e_min, 2 * s_min, "*", ms=12, color="tab:red", label="B_crit (2·E_min, 2·S_min)")
        ax.legend(fontsize=8)
    elif fit.bound:  # no B_crit: it lies past the measured range
        ax.text(0.02, 0.02, f"B_crit {bound_text(fit.b_crit_bound, fit.bound, '{:.3g}')} (past the batch sizes "
                "measured: no fit shown)", transform=ax.transAxes, fontsize=8, color="tab:red")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"samples to reach {summary.metric} {summary.target:.4g}" if summary.target is not None
                  else "samples to target")
    ax.set_ylabel("optimizer steps to target")
    ax.set_title("Steps/samples tradeoff (McCandlish et al. 2018)")
    return save_figure(fig, path)


def pareto_plot(summary: Summary, path: Path) -> Path:
    metric = summary.metric
    trials = [t for t in summary.trials if t[Column.status] == "completed" and t.get(metric) is not None]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter([summary.budget_samples / t[Column.samples_per_s] for t in trials], [t[metric] for t in trials],
               s=14, color="0.6", label="completed trials (projected time)")
    front = summary.pareto_projected
    ax.plot([p[Column.projected_time_s] for p in front], [p[metric] for p in front], "o-", color="tab:green",
            label="Pareto front")
    for p in front:
        ax.annotate(f"B={p[Column.batch_size]}", (p[Column.projected_time_s], p[metric]), fontsize=7,
                    xytext=(3, -9), textcoords="offset points")
    rec = summary.recommendation
    if rec:
        ax.plot(rec.projected_time_s, rec.metric_value, "*", ms=14, color="tab:red", label="recommended")
    ax.set_xlabel("projected training time (s) = budget ÷ measured samples/s")
    ax.set_ylabel(metric)
    ax.set_title("Training time vs quality")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def lr_vs_batch(summary: Summary, path: Path) -> Path:
    rows = [r for r in summary.per_batch if r.get(Column.peak_lr) is not None]
    fig, ax = plt.subplots(figsize=(6, 4))
    if rows:
        b = np.array([r[Column.batch_size] for r in rows], dtype=float)
        lr = np.array([r[Column.peak_lr] for r in rows])
        ax.plot(b, lr, "o-", label="best trial's peak LR")
        b0, lr0 = b[0], lr[0]
        grid = np.logspace(np.log2(b.min()), np.log2(b.max()), 50, base=2)
        ax.plot(grid, lr0 * grid / b0, "--", color="0.5", label="linear rule (alpha=1)")
        ax.plot(grid, lr0 * np.sqrt(grid / b0), ":", color="0.3", label="sqrt rule (alpha=0.5)")
        ax.legend(fontsize=8)
    _batch_axis(ax)
    ax.set_yscale("log")
    ax.set_xlabel("batch size")
    ax.set_ylabel("peak learning rate")
    ax.set_title("Best learning rate vs batch size")
    return save_figure(fig, path)


def noise_scale_plot(summary: Summary, history, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    if history is not None and Column.b_simple in history and history[Column.b_simple].notna().any():
        measured = history.dropna(subset=[Column.b_simple])
        for (batch, trial_id), h in measured.groupby([Column.batch_size, Column.trial_id]):
            h = h.sort_values(Column.samples_seen)
            ax.plot(h[Column.samples_seen], h[Column.b_simple], ".-", lw=0.8, label=f"B={batch}")
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles))
        ax.legend(unique.values(), unique.keys(), fontsize=7)
        ax.set_yscale("log")
    critical = summary.critical_batch.batch_size
    if critical is not None:
        ax.axhline(critical, color="tab:red", ls="--", lw=1)
        ax.annotate(_turning_label(summary), (0.02, critical), xycoords=("axes fraction", "data"),
                    fontsize=7, color="tab:red")
    ax.set_xlabel("samples seen")
    ax.set_ylabel("B_simple = tr(Σ) / |G|²")
    ax.set_title("Gradient noise scale during training")
    return save_figure(fig, path)


def all_plots(summary: Summary, directory: Path, history=None) -> dict[str, Path]:
    """Write every figure into ``directory``; returns {name: path}."""
    directory.mkdir(parents=True, exist_ok=True)
    plots = {name: fn(summary, directory / f"{name}.png") for name, fn in (
        ("metric_vs_batch", metric_vs_batch), ("steps_vs_samples", steps_vs_samples),
        ("pareto", pareto_plot), ("lr_vs_batch", lr_vs_batch))}
    plots["noise_scale"] = noise_scale_plot(summary, history, directory / "noise_scale.png")
    return plots
