"""Branch mode's report: ``summary.json``, ``history.csv``, the plot ``cbs_over_training.png``, ``report.md``
and a self-contained ``report.html`` (the plot embedded), from a
``methods.branch.reading.BranchSummary`` and the history.

What it shows: CBS(t) per checkpoint (a table and the plot, the trunk's B_simple over the same axis), the
shape of CBS(t) in one sentence (a decrease said, never smoothed), the recommended batch-size schedule and the
same schedule for three trainers (OLMo-core's ``BatchSizeSchedulerCallback``, Levanter's
``train_batch_size`` schedule, Megatron-LM's ``--step-batch-size-schedule``), the schedule's validation against
its fixed-batch controls (a table and the frontier plot ``schedule_frontier.png``), the deviations from the
paper, and the cost of the whole branch search. Like ``report``, it needs no cluster.
"""

from __future__ import annotations

import base64
import dataclasses
import html
from pathlib import Path
from typing import Optional

import matplotlib
import matplotlib.pyplot as plt  # noqa: E402  (after the backend)
import matplotlib.ticker
import pandas as pd

from cbs_ray.analysis.bounds import bound_text
from cbs_ray.maths.critical_batch import LOWER, UPPER
from cbs_ray.methods.branch.control_configurations import configurations_line
from cbs_ray.methods.branch.reading import BranchSummary, summarize_branches
from cbs_ray.methods.branch.reading_points import CbsPoint
from cbs_ray.methods.branch.recorded import RecordedBranchSettings
from cbs_ray.methods.branch.same_spec import branch_history
from cbs_ray.methods.branch.summary import LossReading
from cbs_ray.methods.branch.trainer_snippets import trainer_snippets
from cbs_ray.records.columns import Column
from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.names import TRUNK_DONE
from cbs_ray.records.storage import ReportError, failed_trials, first_error
from cbs_ray.report.folder import report_folder
from cbs_ray.report.page import STYLE, html_answer_box, html_table, markdown_table
from cbs_ray.report.plots import save_figure  # (sets matplotlib's Agg backend)
from cbs_ray.report.reading import MethodAnswer, Reading, next_search_of, report_and_summary_line
from cbs_ray.spec.load import spec_from_dict

__all__ = ["FRONTIER_PLOT", "PLOT", "cbs_over_training_plot", "frontier_plot", "headline", "loss_rows", "paired_rows",
           "render_html", "render_markdown", "write_branch_report", "BranchReport", "REPORT", "TrunkFailed",
           "branch_answer", "failed_roles", "trunk_lost"]

PLOT = "cbs_over_training"
FRONTIER_PLOT = "schedule_frontier"


def _tol(value: Optional[float], summary: BranchSummary) -> str:
    """A loss difference in the tolerance's units: a percentage when ε is relative, nats otherwise."""
    if value is None:
        return "not measured"
    return f"{value:+.2%}" if summary.tolerance_relative else f"{value:+.4f}"


def _tolerance_text(summary: BranchSummary) -> str:
    return (f"{summary.tolerance:.2%} relative" if summary.tolerance_relative else
            f"ε = {summary.tolerance:g} nats absolute")


def _interval_text(p: CbsPoint) -> str:
    if p.interval is None:
        return "–"
    low, high = p.interval
    if p.bound == UPPER:
        return f"[≤ {low}, {high}]" if high else f"≤ {low}"
    return f"[{low}, {high if high else '∞)'}" + ("]" if high else "")


def _x(samples: int, summary: BranchSummary) -> int:
    """Samples on the report's axis: tokens when the budget is in tokens."""
    return samples * summary.tokens_per_sample if summary.tokens_per_sample else samples


def _axis_name(summary: BranchSummary) -> str:
    return "tokens" if summary.tokens_per_sample else "samples"


# ---- the terminal lines ---------------------------------------------------------------------------------

def _point_line(p: CbsPoint, summary: BranchSummary) -> str:
    at = f"{_x(p.samples_seen, summary)} {_axis_name(summary)}"
    if p.trunk_loss is None:
        return f"  at {at}: not determined ({p.note})"
    parts = []
    for o in p.branches:
        if o.status == "trunk":
            continue
        if o.excess is None:
            parts.append(f"B={o.batch_size} {o.status}")
        else:
            se = f" ± {o.standard_error:.3g}" if o.standard_error is not None else ""
            parts.append(f"B={o.batch_size} {_tol(o.excess, summary)}{se} vs B={o.reference_batch}"
                         + ("" if o.recovers else " (fails)"))
    extra = []
    if p.close_call and p.margin is not None:
        extra.append(f"close call: a deciding branch is {abs(p.margin):.3g} from the line")
    if p.note:
        extra.append(p.note)
    cbs = f"CBS {bound_text(p.batch_size, p.bound)}, interval {_interval_text(p)}" if p.resolvable else \
        f"not resolvable (CBS read {bound_text(p.batch_size, p.bound)})"
    return (f"  at {at}: {cbs} (trunk loss {p.trunk_loss:.4g} at +{_x(p.window_samples, summary)}; "
            + ", ".join(parts) + ")" + (f"  [{'; '.join(extra)}]" if extra else ""))


def _schedule_text(summary: BranchSummary) -> str:
    unit = _axis_name(summary)
    pairs = summary.batch_size_schedule_tokens or summary.batch_size_schedule
    text = ", then ".join(f"{b} from {s}" for s, b in pairs)
    if summary.tokens_per_sample:
        text += f" {unit} (batch in tokens; in sequences: " + ", ".join(
            str(b) for _, b in summary.batch_size_schedule) + ")"
    else:
        text += f" {unit}"
    return text


def _cost_line(summary: BranchSummary) -> str:
    roles = ", ".join(f"{role} {n}" for role, n in summary.samples_by_role.items())
    line = f"Cost: {summary.total_samples} samples trained ({roles})"
    if summary.cost_ratio is not None:
        line += (f"; trunk + branches are {summary.cost_ratio:.2f} of a from-scratch search over the same batches "
                 f"and alphas ({summary.scratch_samples} samples; target ≤ 0.5)")
    return line


def _b_simple_line(summary: BranchSummary) -> str:
    pairs = summary.b_simple_over_training
    if not pairs:
        return "Gradient noise scale B_simple on the trunk: not measured"
    unit = _axis_name(summary)
    return (f"Gradient noise scale B_simple on the trunk (McCandlish 2018): {pairs[0][1]:.3g} at "
            f"{_x(int(pairs[0][0]), summary)} {unit}, {pairs[-1][1]:.3g} at {_x(int(pairs[-1][0]), summary)} {unit} "
            f"({len(pairs)} reports)")


def _decision_lines(summary: BranchSummary) -> list[str]:
    """The decision's line (``analysis.decision``), the first printed, where the summary has one."""
    return [summary.decision.text] if summary.decision is not None else []


def headline(summary: BranchSummary) -> list[str]:
    """The lines the search prints at the end: CBS(t) per checkpoint, the shape, the schedule, its
    validation, the noise scale beside it, the cost."""
    loss = "eval_loss" if summary.loss == "eval" else "the EMA-smoothed training loss"
    lines = _decision_lines(summary)
    lines.append(f"Critical batch over training (branches from the trunk at B={summary.trunk.batch_size}, window "
                 f"{_x(summary.window_samples, summary)} {_axis_name(summary)}, {_tolerance_text(summary)} on {loss} "
                 f"against every smaller batch; Merrill et al. 2025):")
    lines += [_point_line(p, summary) for p in summary.critical_batch_over_training] or ["  no branch reported"]
    lines.append(f"Shape: {summary.trend.text}")
    alpha = summary.schedule_alpha
    lr = "" if alpha is None else f" (LR × {2 ** alpha:.3g} per doubling: alpha {alpha:g})"
    lines.append(f"Recommended batch-size schedule: {_schedule_text(summary)}{lr}")
    sv = summary.schedule_validation
    lines.append(f"Schedule validation: {sv.text}" if sv else
                 "Schedule validation: not run (--validate-schedule trains the schedule against fixed batches)")
    if summary.control_configurations:
        lines.append(f"Fixed-batch controls' configurations (branch.controls_from: {summary.controls_from}): "
                     f"{configurations_line(summary.control_configurations)}")
    lines += [f"Deviation from the paper: {d}" for d in summary.deviations]
    lines.append(_b_simple_line(summary))
    lines.append(_cost_line(summary))
    return lines


# ---- the plot ------------------------------------------------------------------------------------------

def cbs_over_training_plot(summary: BranchSummary, path: Path) -> Path:
    """CBS(t) against samples (tokens) seen on a log-2 batch axis: a measured point filled, a bound hollow
    with an arrow toward where CBS lies; the trunk's B_simple over the same axis; the schedule as a step line."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    unit = _axis_name(summary)
    budget_x = _x(summary.budget_samples, summary)
    schedule = summary.batch_size_schedule
    xs = [_x(s, summary) for s, _ in schedule] + [budget_x]
    ax.step(xs, [b for _, b in schedule] + [schedule[-1][1]], where="post", color="tab:green", lw=1.5,
            label="recommended schedule")
    pts = [p for p in summary.critical_batch_over_training if p.trunk_loss is not None and p.resolvable]
    exact = [p for p in pts if p.bound is None]
    for p in exact:  # the interval [k*·B, next·B] as a bar
        if p.interval and p.interval[1]:
            ax.plot([_x(p.samples_seen, summary)] * 2, p.interval, "-", color="tab:blue", lw=3, alpha=0.3)
    ax.plot([_x(p.samples_seen, summary) for p in exact], [p.batch_size for p in exact], "o", color="tab:blue",
            label="CBS(t)")
    for bound, arrow, label in ((LOWER, 2.0, "CBS(t) ≥ (largest branch recovered)"),
                                (UPPER, 0.5, "CBS(t) ≤ (smallest branch failed)")):
        edge = [p for p in pts if p.bound == bound]
        if not edge:
            continue
        ax.plot([_x(p.samples_seen, summary) for p in edge], [p.batch_size for p in edge], "o", mfc="none",
                color="tab:blue", label=label)
        for p in edge:
            ax.annotate("", xy=(_x(p.samples_seen, summary), p.batch_size * arrow ** 0.6),
                        xytext=(_x(p.samples_seen, summary), p.batch_size),
                        arrowprops=dict(arrowstyle="->", color="tab:blue", lw=1.2))
    if len(pts) > 1:
        ax.plot([_x(p.samples_seen, summary) for p in pts], [p.batch_size for p in pts], ":", color="tab:blue", lw=0.8)
    for d in summary.trend.decreases:  # said on the plot too, never smoothed away
        ax.annotate("decrease" + (" (within noise)" if d.within_noise else ""), (_x(d.to_samples, summary), d.to_batch),
                    xytext=(4, -10), textcoords="offset points", fontsize=7,
                    color="0.4" if d.within_noise else "tab:red")
    unresolved = [p for p in summary.critical_batch_over_training if p.trunk_loss is not None and not p.resolvable]
    if unresolved:  # shown where they are, greyed: the table says why; the trend and the schedule skip them
        ax.plot([_x(p.samples_seen, summary) for p in unresolved], [p.batch_size for p in unresolved], "x",
                color="0.55", label="not resolvable (the trunk moved < 2ε)")
    noise = summary.b_simple_over_training
    if noise:
        ax.plot([_x(int(s), summary) for s, _ in noise], [b for _, b in noise], ".-", color="tab:orange", lw=0.8,
                ms=3, label="trunk B_simple")
    ax.set_yscale("log", base=2)
    # Room for the bounds' arrows (an annotation outside the axes is not drawn).
    ys = [b for _, b in schedule] + [p.batch_size for p in pts + unresolved] + [b for _, b in noise]
    ys += [p.batch_size * {LOWER: 2.0, UPPER: 0.5}[p.bound] ** 0.6 for p in pts if p.bound]
    ax.set_ylim(min(ys) / 1.25, max(ys) * 1.25)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}"))
    ax.set_xlim(0, budget_x * 1.02)
    ax.set_xlabel(f"{unit} seen")
    ax.set_ylabel("batch size" + (" (sequences)" if summary.tokens_per_sample else ""))
    ax.set_title("Critical batch over training (branches from the trunk)")
    ax.legend(fontsize=7, loc="best")
    return save_figure(fig, path)


# ---- tables and pages ------------------------------------------------------------------------------------

def _point_rows(summary: BranchSummary) -> tuple[list[dict], list[str]]:
    unit = _axis_name(summary)
    rows = []
    for p in summary.critical_batch_over_training:
        row = {f"{unit}_seen": _x(p.samples_seen, summary), "cbs": bound_text(p.batch_size, p.bound)
               if p.trunk_loss is not None else "–", "interval": _interval_text(p),
               "resolvable": "yes" if p.resolvable else "no", "trunk_loss": p.trunk_loss,
               "trunk_improvement": p.trunk_improvement}
        for o in p.branches:
            if o.status == "trunk":
                continue
            se = f" ± {o.standard_error:.2g}" if o.standard_error is not None else ""
            row[f"B={o.batch_size}"] = (f"{o.loss:.4g}{se} ({_tol(o.excess, summary)} vs {o.reference_batch})"
                                        if o.loss is not None else o.status)
        row["margin"] = f"{p.margin:.3g}" if p.margin is not None else None
        row["close_call"] = "yes" if p.close_call else ""
        row["note"] = p.note
        rows.append(row)
    batches = [f"B={b}" for b in summary.branch_batches]
    return rows, [f"{unit}_seen", "cbs", "interval", "resolvable", "trunk_loss", "trunk_improvement", *batches,
                  "margin", "close_call", "note"]


BRANCH_COLUMNS = [Column.start_samples, Column.batch_size, Column.alpha, Column.seed_offset, Column.peak_lr,
                  Column.eval_loss, Column.diverged, Column.samples_seen, Column.steps]  # summary.branches' records
VALIDATION_COLUMNS = ["name", Column.batch_size, Column.steps, "seeds", "final_loss_mean", "final_loss_ci95",
                      Column.diverged]  # the Control records' fields


def _definition(summary: BranchSummary) -> str:
    noise = ("two standard errors of the difference (branch.repeats)" if summary.repeats > 1 else
             "half of ε (one run per batch: no repeat to measure the noise with)")
    return (f"CBS(t) is k*·B, the largest branch batch whose loss at t + {_x(summary.window_samples, summary)} "
            f"{_axis_name(summary)}, started from the trunk's checkpoint at t, is within {_tolerance_text(summary)} "
            f"of every smaller batch's, the trunk's included (Merrill et al. 2025, arXiv 2505.23971, §3.1); it lies "
            f"in the interval [k*·B, next batch]. A point where the trunk improved by less than 2ε over the window "
            f"is not resolvable. A comparison within {noise} of the line is a close call.")


def frontier_plot(summary: BranchSummary, path: Path) -> Optional[Path]:
    """Final eval loss against optimizer steps: the fixed batches (95 % CIs as bars), the frontier interpolated
    in log-steps with its 95 % band, and the schedule; None without a validation."""
    sv = summary.schedule_validation
    if sv is None or not any(c.final_loss_mean is not None for c in sv.controls):
        return None
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    band = sv.frontier_band
    if band:
        steps = [p[Column.steps] for p in band]
        ax.plot(steps, [p["loss"] for p in band], "-", color="tab:blue", lw=1.0,
                label="fixed-batch frontier (interpolated in log-steps)")
        if all(p["low"] is not None for p in band):
            ax.fill_between(steps, [p["low"] for p in band], [p["high"] for p in band], color="tab:blue", alpha=0.15,
                            lw=0, label="its 95 % band")
    fixed = [c for c in sv.controls if c.name != "schedule" and c.final_loss_mean is not None]
    for c in [*fixed, *(c for c in sv.controls if c.name == "schedule" and c.final_loss_mean is not None)]:
        if c.steps is None or c.final_loss_mean is None:  # a control with a mean has its steps
            continue
        err = None if not c.final_loss_ci95 else [[c.final_loss_mean - c.final_loss_ci95[0]],
                                                  [c.final_loss_ci95[1] - c.final_loss_mean]]
        style = dict(fmt="s", color="tab:green", ms=7) if c.name == "schedule" else dict(fmt="o", color="tab:blue")
        ax.errorbar([c.steps], [c.final_loss_mean], yerr=err, capsize=3, **style)
        ax.annotate(c.name if c.batch_size is None else f"B={c.batch_size}", (c.steps, c.final_loss_mean),
                    xytext=(5, 4), textcoords="offset points", fontsize=8)
    below = sv.below_frontier
    if below.holds is not None:
        ax.set_title(f"The schedule {'below' if below.holds else 'not below'} the fixed-batch frontier "
                     f"(paired: {below.difference_mean:+.4f}, bound {below.upper_95:+.4f})", fontsize=9)
    else:
        ax.set_title("The schedule against the fixed-batch frontier", fontsize=9)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("optimizer steps over the budget")
    ax.set_ylabel("final eval loss (mean, 95 % CI)")
    ax.legend(fontsize=7, loc="best")
    return save_figure(fig, path)


PAIRED_COLUMNS = ["seed", "schedule", "small", "schedule_minus_small", "frontier_at_schedule_steps",
                  "schedule_minus_frontier"]


def paired_rows(summary: BranchSummary) -> list[dict]:
    """One row per validation seed: the schedule's and the small batch's final loss, the frontier's at the
    schedule's steps (from that seed's fixed batches), and the paired differences the verdicts read."""
    sv = summary.schedule_validation
    schedule, small = (sv.control("schedule"), sv.control("small")) if sv else (None, None)
    if sv is None or schedule is None:
        return []
    ni = sv.non_inferiority.differences if sv.non_inferiority else {}
    below = sv.below_frontier.differences
    rows = []
    for seed, loss in sorted(schedule.final_losses.items()):
        d_small, d_frontier = ni.get(seed), below.get(seed)
        rows.append({"seed": seed, "schedule": loss, "small": (small.final_losses.get(seed) if small else None),
                     "schedule_minus_small": None if d_small is None else f"{d_small:+.4f}",
                     "frontier_at_schedule_steps": None if d_frontier is None else loss - d_frontier,
                     "schedule_minus_frontier": None if d_frontier is None else f"{d_frontier:+.4f}"})
    return rows


LOSS_COLUMNS = [Column.samples_seen, "eval", "train_ema", "agree"]


def loss_rows(summary: BranchSummary) -> list[dict]:
    """CBS(t) on the eval loss beside CBS(t) on the EMA-smoothed training loss, per checkpoint."""
    def cell(r: LossReading) -> str:
        return bound_text(r.batch_size, r.bound) + ("" if r.resolvable else " (not resolvable)")

    return [{Column.samples_seen: c.samples_seen, "eval": cell(c.eval), "train_ema": cell(c.train_ema),
             "agree": "yes" if c.agree else "no"} for c in summary.loss_comparison or []]


def _validation_records(summary: BranchSummary) -> list[dict]:
    sv = summary.schedule_validation
    return [{**c.to_dict(), "final_loss_ci95": (f"[{c.final_loss_ci95[0]:.4g}, {c.final_loss_ci95[1]:.4g}]"
                                                 if c.final_loss_ci95 else None)} for c in sv.controls] if sv else []


def render_markdown(summary: BranchSummary, plot: Optional[Path]) -> str:
    rows, columns = _point_rows(summary)
    lines = headline(summary)[len(_decision_lines(summary)):]
    parts = [*(f"{line}\n" for line in _decision_lines(summary)),
             f"# Critical batch over training: {summary.name or ''}\n",
             (f"Experiment: `{summary.experiment_path}`; " if summary.experiment_path else "")
             + f"branch mode, budget {summary.budget_samples} samples"
             + (f" ({summary.budget_tokens} tokens)" if summary.budget_tokens else "")
             + f", trunk batch {summary.trunk.batch_size}, branches at "
             + ", ".join(map(str, summary.branch_batches)) + ".\n",
             "\n>\n".join(f"> {line.strip()}" for line in lines) + "\n"]
    if plot is not None:
        parts.append(f"![{PLOT}]({plot.name})\n")
    parts += ["## Critical batch over training\n", _definition(summary) + "\n", markdown_table(rows, columns),
              f"\nShape: {summary.trend.text}\n",
              "## Recommended batch-size schedule\n", f"{_schedule_text(summary)}\n",
              "```json\n" + str(summary.batch_size_schedule) + "\n```\n"]
    for trainer, (language, snippet, note) in trainer_snippets(summary).items():
        parts += [f"### {trainer}\n", f"```{language}\n{snippet}```\n", note + "\n"]
    sv = summary.schedule_validation
    frontier = f"\n![{FRONTIER_PLOT}]({FRONTIER_PLOT}.png)\n" if sv and sv.frontier else ""
    paired = ("\nPaired by seed (the differences the verdicts read):\n\n"
              + markdown_table(paired_rows(summary), PAIRED_COLUMNS)
              if sv and paired_rows(summary) else "")
    compared = ("## CBS(t) on the eval loss and on the training loss (EMA)\n\n"
                + markdown_table(loss_rows(summary), LOSS_COLUMNS)
                if summary.loss_comparison else "")
    parts += ["## Schedule validation\n", (f"Criterion (fixed before the runs): {sv.criterion}.\n\n"
                                            + "\n\n".join(f"- {v}" for v in sv.text.split(". ")) + "\n\n"
                                            + markdown_table(_validation_records(summary), VALIDATION_COLUMNS)
                                            + paired + frontier)
              if sv else "Not run: `--validate-schedule` trains the schedule against fixed batches.\n", compared,
              "## Deviations from the paper\n", "\n".join(f"- {d}" for d in summary.deviations) + "\n"
              if summary.deviations else "None.\n",
              "## Branches\n", markdown_table([b.to_dict() for b in summary.branches], BRANCH_COLUMNS),
              "\n## Gradient noise scale on the trunk\n", _b_simple_line(summary) + "\n",
              "\n## Cost\n", _cost_line(summary) + "\n"]
    return "\n".join(parts)


def render_html(summary: BranchSummary, plot: Optional[Path], frontier: Optional[Path] = None) -> str:
    """report.html, self-contained (the plots embedded)."""
    esc = html.escape
    rows, columns = _point_rows(summary)
    lines = headline(summary)
    sure = summary.trend.holds is not False
    figure = ""
    if plot is not None:
        data = base64.b64encode(plot.read_bytes()).decode()
        figure = (f'<figure class="lead"><img alt="{PLOT}" src="data:image/png;base64,{data}"><figcaption>CBS(t) '
                  f"against {_axis_name(summary)} seen, the trunk's B_simple and the recommended schedule</figcaption>"
                  "</figure>")
    snippets = "".join(f"<h3>{esc(trainer)}</h3><pre>{esc(snippet)}</pre><p class=\"meta\">{esc(note)}</p>"
                       for trainer, (_, snippet, note) in trainer_snippets(summary).items())
    sv = summary.schedule_validation
    validation = (f"<p class=\"meta\">Criterion (fixed before the runs): {esc(sv.criterion)}.</p><ul>"
                  + "".join(f"<li>{esc(v)}</li>" for v in sv.text.split(". ")) + "</ul>"
                  + html_table(_validation_records(summary), VALIDATION_COLUMNS)
                  + ("<p>Paired by seed (the differences the verdicts read):</p>"
                     + html_table(paired_rows(summary), PAIRED_COLUMNS) if paired_rows(summary) else "") if sv else
                  "<p>Not run: <code>--validate-schedule</code> trains the schedule against fixed batches.</p>")
    if sv and frontier is not None and frontier.exists():
        data = base64.b64encode(frontier.read_bytes()).decode()
        validation += f'<figure><img alt="{FRONTIER_PLOT}" src="data:image/png;base64,{data}"></figure>'
    compared = ("<h2>CBS(t) on the eval loss and on the training loss (EMA)</h2>"
                + html_table(loss_rows(summary), LOSS_COLUMNS) if summary.loss_comparison else "")
    deviations = ("<ul>" + "".join(f"<li>{esc(d)}</li>" for d in summary.deviations) + "</ul>"
                  if summary.deviations else "<p>None.</p>")
    title = f"Critical batch over training: {esc(str(summary.name or ''))}"
    experiment = f"Experiment <code>{esc(summary.experiment_path)}</code>; " if summary.experiment_path else ""
    tokens = f" ({summary.budget_tokens} tokens)" if summary.budget_tokens else ""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title><style>{STYLE}</style></head><body>
<h1>{title}</h1>
<p class="meta">{experiment}branch mode, budget {summary.budget_samples} samples{tokens},
trunk batch {summary.trunk.batch_size}, branches at {esc(', '.join(map(str, summary.branch_batches)))}.</p>
{html_answer_box(lines, sure)}
{figure}
<h2>Critical batch over training</h2><p class="meta">{esc(_definition(summary))}</p>{html_table(rows, columns)}
<p>Shape: {esc(summary.trend.text)}</p>
<h2>Recommended batch-size schedule</h2><p>{esc(_schedule_text(summary))}</p>
<pre>{esc(str(summary.batch_size_schedule))}</pre>{snippets}
<h2>Schedule validation</h2>{validation}{compared}
<h2>Deviations from the paper</h2>{deviations}
<h2>Branches</h2>{html_table([b.to_dict() for b in summary.branches], BRANCH_COLUMNS)}
<h2>Gradient noise scale on the trunk</h2><p>{esc(_b_simple_line(summary))}</p>
<h2>Cost</h2><p>{esc(_cost_line(summary))}</p>
</body></html>
"""


def write_branch_report(summary: BranchSummary, history: pd.DataFrame, directory) -> Path:
    """Write ``summary.json``, ``history.csv``, ``cbs_over_training.png``, ``report.md`` and ``report.html`` into
    ``directory``; returns the path of report.html."""
    with report_folder(directory, summary.experiment_path, name=summary.name, method="branch") as directory:
        (directory / "summary.json").write_text(summary.to_json())
        history.to_csv(directory / "history.csv", index=False)
        plot = cbs_over_training_plot(summary, directory / f"{PLOT}.png")
        frontier = frontier_plot(summary, directory / f"{FRONTIER_PLOT}.png")
        (directory / "report.md").write_text(render_markdown(summary, plot))
        page = directory / "report.html"
        page.write_text(render_html(summary, plot, frontier))
    return page


# ---- the method's report steps (``report.reading.MethodReport``) ------------------------------------------

class BranchReport:
    """``search.method: branch``: the branch summary of an experiment and its schedule run, and its report."""

    name = "branch"
    described = "a branch search"
    report_flags = ("--tolerance",)

    def summarize(self, path: str, meta: Optional[ExperimentMeta], *, tolerance: Optional[float] = None,
                  target: Optional[float] = None, turning_fit: Optional[str] = None) -> Reading[BranchSummary]:
        """The branch summary of the experiment at ``path`` and its schedule run; ``tolerance`` reads CBS(t) at
        another tolerance than the spec's."""
        meta = meta or ExperimentMeta.read(path)
        spec_from_dict(meta.spec)  # the experiment's spec still validates
        recorded = {**meta.recorded(), "experiment_path": path}
        try:
            rec = RecordedBranchSettings.from_json(recorded)
        except ValueError as e:
            raise ReportError(f"{path}: {e}") from None
        if tolerance is not None:
            rec = dataclasses.replace(rec, tolerance=float(tolerance))
        history, schedule_path = branch_history(path, recorded.get("schedule_experiment"))
        if history.empty:
            raise ReportError(f"{path}: no trial reported anything{first_error(path)}")
        summary = summarize_branches(history, rec, next_search=next_search_of(meta.spec))
        return Reading(summary, history, tuple(headline(summary)), branch_answer(summary),
                       extras={"schedule_experiment_path": schedule_path, "experiment_path": path,
                               "checkpoint_dir": recorded.get("checkpoint_dir"), "budget_samples": rec.budget_samples})

    def render(self, reading: Reading[BranchSummary], out: Path) -> Path:
        """The branch report; a trunk that failed for good ends here in one line (``TrunkFailed``), the report
        written but no schedule recommended."""
        page = write_branch_report(reading.summary, reading.history, out)
        path = reading.extras["experiment_path"]
        lost = trunk_lost(reading.history, failed_roles(path, reading.extras["checkpoint_dir"]),
                          reading.extras["budget_samples"])
        if lost is not None:  # no schedule can be read from branches that never had their checkpoints
            raise TrunkFailed(f"branch: the trunk (B={reading.summary.trunk.batch_size}) failed for good at "
                              f"{lost} samples{first_error(path)}; no schedule is recommended (what was measured: "
                              f"{page})")
        return page

    def run_lines(self, reading: Reading[BranchSummary]) -> list[str]:
        return []

    def report_lines(self, page: Path, out: Path, path: str) -> list[str]:
        return [report_and_summary_line(page, out, path)]


class TrunkFailed(ReportError):
    """The trunk of a branch search failed for good (``resources.max_failures`` spent): the search ends with one
    line and a non-zero exit, its report written but no schedule recommended."""


def trunk_lost(history, failed_roles: set, budget_samples: int) -> Optional[int]:
    """The samples the trunk had trained when it failed for good, or None when it did not: a trunk among the
    failed trials (``failed_roles``: an error file or Tune's ERROR; a killed actor's trial stays "running" in
    Tune's saved state) that never reached the budget (one restarted after a failure and finished did)."""
    trunk = history[history[Column.role] == "trunk"] if Column.role in history else history.iloc[:0]
    failed_flag = Column.failed in trunk and trunk[Column.failed].astype(bool).any()
    trained = int(trunk[Column.samples_seen].max()) if len(trunk) else 0
    if ("trunk" in failed_roles or failed_flag) and trained < budget_samples:
        return trained
    return None


def failed_roles(path: str, checkpoint_dir: Optional[str]) -> set:
    """The roles of the trials that failed: ``trunk`` where the trunk's end marker says ``failed`` (written by
    ``methods.branch.trunk_watch`` when Tune gives up on it; Tune's saved state still calls a killed trial running), and
    the roles of the trials with an error file."""
    roles = {(t.config or {}).get("role") for t in failed_trials(path)[0]}
    marker = Path(checkpoint_dir or "", TRUNK_DONE)
    if checkpoint_dir and "://" not in checkpoint_dir and marker.is_file() and \
            marker.read_text().strip() == "failed":
        roles.add("trunk")
    return roles


def branch_answer(summary) -> Optional[MethodAnswer]:
    """The answer branch mode stands behind: CBS(t) at the latest checkpoint that could tell (resolvable), else at
    the latest one read, with its bound; None where no checkpoint was read."""
    points = list(summary.critical_batch_over_training)
    if not points:
        return None
    point = next((p for p in reversed(points) if p.resolvable), points[-1])
    unit = "tokens" if summary.tokens_per_sample else "samples"
    at = point.tokens_seen if summary.tokens_per_sample and point.tokens_seen else point.samples_seen
    return MethodAnswer(point.batch_size, point.bound, f"critical batch {bound_text(point.batch_size, point.bound)} "
                        f"at {at} {unit}" + ("" if point.resolvable else " (not resolvable)"))


REPORT = BranchReport()
"""What its entry in ``records.method_registry`` names."""
