"""The from-scratch headline: the decision and the answer first, then the three readings of the critical batch, the
noise scale, the batch sizes that diverged and the recommendation, one line each (what a search prints at its end
and report.md opens with).
"""

from __future__ import annotations

from typing import Optional

from cbs_ray.analysis.bounds import bound_text
from cbs_ray.methods.scratch.answer import READINGS
from cbs_ray.methods.scratch.summary import CriticalBatch, NoiseScale, Recommendation, Summary, Tradeoff
from cbs_ray.records.columns import Column

__all__ = ["headline", "decision_lines", "recommendation_line"]


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
