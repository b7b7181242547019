"""``cbs-ray predict RUNGS.csv --budget-samples D``: the ladder's predictor on rungs a user measured (issue 49), on
hand-built CSVs whose answer is known, and bad CSVs answered in one line with exit 2."""

import json
import math
import resource
import subprocess
import sys

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
    assert {"b_crit", "interval_90", "source", "exponent"} <= set(out)
    assert out["anchor_b_crit"] == pytest.approx(2.0 * 3200 ** 0.5, rel=1e-6)
    assert out["exponent"] == pytest.approx(0.5, abs=0.02) and out["source"] == "rungs"
    assert out["b_crit"] == pytest.approx(2.0 * 16384 ** 0.5, rel=0.03)
    lo, hi = out["interval_90"]
    assert lo < out["b_crit"] < hi


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
    ("samples,batch_size\n1,2\n", "expected samples,batch_size,steps"),
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
                          ([str(binary)], "required: --budget-samples")]:
        assert predict_main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (argv, err)


def test_the_command_answers_8_rungs_within_2_s(tmp_path):
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
    assert cpu <= 2.0, cpu
