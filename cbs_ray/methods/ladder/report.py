"""The ladder's report: ``summary.json``, ``history.csv``, the log–log plot ``ladder.png`` (B_crit at each rung
with its interval, the fitted power law, its extrapolation to the full budget with the 90 % band, the
measurement there when validated, and for reference what closed-form laws give), ``report.md`` and a
self-contained ``report.html``, from an ``methods.ladder.reading.LadderSummary``; and the method's report steps
(``LadderReport``: ``report.methods`` holds it). Needs no cluster.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Optional, cast

import matplotlib.pyplot as plt
import pandas as pd

from cbs_ray.maths.prediction import literature_range
from cbs_ray.methods.branch.same_spec import same_spec_schedule
from cbs_ray.methods.ladder.reading import LOG2_TARGET, LadderSummary, summarize_ladder
from cbs_ray.methods.ladder.summary import PredictorFigures
from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.storage import ReportError, first_error, load_history
from cbs_ray.report.folder import report_folder
from cbs_ray.report.page import STYLE, html_answer_box, html_table, markdown_table
from cbs_ray.report.plots import save_figure  # (sets matplotlib's Agg backend)
from cbs_ray.report.reading import MethodAnswer, Reading, next_search_of, report_and_summary_line
from cbs_ray.spec.load import spec_from_dict

__all__ = ["PLOT", "headline", "ladder_plot", "write_ladder_report", "LadderReport", "REPORT", "ladder_answer"]

PLOT = "ladder"


def headline(summary: LadderSummary) -> list[str]:
    """The lines the search prints at the end (report.md opens with them too)."""
    lad, pred = summary.ladder, summary.prediction
    reading = {"ewa": "the average of the iterates (ladder.reading ewa)", "raw": "the raw model (ladder.reading raw)"}
    decided = [summary.decision.text] if summary.decision is not None else []
    lines = decided
    lines += [f"Ladder: the smallest batch to {lad.fraction_samples} of {pred.budget_samples} samples, every other "
             f"until it reached that loss or {lad.cap_samples} ({summary.cost.fraction_of_full:.0%} of a "
             f"from-scratch search at D), batches {summary.batch_sizes}; {lad.column} read through "
             f"{reading.get(lad.reading, lad.reading)}"
             + (f"; steps counted by their LR (ladder.step_count lr_weighted; warmup steps "
                f"{', '.join(f'B={b}: {w}' for b, w in (lad.warmup_steps or {}).items())})"
                if lad.step_count == "lr_weighted" else "")]
    for r in lad.rungs:
        ci = r.b_crit_ci
        b = f"{r.b_crit:.3g}" + (f" [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else "") if r.b_crit else f"– ({r.reason})"
        lines.append(f"  rung at {r.samples_seen:g} samples: B_crit {b}; 20 % rule {r.overhead_20pct}"
                     + (f"; censored (below the target at their first evaluation): {r.censored}" if r.censored else ""))
    if lad.exponent is not None:
        eci, se = lad.exponent_ci, lad.exponent_se
        lines.append(f"Fit: B_crit ∝ D^{lad.exponent:.3g}" + (f" ± {se:.2g} (SE)" if se is not None else "")
                     + (f" (90 % [{eci[0]:.3g}, {eci[1]:.3g}])" if eci else "")
                     + (f", p = {lad.fit_p_value:.2g}" if lad.fit_p_value is not None else ""))
    lines += _noise_lines(summary)
    lines += _prediction_lines(summary)
    sched = pred.batch_size_schedule
    if sched:
        steps = ", then ".join(f"{b} from {s}" for s, b in sched["batch_size_schedule"][1:])
        verdict = sched.get("validated")
        lines.append(f"Batch-size schedule (branch mode, {sched['experiment']}): {sched['batch_size_schedule'][0][1]} "
                     f"from 0" + (f", then {steps}" if steps else "") + " samples"
                     + ("" if not verdict else
                        f"; validated: below the fixed-batch frontier {verdict['below_frontier']},"
                        f" loss within the small batch's {verdict['loss_holds']}"))
    return lines + _validation_lines(summary)


def _noise_lines(summary: LadderSummary) -> list[str]:
    """B_simple on the way, where at least two rungs measured it."""
    lad, noise = summary.ladder, summary.ladder.noise_scale
    if noise is None or len(noise.by_rung) < 2:
        return []
    (d0, b0, _), (d1, b1, _) = noise.by_rung[0], noise.by_rung[-1]
    grows = noise.exponent is not None and noise.exponent > 0
    line = (f"Gradient noise scale B_simple on the way: {b0:.3g} at {d0} samples … {b1:.3g} at {d1}"
            + (f" (∝ D^{noise.exponent:.2g})" if noise.exponent is not None else ""))
    if grows and (summary.prediction.b_crit is None or lad.refusal):
        line += ("; it grows with data where no growing B_crit could be read (the two need not agree: B_simple "
                 "is a property of the gradient, B_crit of the steps the batches took to a loss; on the SST-2 LM "
                 "of BENCHMARKS.md B_simple grew 27-fold while B_crit stayed between 10 and 21)")
    return [line]


def _validation_lines(summary: LadderSummary) -> list[str]:
    """The prediction judged against B_crit measured at D (``ladder.validate``), beside what else predicts it."""
    v, lines = summary.prediction_validation, []
    if v is None:
        return []
    if v.measured_b_crit is None:
        lines.append(f"Validation: B_crit at the full budget not measurable ({v.measured_reason})")
    elif v.within_interval is None:  # the prediction was refused: the measurement stands alone
        lines.append(f"Validation: measured B_crit {v.measured_b_crit:.3g} at the full budget; no prediction to "
                     f"judge against it (refused above)")
    else:
        err = f"{v.log2_error:.2f}" if v.log2_error is not None else "–"
        base = ", ".join(f"{k} {e.log2_error:.2f}" for k, e in v.baselines.items() if e.log2_error is not None)
        lines.append(f"Validation: measured B_crit {v.measured_b_crit:.3g} at the full budget; "
                     f"{'inside' if v.within_interval else 'outside'} the interval; |log2 error| {err} "
                     f"(target ≤ {LOG2_TARGET}; baselines: {base}); the ladder trained "
                     f"{v.samples_ratio:.2f} of the measurement's samples")
        beside = v.power_law_prediction
        lines.append("Beside it: the power law in D on the same rungs "
                     + (f"predicted {beside.b_crit:.3g} (|log2 error| {beside.log2_error:.2f})"
                        if beside.log2_error is not None else f"made no prediction ({beside.refusal})"))
        simple = v.b_simple_prediction
        if simple.b_crit:
            lines.append(f"Beside it: B_simple along the same runs would have predicted {simple.b_crit:.3g} "
                         f"(|log2 error| {simple.log2_error:.2f})")
    if v.exponent_beyond_rungs is not None and summary.ladder.exponent is not None:
        lines.append(f"Beyond the rungs: B_crit grew as D^{v.exponent_beyond_rungs:.3g} from "
                     f"{summary.ladder.fraction_samples} samples to D (the rungs' power law: "
                     f"D^{summary.ladder.exponent:.3g})")
    return lines


def _prediction_lines(summary: LadderSummary) -> list[str]:
    """The prediction, naming how it was made where it was not the power law in D (``ladder.predict``)."""
    lad, pred = summary.ladder, summary.prediction
    through = lad.through_loss if lad.predict == "loss" else None
    how = ""
    if through and through.exponent is not None:
        octave = through.loss_octave_samples or []
        how = (f" through the loss (ladder.predict loss: B_crit = {through.constant:.3g}·L^{through.exponent:.3g} "
               f"over the rungs"
               + (f", L at D {through.loss_at_budget:.4g} by L ∝ s^{through.loss_exponent:.3g} over "
                  f"{octave[0]:g}…{octave[-1]:g} samples" if through.loss_at_budget is not None and octave else "")
               + ")")
    elif through:
        how = " through the loss (ladder.predict loss)"
    if pred.b_crit is None or pred.interval_90 is None:
        return [f"Prediction{how}: none — {pred.refusal}"]
    lo, hi = pred.interval_90
    return [f"Prediction at {pred.budget_samples} samples{how}: B_crit {pred.b_crit:.3g} (90 % [{lo:.3g}, "
            f"{hi:.3g}]); recommended batch {pred.batch_size} (peak lr {pred.peak_lr:.3g} by alpha "
            f"{pred.alpha:g}, warmup {pred.warmup_steps} steps)", *_source_lines(pred.figures)]


def _source_lines(fig: Optional[PredictorFigures]) -> list[str]:
    """Where the prediction's exponent came from (``maths.prediction``) and which definition its prior and the
    borrowed exponents belong to."""
    if fig is None or fig.prior is None or fig.source is None:
        return []
    prior = fig.prior
    rungs = (f"the rungs' {fig.rungs_exponent:.3g} ± {fig.rungs_exponent_se:.2g} ({fig.form}) and "
             if fig.rungs_exponent is not None else "no fit from the rungs; ")
    band = fig.literature_band
    return [f"  source: {fig.source}; exponent {fig.exponent:.3g} ± {fig.exponent_sd:.2g} from the rungs' centroid at "
            f"{fig.anchor_samples:.4g} samples to D, from {rungs}the prior {prior.mean:.3g} ± {prior.sd:.2g} "
            f"for McCandlish's B_crit = E_min/S_min (Kaplan et al. 2020's 0.452 and Zhang et al. 2025's runs read so, "
            f"0.68); the baselines 0.383 and 0.571 are B_opt's (Power Lines, Step Law), 0.47 the 20 %-overhead batch's "
            f"(Zhang et al. 2025)",
            *([f"  literature band: [{band[0]:.3g}, {band[1]:.3g}] (the same anchor carried with "
               f"{' … '.join(f'{g:.3g}' for g in literature_range(prior.definition))})"]
              if band else []),
            *(f"  warning: {w}" for w in fig.warnings)]


def ladder_plot(summary: LadderSummary, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    lad, pred = summary.ladder, summary.prediction
    finite = [r for r in lad.rungs if r.b_crit]
    used = set(lad.rungs_used)
    for i, r in enumerate(finite):
        b, ci = cast(float, r.b_crit), r.b_crit_ci  # finite: a B_crit
        err = [[b - ci[0]], [ci[1] - b]] if ci and ci[1] is not None and ci[1] < 1e12 else None
        ax.errorbar([r.samples_seen], [b], yerr=err, fmt="o", capsize=3,
                    color="tab:blue" if r.samples_seen in used else "0.6",
                    label="B_crit at a rung (95 %; grey: not fitted)" if i == 0 else None)
    noise = lad.noise_scale.by_rung if lad.noise_scale is not None else []
    if noise:
        ax.plot([d for d, _, _ in noise], [b for _, b, _ in noise], ".:", color="tab:orange",
                label="B_simple on the way (a diagnostic)")
    budget = pred.budget_samples
    if lad.exponent is not None and lad.constant is not None and finite:
        xs = [min(r.samples_seen for r in finite), budget]
        ax.plot(xs, [lad.constant * x ** lad.exponent for x in xs], "--", color="tab:blue",
                label=f"fit: B_crit ∝ D^{lad.exponent:.2f}")
    if pred.b_crit is not None and pred.interval_90 is not None:
        lo, hi = pred.interval_90
        ax.errorbar([budget], [pred.b_crit], yerr=[[pred.b_crit - lo], [hi - pred.b_crit]], fmt="D",
                    color="tab:green", capsize=4,
                    label="prediction through the loss (90 %)" if lad.predict == "loss" else "prediction (90 %)")
    v = summary.prediction_validation
    if v and v.measured_b_crit:
        ax.plot([budget], [v.measured_b_crit], "*", ms=12, color="tab:red", label="measured at D")
    for name, law in summary.reference_laws.laws.items():
        ax.plot([budget], [law.samples], "x", color="0.5")
        ax.annotate(name, (budget, law.samples), xytext=(4, 0), textcoords="offset points", fontsize=7, color="0.4")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("samples seen (D)")
    ax.set_ylabel("B_crit (samples)")
    ax.set_title("The ladder: B_crit against data, extrapolated to the budget")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
    return save_figure(fig, path)


RUNG_COLUMNS = ["samples seen", "B_crit", "95 % CI", "20 % rule", "target loss", "censored", "why none"]


def _rung_rows(summary: LadderSummary) -> list[dict]:
    return [{"samples seen": r.samples_seen, "B_crit": r.b_crit, "95 % CI": r.b_crit_ci,
             "20 % rule": r.overhead_20pct, "target loss": r.target_loss,
             "censored": ", ".join(map(str, r.censored)) or None,
             **({"why none": r.reason} if r.b_crit is None else {})} for r in summary.ladder.rungs]


def _law_lines(summary: LadderSummary) -> list[str]:
    return [f"{k}: {v.samples:.3g} samples ({v.tokens:.3g} tokens)" for k, v in summary.reference_laws.laws.items()]


def _markdown(summary: LadderSummary) -> str:
    laws = "\n".join(f"- {x}" for x in _law_lines(summary))
    decided = [f"{summary.decision.text}\n"] if summary.decision is not None else []
    return "\n".join([*decided, f"# Ladder: {summary.name or ''}\n",
                      "\n".join(f"> {x}" for x in headline(summary)[len(decided):]) + "\n",
                      f"![{PLOT}]({PLOT}.png)\n", "## Rungs\n", markdown_table(_rung_rows(summary), RUNG_COLUMNS),
                      "## For reference: closed-form laws\n",
                      (laws + f"\n\n{summary.reference_laws.note or ''}\n") if laws
                      else "None (no tokens per sample).\n"])


def _html(summary: LadderSummary, plot: Path) -> str:
    esc = html.escape
    lines = headline(summary)
    data = base64.b64encode(plot.read_bytes()).decode()
    laws = _law_lines(summary)
    law_html = ("<ul>" + "".join(f"<li>{esc(x)}</li>" for x in laws) + "</ul>"
                f"<p class=\"meta\">{esc(summary.reference_laws.note or '')}</p>") if laws else \
        "<p>None (no tokens per sample).</p>"
    title = f"Ladder: {esc(str(summary.name or ''))}"
    experiment = f"<p class=\"meta\">Experiment <code>{esc(summary.experiment_path)}</code></p>" \
        if summary.experiment_path else ""
    sure = summary.prediction.b_crit is not None
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title><style>{STYLE}</style></head><body>
<h1>{title}</h1>{experiment}
{html_answer_box(lines, sure)}
<figure class="lead"><img alt="{PLOT}" src="data:image/png;base64,{data}"></figure>
<h2>Rungs</h2>{html_table(_rung_rows(summary), RUNG_COLUMNS)}
<h2>For reference: closed-form laws</h2>{law_html}
</body></html>
"""


def write_ladder_report(summary: LadderSummary, history: pd.DataFrame, directory) -> Path:
    """Write the report's files into ``directory``; returns report.html's path."""
    with report_folder(directory, summary.experiment_path, name=summary.name, method="ladder") as directory:
        (directory / "summary.json").write_text(summary.to_json())
        history.to_csv(directory / "history.csv", index=False)
        plot = ladder_plot(summary, directory / f"{PLOT}.png")
        (directory / "report.md").write_text(_markdown(summary))
        page = directory / "report.html"
        page.write_text(_html(summary, plot))
    return page


# ---- the method's report steps (``report.reading.MethodReport``) ------------------------------------------

class LadderReport:
    """``search.method: ladder``: the ladder's summary of an experiment, and its report."""

    name = "ladder"
    described = "a ladder"
    report_flags = ()

    def summarize(self, path: str, meta: Optional[ExperimentMeta], *, tolerance: Optional[float] = None,
                  target: Optional[float] = None, turning_fit: Optional[str] = None) -> Reading[LadderSummary]:
        """The ladder's summary of the experiment at ``path``, with branch mode's schedule for the same spec where
        one is beside it (``methods.branch.same_spec``)."""
        stored = meta or ExperimentMeta.read(path)
        spec_from_dict(stored.spec)  # the experiment's spec still validates
        history = load_history(path)
        if history.empty:
            raise ReportError(f"{path}: no trial reported anything{first_error(path)}")
        summary = summarize_ladder(history, {**stored.recorded(), "experiment_path": path},
                                   schedule=same_spec_schedule(path, stored), next_search=next_search_of(stored.spec))
        return Reading(summary, history, tuple(headline(summary)), ladder_answer(summary))

    def render(self, reading: Reading[LadderSummary], out: Path) -> Path:
        return write_ladder_report(reading.summary, reading.history, out)

    def run_lines(self, reading: Reading[LadderSummary]) -> list[str]:
        return []

    def report_lines(self, page: Path, out: Path, path: str) -> list[str]:
        return [report_and_summary_line(page, out, path)]


def ladder_answer(summary: LadderSummary) -> Optional[MethodAnswer]:
    """The batch the ladder recommends at the full budget (its prediction), None where it refused."""
    prediction = summary.prediction
    batch = prediction.batch_size
    if batch is None:
        return None
    b_crit = prediction.b_crit
    return MethodAnswer(int(batch), None, f"recommended batch {batch} at {prediction.budget_samples} samples"
                        + (f" (predicted B_crit {b_crit:.3g})" if b_crit is not None else ""))


REPORT = LadderReport()
"""What its entry in ``records.method_registry`` names."""
