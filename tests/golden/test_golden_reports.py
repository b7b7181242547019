"""Behaviour stays byte-identical on recorded histories (issue 35): ``summary.json``, ``report.md`` and the
printed answer of a stored from-scratch, branch and ladder experiment are what the code that wrote
``tests/golden/expected`` (``make_golden.py``) reported of them. No Ray process starts: the report reads the
trials' own files."""

import pytest

import make_golden


@pytest.fixture(scope="module")
def experiments(tmp_path_factory):
    return make_golden.copy_experiments(tmp_path_factory.mktemp("golden") / "experiments")


@pytest.mark.parametrize("method", sorted(make_golden.NAMES))
def test_the_report_of_a_stored_experiment_is_byte_identical(method, experiments, tmp_path):
    got = make_golden.reported(method, experiments, tmp_path / "out")
    for name, text in got.items():
        expected = (make_golden.EXPECTED / method / name).read_text()
        assert text == expected, f"{method}: {name} differs from tests/golden/expected/{method}/{name}"
