"""``cbs-ray predict RUNGS.csv --budget-samples D``: the ladder's predictor on rungs a user measured (issues 49, 57,
58), on hand-built CSVs whose answer is known, and bad CSVs and files answered in one line with exit 2."""

import json
import math
import os
import resource
import subprocess
import sys
import time

import pytest

from cbs_ray.cli import main
from cbs_ray.report.predict_command import predict_main

RUNGS = [384, 512, 768, 1024, 1408, 2048, 2944, 3200]


def steps_csv(tmp_path, b_crit_of, batches=(8, 16, 32, 64, 128)):
    """S(B) = S_min + E_min/B with B_crit = E_min/S_min = b_crit_of(D) exactly (McCandlish et al. 2018)."""
    lines = ["samples,batch_size,steps"]
    for d in RUNGS:
        b_crit, e_min = b_crit_of(d), d / 2
        lines += [f"{d},{b},{e_min / b_crit + e_min / b:.6f}" for b in batches]
    path = tmp_path / "rungs.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_steps_are_read_as_the_ladder_reads_them_and_predict(tmp_path, capsys):
    path = steps_csv(tmp_path, lambda d: 2.0 * d ** 0.5)
    assert main(["predict", str(path), "--budget-samples", "16384", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"b_crit", "interval_90", "source", "exponent", "literature_band", "warnings", "left_out"} <= set(out)
    # the anchor: the rungs' geometric centroid, B_crit = 2·D^0.5 exactly there
    assert out["anchor_b_crit"] == pytest.approx(2.0 * out["anchor_samples"] ** 0.5, rel=1e-6)
    assert out["rungs_exponent"] == pytest.approx(0.5, abs=0.01) and out["source"] == "combined"
    assert out["warnings"] == [] and out["left_out"] == []
    assert out["b_crit"] == pytest.approx(out["anchor_b_crit"] * (16384 / out["anchor_samples"]) ** out["exponent"])
    lo, hi = out["interval_90"]
    assert lo < out["b_crit"] < hi and out["literature_band"][0] < out["literature_band"][1]


def test_b_crit_rows_and_the_text_output(tmp_path, capsys):
    path = tmp_path / "b.csv"
    path.write_text("samples,b_crit,b_crit_low,b_crit_high\n1024,20,15,27\n")  # one rung: the prior's answer
    assert predict_main([str(path), "--budget-samples", "8192"]) == 0
    out = capsys.readouterr().out
    assert "source: prior" in out and "recommended batch" in out and "mccandlish" in out


def test_no_anchor_is_a_refusal_with_its_reason(tmp_path, capsys):
    path = tmp_path / "b.csv"
    path.write_text("samples,b_crit,b_crit_low,b_crit_high\n32768,20,,\n")
    assert predict_main([str(path), "--budget-samples", "8192", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["b_crit"] is None and out["refusal"].startswith("no anchor")


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("samples,batch_size\n1,2\n", "expected ['samples', 'batch_size', 'steps']"),
    ("samples,batch_size,steps\n", "a header and no rows"),
    ("samples,batch_size,steps\n100,8,abc\n", "line 2: steps 'abc' is not a number"),
    ("samples,batch_size,steps\n100,8,-3\n", "finite positive"),
    ("samples,batch_size,steps\n100,8,nan\n", "finite positive"),
    ("samples,batch_size,steps\n100,8.5,3\n", "not a whole number"),
    ("samples,batch_size,steps\n100,8,3\n100,8,4\n", "appears twice"),
    ("samples,batch_size,steps\n100,8,3,9\n", "more values than the header"),
    ("samples,b_crit,b_crit_low,b_crit_high\n100,50,10,20\n", "outside [b_crit_low, b_crit_high]"),
    ("samples,b_crit,b_crit_low,b_crit_high\n100,50,,\n100,60,,\n", "appears twice"),
])
def test_a_bad_csv_is_one_line_and_exit_2(tmp_path, capsys, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    assert predict_main([str(path), "--budget-samples", "8192"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_files_and_arguments_are_one_line_and_exit_2(tmp_path, capsys):
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00bad")
    for argv, message in [([str(tmp_path / "missing.csv"), "--budget-samples", "10"], "no such file"),
                          ([str(tmp_path), "--budget-samples", "10"], "is a folder"),
                          ([str(binary), "--budget-samples", "10"], "not a UTF-8"),
                          ([str(binary), "--budget-samples", "-1"], "finite positive"),
                          ([str(binary)], "the budget is required: --budget-samples")]:
        assert predict_main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (argv, err)


def test_the_command_answers_8_rungs_within_1_s(tmp_path):
    path = steps_csv(tmp_path, lambda d: 3.0 * d ** 0.6)
    # the command's own CPU time (user + system: interpreter start, imports, 8 rungs' bootstraps), which a loaded
    # shared machine does not inflate as it does the wall clock
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    script = "import sys; from cbs_ray.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", script, "predict", str(path), "--budget-samples", "16384", "--json"],
                          capture_output=True, text=True, timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert done.returncode == 0, done.stderr
    assert math.isfinite(json.loads(done.stdout)["b_crit"])
    assert cpu <= 1.0, cpu


def test_off_grid_rungs_are_shown_and_left_out(tmp_path, capsys):
    # the batches run 8…128: rungs whose B_crit = 0.1·D^0.9 lies above 128 are the tradeoff's extrapolation
    path = steps_csv(tmp_path, lambda d: 0.1 * d ** 0.9)
    assert predict_main([str(path), "--budget-samples", "16384", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    off = [d for d in RUNGS if 0.1 * d ** 0.9 > 128]
    assert [r["samples"] for r in out["left_out"]] == off and off == [2944, 3200]
    assert all("above the largest batch trained (128)" in r["reason"] for r in out["left_out"])
    assert out["rungs_used"] == len(RUNGS) - len(off)
    assert predict_main([str(path), "--budget-samples", "16384"]) == 0
    text = capsys.readouterr().out
    assert text.count("left out: rung at") == 2 and "warning: 2 of 8 rung(s) left out" in text


def test_a_flat_rung_set_warns_in_one_line_and_in_the_json(tmp_path, capsys):
    path = tmp_path / "flat.csv"
    path.write_text("samples,b_crit,b_crit_low,b_crit_high\n" + "".join(
        f"{d},{15 * math.exp(e):.4f},,\n" for d, e in zip(RUNGS, [0.05, -0.05, 0.02, -0.03, 0.0, 0.04, -0.04, 0.01])))
    assert predict_main([str(path), "--budget-samples", "16384"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning: flat or falling")]
    assert len(lines) == 1
    assert predict_main([str(path), "--budget-samples", "16384", "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert len([w for w in warnings if w.startswith("flat or falling")]) == 1


def test_budget_tokens_equals_budget_samples_at_t_over_s(tmp_path, capsys):
    path = steps_csv(tmp_path, lambda d: 2.0 * d ** 0.5)
    assert predict_main([str(path), "--budget-samples", "16384", "--json"]) == 0
    by_samples = json.loads(capsys.readouterr().out)
    assert predict_main([str(path), "--budget-tokens", str(16384 * 512), "--tokens-per-sample", "512", "--json"]) == 0
    by_tokens = json.loads(capsys.readouterr().out)
    assert by_tokens["budget_samples"] == pytest.approx(16384)
    for key in ("b_crit", "exponent"):
        assert by_tokens[key] == pytest.approx(by_samples[key], rel=1e-12)
    assert by_tokens["interval_90"] == pytest.approx(by_samples["interval_90"], rel=1e-12)


@pytest.mark.parametrize("argv, message", [
    (["--budget-tokens", "1e6"], "--budget-tokens needs --tokens-per-sample"),
    (["--tokens-per-sample", "512"], "--tokens-per-sample needs --budget-tokens"),
    (["--budget-tokens", "1e6", "--tokens-per-sample", "512", "--budget-samples", "10"], "give the budget once"),
    (["--budget-tokens", "1e6", "--tokens-per-sample", "0"], "--tokens-per-sample must be a finite positive"),
    ([], "the budget is required"),
])
def test_budget_forms_given_wrongly_are_one_line_and_exit_2(tmp_path, capsys, argv, message):
    path = steps_csv(tmp_path, lambda d: 2.0 * d ** 0.5)
    assert predict_main([str(path), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_special_files_are_refused_in_one_line_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "rungs.csv"
    os.mkfifo(fifo)
    started = time.monotonic()
    for path in (fifo, "/dev/zero"):
        assert predict_main([str(path), "--budget-samples", "10"]) == 2
        err = capsys.readouterr().err
        assert "not a regular file" in err and err.count("\n") == 1
    assert time.monotonic() - started < 5


def test_a_byte_order_mark_is_read_and_a_column_mismatch_shows_repr(tmp_path, capsys):
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufeffsamples,b_crit,b_crit_low,b_crit_high\n100,20,,\n200,30,,\n400,40,,\n".encode())
    assert predict_main([str(path), "--budget-samples", "1000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rungs_used"] == 3
    path.write_text("samples,b_crit,b_crit_low,b_crit\u00a0high\n100,20,,\n")
    assert predict_main([str(path), "--budget-samples", "1000"]) == 2
    err = capsys.readouterr().err
    assert "'b_crit\\xa0high'" in err and "expected ['samples', 'batch_size', 'steps']" in err


def test_wild_but_finite_rungs_give_finite_json_or_a_one_line_refusal(tmp_path, capsys):
    path = tmp_path / "wild.csv"
    for text in ("samples,b_crit,b_crit_low,b_crit_high\n1e-300,1e300,,\n1e-200,1e-300,,\n1e300,1e-300,,\n",
                 "samples,b_crit,b_crit_low,b_crit_high\n1,1e308,1e308,1.7e308\n2,1e-308,1e-310,1e-300\n3,5,,\n"):
        path.write_text(text)
        for json_flag in ([], ["--json"]):
            code = predict_main([str(path), "--budget-samples", "1e308", *json_flag])
            out, err = capsys.readouterr()
            assert code in (0, 1) and "Traceback" not in out + err and "inf" not in out.replace("info", "")
            if json_flag:
                json.loads(out)


@pytest.mark.slow
def test_100_000_rows_are_read_linearly(tmp_path):
    # 20 000 rungs × 5 batches (the most rows a file may hold): issue 58 found 35 ms a rung, 15–19 min in all
    lines = ["samples,batch_size,steps"]
    for j in range(20_000):
        d = 1000 + j
        b_crit, e_min = 2.0 * d ** 0.5, d / 2
        lines += [f"{d},{b},{e_min / b_crit + e_min / b:.6f}" for b in (8, 16, 32, 64, 128)]
    path = tmp_path / "big.csv"
    path.write_text("\n".join(lines) + "\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    script = "import sys; from cbs_ray.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", script, "predict", str(path), "--budget-samples", "1e6", "--json"],
                          capture_output=True, text=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert done.returncode == 0, done.stderr
    assert math.isfinite(json.loads(done.stdout)["b_crit"])
    assert cpu <= 5.0, cpu
