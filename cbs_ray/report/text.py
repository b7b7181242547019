"""The report's text: the headline (the answer first, then the readings) and the snippets to paste (the
recommendation's keys, and HF ``TrainingArguments``).
"""

from __future__ import annotations

import html
import math
from typing import Optional

from cbs_ray.analysis.answer import READINGS, bound_text
from cbs_ray.analysis.summary_record import CriticalBatch, NoiseScale, Recommendation, Summary, Tradeoff
from cbs_ray.maths.budget import plan_batch
from cbs_ray.records.columns import Column

# ReportError and the spec file's helpers live with the rest of the storage reading; named here too, as
# they were this module's before.

__all__ = ["headline", "decision_lines", "html_answer_box", "html_table"]


# ---- rendering -------------------------------------------------------------------------------------

def format_value(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return ", ".join(format_value(x) for x in v) or "–"
    return str(v)


def markdown_table(records: list[dict], columns: list[str]) -> str:
    columns = [c for c in columns if any(c in r for r in records)]
    if not records or not columns:
        return "_none_\n"
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(format_value(r.get(c)) for c in columns) + " |" for r in records]
    return "\n".join(lines) + "\n"


def html_table(records: list[dict], columns: list[str]) -> str:
    """``markdown_table`` for report.html: the columns some record has, escaped, in a scrolling box."""
    columns = [c for c in columns if any(c in r for r in records)]
    if not records or not columns:
        return "<p><em>none</em></p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(format_value(r.get(c)))}</td>" for c in columns) + "</tr>"
                   for r in records)
    return f'<div class="wide"><table><tr>{head}</tr>{body}</table></div>'


def html_answer_box(lines: list[str], sure: bool) -> str:
    """report.html's answer box: the headline's first line in bold, the rest small; ``sure`` False marks it
    unsure (a refusal, a trend that does not hold)."""
    esc = html.escape
    return (f'<div class="answer{"" if sure else " unsure"}"><div class="how"><b>{esc(lines[0])}</b></div>\n'
            + "".join(f'<div class="small">{esc(line.strip())}</div>' for line in lines[1:]) + "</div>")


def _turning_point_lines(cb: CriticalBatch, metric: str) -> list[str]:
    """The turning point (and the other reading where it differs), then its noise."""
    tp = cb.turning_point
    other = "raw" if tp.fit == "monotone" else "monotone"
    other_batch = tp.raw_batch_size if other == "raw" else tp.monotone_batch_size
    lines = [f"Critical batch, turning point (equal samples, {cb.within}, "
             f"{READINGS[tp.fit]}): "
             + bound_text(tp.batch_size, tp.bound)
             + (f" (read off the {READINGS[other]}: {other_batch})"
                if other_batch not in (None, tp.batch_size) else "")
             + (f"  [{tp.reason}]" if tp.reason else "")]
    unc = tp.uncertainty
    if unc and unc.verdict and unc.range:
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
            + (f" ({noise.reports_not_positive} of {noise.reports} reports had no positive B_simple of their "
               f"own, the noise not yet averaged out; the average counts them, as it must to be unbiased)"
               if noise.reports_not_positive else ""))


def _recommended_figure(rec: Recommendation) -> str:
    """The metric the recommendation rests on: the mean over its configuration's runs where it was repeated
    (the one trial may be the luckiest of them), else its one trial's."""
    if rec.metric_mean is None:
        return f"{rec.metric_value:.4g}"
    se = f" ± {rec.metric_se:.2g}" if rec.metric_se is not None else ""
    return f"{rec.metric_mean:.4g}{se} (mean of {rec.runs} runs; this trial {rec.metric_value:.4g})"


def recommendation_line(rec: Optional[Recommendation], metric: str) -> str:
    if not rec:
        return "Recommendation: none (no trial reached the full budget)"
    return (f"Recommendation: batch {rec.batch_size}, alpha {rec.alpha:.3g}, peak lr "
            f"{rec.peak_lr:.3g}, warmup {rec.warmup_fraction:.3g} of the steps "
            f"({rec.warmup_steps} steps) -> {metric} {_recommended_figure(rec)}, "
            f"{rec.projected_time_s:.1f} s projected" + "".join(f"\n  {line}" for line in (rec.note, rec.unsearched)
                                                                if line))


def decision_lines(summary: Summary) -> list[str]:
    """The decision's line (``analysis.decision``), where the summary has one: the first line printed."""
    return [summary.decision.text] if summary.decision is not None else []


def headline(summary: Summary) -> list[str]:
    """The decision (what to train at), then the one answer (``Summary.answer``), its cross-checks and notes, then the
    three critical-batch figures
    and the recommendation, one line each (a reading at the edge of the grid written as a bound, "≥ 128")."""
    cb, metric = summary.critical_batch, summary.metric
    oh = cb.overhead_20pct
    lines = decision_lines(summary) + [summary.answer.text, summary.answer.cross_checks]
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
    unstable = [r for r in summary.per_batch if r.get(Column.diverged)]
    if unstable:
        lines.append("Diverged (non-finite or exploding loss; worst metric recorded): " + "; ".join(
            f"B={r[Column.batch_size]}: {r[Column.diverged]} trial(s), peak lr "
            + ", ".join(f"{lr:.3g}" for lr in r.get(Column.diverged_peak_lrs, [])) for r in unstable))
    lines += recommendation_line(summary.recommendation, metric).split("\n")
    return lines


SNIPPET_KEYS = ["batch_size", "alpha", "peak_lr", "warmup_fraction", "warmup_steps", "budget_samples",
                "optimizer_steps"]  # the recommendation's lines to paste into a training config


def recommendation_snippet(summary: Summary) -> str:
    rec = summary.recommendation
    if not rec:
        return ""
    return "\n".join(f"{k}: {getattr(rec, k)}" for k in SNIPPET_KEYS) + "\n"


# training.lr_decay -> HF's lr_scheduler_type: warmup, then that decay (constant: HF's constant after warmup).
HF_SCHEDULERS = {"linear": "linear", "cosine": "cosine", "constant": "constant_with_warmup"}


def training_arguments(summary: Summary) -> str:
    """HF ``TrainingArguments`` for the recommendation, from it and the experiment's spec: the per-device batch
    is the spec's micro-batch and the rest is accumulation, B = per-device × accumulation × workers (as the
    trials made it, ``maths.budget.plan_batch``; a micro-batch probe may have lowered it further), the peak LR,
    warmup and the budget in optimizer steps, and the spec's schedule, weight decay, clipping and Adam betas.
    "" without a recommendation or a spec (a bare history)."""
    rec, spec = summary.recommendation, summary.spec
    if not rec or not spec:
        return ""
    t, workers = spec.get("training", {}), int(spec.get("resources", {}).get("workers_per_trial") or 1)
    plan = plan_batch(rec.batch_size, workers, t.get("micro_batch_size"))
    clip = t.get("grad_clip_norm")
    decay = t.get("lr_decay", "linear")
    optimizer = t.get("optimizer", "adamw")
    lines = [f"per_device_train_batch_size={plan.micro_batch},  # the micro-batch",
             (f"gradient_accumulation_steps={plan.accumulation},  # B={rec.batch_size} = {plan.micro_batch} × "
              f"{plan.accumulation} × {workers} device{'s' if workers > 1 else ''}"),
             f"learning_rate={rec.peak_lr:.4g},  # the peak: base_lr × (B / base_batch) ** {rec.alpha:.3g}",
             f"warmup_steps={rec.warmup_steps},  # {rec.warmup_fraction:.3g} of the steps",
             f"max_steps={rec.optimizer_steps},  # the budget, {rec.budget_samples} samples at B={rec.batch_size}",
             f'lr_scheduler_type="{HF_SCHEDULERS.get(decay, decay)}",',
             f"weight_decay={t.get('weight_decay', 0.0)},",
             f"max_grad_norm={clip if clip is not None else 0.0},{'  # no clipping' if clip is None else ''}",
             f"adam_beta1={t.get('adam_beta1', 0.9)},",
             f"adam_beta2={t.get('adam_beta2', 0.999)},"]
    if optimizer == "sgd":
        lines.append('optim="sgd",  # the search\'s SGD had momentum 0.9')
    note = "" if optimizer != "lamb" else "# the search trained with LAMB, which HF's Trainer does not offer\n"
    return ("from transformers import TrainingArguments\n\n" + note + "args = TrainingArguments(\n"
            + "".join(f"    {line}\n" for line in lines) + ")\n")
