"""The ladder's summary and report (``methods.ladder.reading``, ``methods.ladder.report``) on hand-built histories
whose critical batch is known (``helpers.ladder_curves``: B_crit(D) = 2·D^0.5 exactly). No Ray, no torch."""

import json
import math

import pandas as pd
import pytest

from cbs_ray.methods.ladder.reading import ladder_curves, summarize_ladder
from cbs_ray.methods.ladder.report import headline, write_ladder_report
from cbs_ray.methods.ladder.summary import LadderCost, NoiseScale
from helpers.ladder_curves import history_rows

BATCHES = (8, 16, 32, 64)
EVALS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)  # the validation's runs go on to 2·D
META = {"ladder_batches": list(BATCHES), "ladder_seeds": 2, "ladder_alpha": 0.5, "warmup_fraction": 0.1,
        "budget_samples": 8192, "ladder_stop_samples": 2048, "ladder_evaluations": list(EVALS),
        "ladder_validate": True, "tokens_per_sample": None, "base_lr": 0.002, "base_batch": 16,
        "max_seq_length": 32, "name": "known"}


def history(**kw):
    return pd.DataFrame(history_rows(BATCHES, EVALS, **kw))


def test_curves_per_batch_and_run_up_to_the_fraction():
    curves = ladder_curves(history(), up_to=2048)
    assert sorted(curves) == list(BATCHES) and len(curves[8]) == 2
    assert [s for s, _ in curves[8][0]] == [128, 256, 512, 1024, 2048]
    frame = history()
    frame.loc[(frame["trial_id"] == "B64_s1") & (frame["samples_seen"] == 512), "diverged"] = True
    assert math.isnan(dict(ladder_curves(frame)[64][1])[512])  # a diverged report is no loss


def test_the_ladder_recovers_a_known_exponent_and_predicts_the_measured_b_crit():
    s = summarize_ladder(history(), META, bootstrap=300)
    lad, pred, v = s.ladder, s.prediction, s.prediction_validation
    assert [r.samples_seen for r in lad.rungs] == [128, 256, 512, 1024, 2048]  # the ladder's own only
    assert lad.exponent == pytest.approx(0.5, abs=0.1)
    assert lad.exponent_ci[0] <= 0.5 <= lad.exponent_ci[1]
    true = 2.0 * 8192 ** 0.5  # 181
    assert pred.interval_90[0] <= true <= pred.interval_90[1]
    assert pred.batch_size == 2 ** int(math.log2(pred.interval_90[0]))  # a power of two at the low end
    assert pred.peak_lr == pytest.approx(0.002 * (pred.batch_size / 16) ** 0.5)
    # Measured at D from the same runs' full curves: the known value, inside the interval, within 0.5 in log2,
    # and better than B_crit at the last rung with a reading: 1024 (64, a factor 2.8 off; at 2048 the larger
    # batches have not reached the target within the ladder's 2048 samples).
    assert v.measured_b_crit == pytest.approx(true, rel=0.03)
    assert v.within_interval and v.log2_error <= 0.5
    # the ladder's samples (every batch to where it reached the last rung's target, at most the fraction in an
    # experiment from before ladder.cap) over the measurement's (every batch to where it reached the loss at D)
    assert v.samples_ratio == pytest.approx(s.cost.ladder_samples / v.measurement_samples)
    assert v.samples_ratio < 0.15
    assert v.baselines["no_extrapolation"].log2_error == pytest.approx(math.log2(true / 64), abs=0.05)
    # the rungs' exact 0.5 is shrunk towards the prior's 0.566 (maths.prediction.TRANSFER_SD): no longer closer than
    # every borrowed exponent on a clean power law, but far closer than no extrapolation
    assert v.log2_error < v.baselines["no_extrapolation"].log2_error / 3
    assert set(v.baselines) == {"no_extrapolation", "borrowed_exponent_0.383", "borrowed_exponent_0.47",
                                   "borrowed_exponent_0.571", "borrowed_mccandlish_0.452", "borrowed_mccandlish_0.68"}
    assert s.cost == LadderCost(ladder_samples=4 * 2 * 2048, full_budget_samples=4 * 2 * 8192, fraction_of_full=0.25)
    assert "step_law" in s.reference_laws.laws and s.reference_laws.laws["step_law"].tokens == pytest.approx(
        0.58 * (8192 * 32) ** 0.571)


def test_a_flat_b_crit_is_predicted_with_a_warning_where_the_power_law_refuses():
    # Issue 49: the power law refuses (B_crit does not grow), the predictor answers from the rungs and the prior;
    # issue 57: anchored at the rungs' centroid, and the flat rungs are named in one warning (B_crit = 40 at every D,
    # so the rungs' exponent, shrunk towards the prior, carries the prediction above 40).
    s = summarize_ladder(history(gamma=0.0, c=40.0, noise=0.002), {**META, "ladder_validate": False}, bootstrap=300)
    assert "includes 0" in s.ladder.refusal or "poor fit" in s.ladder.refusal
    pred = s.prediction
    assert pred.refusal is None and pred.figures.source in ("rungs", "combined")
    assert 40 < pred.b_crit < pred.figures.literature_band[0]
    used = s.ladder.rungs_used
    assert pred.figures.prior.definition == "mccandlish"
    assert min(used) < pred.figures.anchor_samples < max(used)
    assert len([w for w in pred.figures.warnings if w.startswith("flat or falling")]) == 1
    assert s.prediction_validation is None
    lines = headline(s)
    assert any(line.strip().startswith("source: ") and "McCandlish" in line for line in lines)
    assert any(line.strip().startswith("warning: flat or falling") for line in lines)


def test_rungs_read_off_the_batch_grid_are_left_out_of_the_prediction():
    # B_crit = 0.05·D^0.9 lies below the smallest batch trained (8) at the first two rungs (4.1, 7.6): they are shown
    # in ladder.rungs and left out of the prediction, each with its reason
    s = summarize_ladder(history(gamma=0.9, c=0.05, noise=0.002), {**META, "ladder_validate": False}, bootstrap=300)
    fig = s.prediction.figures
    off = [r.samples_seen for r in s.ladder.rungs if r.b_crit is not None and r.b_crit < 8]
    assert off == [128, 256] and [r["samples"] for r in fig.left_out] == off
    assert all("below the smallest batch trained (8)" in r["reason"] for r in fig.left_out)
    assert 511 < fig.anchor_samples < 1025  # the centroid of the rungs in use
    assert any("left out" in w for w in fig.warnings)


def test_summary_json_keys_and_report_files(tmp_path):
    frame = history()
    s = summarize_ladder(frame, META, bootstrap=200)
    d = json.loads(s.to_json())
    assert d["method"] == "ladder"
    assert {"samples_seen", "b_crit", "b_crit_ci"} <= set(d["ladder"]["rungs"][0])
    assert {"exponent", "exponent_ci"} <= set(d["ladder"])
    assert {"budget_samples", "b_crit", "interval_90", "batch_size", "overhead_20pct"} <= set(d["prediction"])
    assert {"measured_b_crit", "within_interval", "log2_error", "samples_ratio"} <= set(d["prediction_validation"])
    page = write_ladder_report(s, frame, tmp_path)
    for name in ("summary.json", "history.csv", "ladder.png", "report.md", "report.html"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert "## Rungs" in (tmp_path / "report.md").read_text() and page.name == "report.html"
    text = page.read_text()  # the rungs as a table (one row each), the answer box first
    assert text.count("<tr>") == 1 + len(d["ladder"]["rungs"]) and text.index('class="answer') < text.index("<table>")
    decision, *lines = headline(s)  # the decision first (issue 59)
    assert decision == s.decision.text
    assert lines[0].startswith("Ladder: the smallest batch to 2048 of 8192 samples, every other until it reached "
                               "that loss or 2048")
    assert lines[0].endswith("eval_loss read through the raw model (ladder.reading raw)")  # an experiment from before
    assert {"exponent_se", "reading", "rung_span", "cuts"} <= set(d["ladder"]) and d["ladder"]["reading"] == "raw"
    assert d["ladder"]["exponent_se"] > 0 and "censored" in d["ladder"]["rungs"][0]
    assert any(line.startswith("Validation: measured B_crit") for line in lines)


def test_fitted_curves_predict_the_known_b_crit_and_say_so():
    # ladder.curve: fit (the default of a new experiment) on the same known curves with ±0.002 noise: every
    # batch's curve fitted from the first rung on, the prediction and the measurement still the known 181
    meta = {**META, "ladder_curve": "fit", "ladder_rungs_from": 256}
    s = summarize_ladder(history(noise=0.002), meta, bootstrap=300)
    assert s.ladder.curve == "fit" and [r.samples_seen for r in s.ladder.rungs] == [256, 512, 1024, 2048]
    true = 2.0 * 8192 ** 0.5
    assert s.ladder.exponent_ci[0] <= 0.5 <= s.ladder.exponent_ci[1]
    assert s.prediction.interval_90[0] <= true <= s.prediction.interval_90[1]
    assert s.prediction_validation.measured_b_crit == pytest.approx(true, rel=0.15)
    assert summarize_ladder(history(), META, bootstrap=0).ladder.curve == "interpolate"  # meta from before


def test_the_noise_scale_on_the_way_is_read_beside_the_rungs():
    # B_simple = samples / 100 on B=64's two runs (and on one B=32 run at twice that), NaN or 0 elsewhere: the
    # median over the runs reporting it at each rung, its power law exponent 1, and the hint when nothing is
    # predicted although it grows.
    from cbs_ray.methods.ladder.reading import noise_scale_at

    frame = history(gamma=0.0, c=40.0, noise=0.002)
    frame["b_simple"] = [r.samples_seen / 100 if r.batch_size == 64 else 0.0 if r.batch_size == 8 else float("nan")
                         for r in frame.itertuples()]
    frame.loc[(frame.trial_id == "B32_s0"), "b_simple"] = frame.samples_seen / 50
    noise = noise_scale_at(frame, [256, 512, 1024, 2048])
    assert noise.by_rung == [[256, 2.56, 3], [512, 5.12, 3], [1024, 10.24, 3], [2048, 20.48, 3]]
    assert noise.exponent == pytest.approx(1.0)
    assert noise_scale_at(frame, [256, 512]).exponent is None  # two points: no power law
    s = summarize_ladder(frame, {**META, "ladder_validate": False, "ladder_rungs_from": 256}, bootstrap=200)
    assert s.ladder.noise_scale.by_rung[0] == [256, 2.56, 3]
    line = next(x for x in headline(s) if x.startswith("Gradient noise scale B_simple on the way: 2.56 at 256"))
    assert "(∝ D^1)" in line and "it grows with data where no growing B_crit could be read" in line
    assert summarize_ladder(history(), META, bootstrap=0).ladder.noise_scale == NoiseScale([], None, None)
    assert noise.constant == pytest.approx(0.01)  # B_simple = D / 100: what it would predict at D = 8192: 81.92
    assert s.prediction.b_simple_prediction == pytest.approx(81.92)


def test_the_ladder_plot_draws_the_rungs_and_the_noise_scale(tmp_path, monkeypatch):
    import cbs_ray.methods.ladder.report as ladder_report

    labels = []
    monkeypatch.setattr(ladder_report, "save_figure", lambda fig, path: labels.append(
        [t.get_text() for t in fig.axes[0].get_legend().get_texts()]) or path)
    frame = history()
    frame["b_simple"] = frame.samples_seen / 100.0
    ladder_report.ladder_plot(summarize_ladder(frame, META, bootstrap=100), tmp_path / "a.png")
    assert {"B_crit at a rung (95 %; grey: not fitted)", "B_simple on the way (a diagnostic)",
            "measured at D"} <= set(labels[0])


def test_a_refused_prediction_is_not_judged():
    # Issue 40 row 9: B_crit does not grow, the prediction is refused; the validation measures B_crit at D but
    # judges nothing ("within_interval: false", "outside the interval" before).
    # no rung (all before ladder_rungs_from): no anchor, the one refusal left (issue 49)
    s = summarize_ladder(history(gamma=0.0, c=40.0, noise=0.002), {**META, "ladder_rungs_from": 10 ** 9}, bootstrap=300)
    v = s.prediction_validation
    assert s.prediction.b_crit is None and "no anchor" in s.prediction.refusal and v is not None
    assert (v.within_interval, v.log2_error, v.beats_baselines, v.target_met) == (None, None, None, None)
    judged = summarize_ladder(history(), META, bootstrap=100).prediction_validation
    assert judged is not None and set(v.to_dict()) == set(judged.to_dict())  # the same keys either way (a refusal
    assert v.b_simple_prediction.log2_error is None                            # once lacked b_simple_prediction)
    lines = headline(s)
    assert not any("outside the interval" in line for line in lines)
    if v.measured_b_crit is not None:
        assert any("no prediction to judge against it" in line for line in lines)


def test_lr_weighted_steps_count_every_rung_and_the_measurement_the_same_way():
    """With ladder.step_count lr_weighted the meta's warmups reach both the rungs and the measurement at D: the
    reference's S at a rung is its steps less (W − 1)/2 past its warmup; the headline says so."""
    from cbs_ray.maths.lr_schedule import lr_weighted_steps

    warmups = {"8": 26, "16": 13, "32": 8, "64": 8}
    plain = summarize_ladder(history(), META, bootstrap=50)
    s = summarize_ladder(history(), {**META, "ladder_step_count": "lr_weighted", "ladder_warmup_steps": warmups},
                         bootstrap=50)
    assert s.ladder.step_count == "lr_weighted" and plain.ladder.step_count == "optimizer"
    for r, p in zip(s.ladder.rungs, plain.ladder.rungs):
        assert r.steps_by_batch["8"] == pytest.approx(lr_weighted_steps(r.samples_seen / 8, 26))
        assert p.steps_by_batch["8"] == pytest.approx(p.samples_seen / 8)
    assert s.ladder.rungs[-1].steps_by_batch["8"] == 2048 / 8 - 12.5
    assert s.prediction_validation.measured_b_crit != plain.prediction_validation.measured_b_crit
    assert "ladder.step_count lr_weighted" in headline(s)[1] and "step_count" not in headline(plain)[1]


def test_the_growth_beyond_the_rungs_is_read_from_the_validation_runs():
    # Issue 36's open question: does the growth the rungs saw go on to D? The validation's runs answer every
    # evaluation of the smallest batch from the fraction (2048) to D (8192): here 2·D^0.5 at each, exponent 0.5.
    s = summarize_ladder(history(), META, bootstrap=100)
    v = s.prediction_validation
    assert [d for d, _ in v.b_crit_beyond_rungs] == [2048, 4096, 8192]
    assert [b for _, b in v.b_crit_beyond_rungs] == pytest.approx([2 * d ** 0.5 for d in (2048, 4096, 8192)],
                                                                     rel=0.03)
    assert v.exponent_beyond_rungs == pytest.approx(0.5, abs=0.03)
    assert any(line.startswith("Beyond the rungs: B_crit grew as D^0.4") or
               line.startswith("Beyond the rungs: B_crit grew as D^0.5") for line in headline(s))
    flat = summarize_ladder(history(gamma=0.0, c=40.0, noise=0.002), META, bootstrap=100).prediction_validation
    assert flat.exponent_beyond_rungs == pytest.approx(0.0, abs=0.1)


ROOT2 = sorted({round(128 * 2 ** (k / 2) / 64) * 64 for k in range(15)})  # 128 … 16384, √2 apart


def test_predict_loss_recovers_the_known_b_crit_through_the_loss_and_says_so():
    """``ladder.predict: loss`` on the known curves (B_crit = 2·D^0.5, L = 6·D^−0.2: B_crit = 2·(L/6)^−2.5 exactly),
    evaluated √2 apart so that the last octave before the stop holds 3 evaluations: the prediction is the known 181,
    summary.json records ``predict`` and the loss law beside every key it had, the power law's exponent is still
    ``ladder.exponent``, and the headline names the prediction."""
    frame = pd.DataFrame(history_rows(BATCHES, ROOT2))
    meta = {**META, "ladder_evaluations": ROOT2, "ladder_predict": "loss"}
    s = summarize_ladder(frame, meta, bootstrap=200)
    plain = summarize_ladder(frame, {**META, "ladder_evaluations": ROOT2}, bootstrap=200).to_dict()
    d = s.to_dict()
    true = 2.0 * 8192 ** 0.5
    assert d["ladder"]["predict"] == "loss" and "predict" not in plain["ladder"]
    assert set(plain["ladder"]) | {"predict", "through_loss"} == set(d["ladder"])
    assert set(plain["prediction_validation"]) | {"power_law_prediction"} == set(d["prediction_validation"])
    assert d["ladder"]["exponent"] == plain["ladder"]["exponent"]           # still the power law's over D
    loss = d["ladder"]["through_loss"]
    assert loss["exponent"] == pytest.approx(-2.5, abs=0.3) and loss["loss_octave_samples"] == [1024, 1472, 2048]
    assert loss["loss_at_budget"] == pytest.approx(6 * 8192 ** -0.2, rel=0.01)
    assert d["prediction"]["b_crit"] == pytest.approx(true, rel=0.1)
    assert d["prediction"]["b_crit"] != plain["prediction"]["b_crit"]
    assert d["prediction"]["interval_90"][0] <= true <= d["prediction"]["interval_90"][1]
    beside = d["prediction_validation"]["power_law_prediction"]
    assert beside == plain["prediction_validation"]["power_law_prediction"]  # the same power law beside either
    lines = headline(s)
    assert any(line.startswith("Prediction at 8192 samples through the loss (ladder.predict loss: B_crit = ")
               for line in lines)
    assert any(line.startswith("Beside it: the power law in D on the same rungs predicted") for line in lines)


def test_predict_loss_refuses_in_one_line_where_the_last_octave_has_two_evaluations():
    s = summarize_ladder(history(), {**META, "ladder_predict": "loss"}, bootstrap=100)  # doublings: 1024, 2048
    assert s.prediction.b_crit is None and "needs 3" in s.prediction.refusal
    assert s.ladder.refusal is None                                      # the power law's own fit stands
    assert s.prediction_validation.within_interval is None
    assert any(line.startswith("Prediction through the loss (ladder.predict loss: ") and "none — the loss at D "
               "cannot be extrapolated" in line for line in headline(s))
