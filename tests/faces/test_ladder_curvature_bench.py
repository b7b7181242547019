"""``bench/ladder_curvature.py`` on the golden ladder, whose B_crit(D) = 2·D^0.5 exactly (``tests/golden``): every
reading it prints of the exponent beyond the rungs, the one that issue 36's open question turns on, is 0.5."""

import os
import re
import subprocess
import sys

from helpers.paths import ROOT


def test_the_curvature_bench_reads_a_straight_power_law_as_one():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "ladder_curvature.py"),
                           str(ROOT / "tests" / "golden" / "expected" / "ladder" / "summary.json")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    local = [float(x) for x in re.findall(r"local exponent\s+(\d\.\d+)", done.stdout)]
    assert len(local) == 5 and all(abs(x - 0.5) <= 0.015 for x in local), done.stdout
    after = re.search(r"from the last rung to D (\d\.\d+)", done.stdout)
    assert after and abs(float(after.group(1)) - 0.5) <= 0.01, done.stdout
    longer = [float(x) for x in re.findall(r"a ladder to \d+ .*?exponent (\d\.\d+)", done.stdout)]
    assert longer and all(abs(x - 0.5) <= 0.01 for x in longer), done.stdout
    through = re.search(r"gives [\d.]+ at D -> B_crit [\d.]+ \(\|log2 err\| (\d\.\d+)", done.stdout)
    assert through and float(through.group(1)) <= 0.02, done.stdout
