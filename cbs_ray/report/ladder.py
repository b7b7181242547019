"""The ladder's report: ``summary.json``, ``history.csv``, the log–log plot ``ladder.png`` (B_crit at each rung
with its interval, the fitted power law, its extrapolation to the full budget with the 90 % band, the
measurement there when validated, and for reference what closed-form laws give), ``report.md`` and a
self-contained ``report.html``, from an ``analysis.ladder_summary.LadderSummary``. Needs no cluster.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from cbs_ray.analysis.ladder_summary import LadderSummary, headline
from cbs_ray.records.columns import Column
from cbs_ray.report.folder import report_folder
from cbs_ray.report.page import STYLE
from cbs_ray.report.plots import _save  # (sets matplotlib's Agg backend)

__all__ = ["PLOT", "ladder_plot", "write_ladder_report"]

PLOT = "ladder"


def ladder_plot(summary: LadderSummary, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    lad, pred = summary.ladder, summary.prediction
    finite = [r for r in lad["rungs"] if r["b_crit"]]
    used = set(lad["rungs_used"])
    for r in finite:
        ci = r["b_crit_ci"]
        err = [[r["b_crit"] - ci[0]], [ci[1] - r["b_crit"]]] if ci and ci[1] is not None and ci[1] < 1e12 else None
        ax.errorbar([r[Column.samples_seen]], [r["b_crit"]], yerr=err, fmt="o", capsize=3,
                    color="tab:blue" if r[Column.samples_seen] in used else "0.6")
    budget = pred["budget_samples"]
    if lad["exponent"] is not None and finite:
        xs = [min(r[Column.samples_seen] for r in finite), budget]
        ax.plot(xs, [lad["constant"] * x ** lad["exponent"] for x in xs], "--", color="tab:blue",
                label=f"fit: B_crit ∝ D^{lad['exponent']:.2f}")
    if pred["b_crit"] is not None:
        lo, hi = pred["interval_90"]
        ax.errorbar([budget], [pred["b_crit"]], yerr=[[pred["b_crit"] - lo], [hi - pred["b_crit"]]], fmt="D",
                    color="tab:green", capsize=4, label="prediction (90 %)")
    v = summary.prediction_validation
    if v and v.get("measured_b_crit"):
        ax.plot([budget], [v["measured_b_crit"]], "*", ms=12, color="tab:red", label="measured at D")
    for name, law in summary.reference_laws.items():
        if isinstance(law, dict):
            ax.plot([budget], [law["samples"]], "x", color="0.5")
            ax.annotate(name, (budget, law["samples"]), xytext=(4, 0), textcoords="offset points", fontsize=7,
                        color="0.4")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("samples seen (D)")
    ax.set_ylabel("B_crit (samples)")
    ax.set_title("The ladder: B_crit against data, extrapolated to the budget")
    ax.legend(fontsize=7, loc="best")
    return _save(fig, path)


def _markdown(summary: LadderSummary) -> str:
    lines = headline(summary)
    rows = ["| samples seen | B_crit | 95 % CI | 20 % rule | target loss |", "|---|---|---|---|---|"]
    for r in summary.ladder["rungs"]:
        ci = r["b_crit_ci"]
        rows.append(f"| {r[Column.samples_seen]:g} | {r['b_crit']:.3g} | " if r["b_crit"] else f"| {r[Column.samples_seen]:g} | – | ")
        rows[-1] += (f"[{ci[0]:.3g}, {ci[1]:.3g}] | " if ci else "– | ") + f"{r['overhead_20pct']} | {r['target_loss']:.4g} |"
    laws = "\n".join(f"- {k}: {v['samples']:.3g} samples ({v['tokens']:.3g} tokens)" for k, v in
                     summary.reference_laws.items() if isinstance(v, dict))
    return "\n".join([f"# Ladder: {summary.name or ''}\n", "\n".join(f"> {x}" for x in lines) + "\n",
                      f"![{PLOT}]({PLOT}.png)\n", "## Rungs\n", "\n".join(rows) + "\n",
                      "## For reference: closed-form laws\n",
                      (laws + f"\n\n{summary.reference_laws.get('note', '')}\n") if laws else "None (no tokens per sample).\n"])


def write_ladder_report(summary: LadderSummary, history: pd.DataFrame, directory) -> Path:
    """Write the report's files into ``directory``; returns report.html's path."""
    with report_folder(directory, summary.experiment_path) as directory:
        (directory / "summary.json").write_text(summary.to_json())
        history.to_csv(directory / "history.csv", index=False)
        plot = ladder_plot(summary, directory / f"{PLOT}.png")
        md = _markdown(summary)
        (directory / "report.md").write_text(md)
        data = base64.b64encode(plot.read_bytes()).decode()
        body = "".join(f"<p>{html.escape(x)}</p>" for x in headline(summary))
        page = directory / "report.html"
        page.write_text(f"<!doctype html><html><head><meta charset=\"utf-8\"><title>Ladder</title><style>{STYLE}"
                        f"</style></head><body><h1>Ladder: {html.escape(str(summary.name or ''))}</h1>{body}"
                        f"<figure><img alt=\"{PLOT}\" src=\"data:image/png;base64,{data}\"></figure>"
                        f"<pre>{html.escape(md)}</pre></body></html>\n")
    return page
