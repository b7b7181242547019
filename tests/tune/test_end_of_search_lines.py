"""The end of a search prints the answer first (issue 47: README says "the first line is the answer", and the output
began with the per-batch table). The driver's last step on a stored experiment (tests/golden): no Ray starts."""

import shutil
from pathlib import Path

from cbs_ray.spec.load import load_spec
from cbs_ray.tune.api import method_named
from cbs_ray.tune.driver import finish

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "experiments" / "golden-scratch-20260101-000000"


def test_the_first_line_a_search_prints_at_its_end_is_the_decision_then_the_answer(tmp_path, capsys):
    shutil.copytree(GOLDEN, tmp_path / "exp")
    result = finish(method_named("scratch"), load_spec(None, []), str(tmp_path / "exp"), tmp_path / "out")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == result.decision.text == result.summary.decision.text  # the decision first (issue 59)
    assert lines[0].startswith("Decision: train at batch ")
    assert lines[1] == result.answer.text and lines[1].startswith("Critical batch:")
    table = lines.index("Best metric per batch size at the full budget:")
    assert lines.index(next(line for line in lines if line.startswith("Recommendation:"))) < table
    assert lines[-1].startswith("Summary:")
