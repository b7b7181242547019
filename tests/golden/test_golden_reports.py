"""Behaviour stays the same on recorded histories (issue 35): ``summary.json``, ``report.md`` and the printed
answer of a stored from-scratch, branch and ladder experiment are what the code that wrote
``tests/golden/expected`` (``make_golden.py``) reported of them, to the tolerance another CPU's last digits need
(issue 47; the rules and why: ``tests/helpers/tolerant.py``). No Ray process starts: the report reads the
trials' own files."""

import make_golden
import pytest

from helpers.tolerant import report_differences


@pytest.fixture(scope="module")
def experiments(tmp_path_factory):
    return make_golden.copy_experiments(tmp_path_factory.mktemp("golden") / "experiments")


@pytest.mark.parametrize("method", sorted(make_golden.NAMES))
def test_the_report_of_a_stored_experiment_is_the_golden_one_to_its_tolerance(method, experiments, tmp_path):
    got = make_golden.reported(method, experiments, tmp_path / "out")
    for name, text in got.items():
        expected = (make_golden.EXPECTED / method / name).read_text()
        differences = report_differences(name, text, expected)
        assert not differences, f"{method}: {name} differs from tests/golden/expected/{method}/{name}: " + \
            "; ".join(differences[:5])
