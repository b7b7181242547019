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


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    """The stored experiments with their metadata read and written again by this cbs-ray: the method's record under
    its own key (``ExperimentMeta.method_record``), not flat beside the fields as the stored files have it."""
    import json

    from cbs_ray.records.meta import ExperimentMeta

    experiments = make_golden.copy_experiments(tmp_path_factory.mktemp("rewritten") / "experiments")
    for meta in experiments.glob("*/cbs_spec.json"):
        ExperimentMeta.read(str(meta.parent)).write(str(meta.parent))
    branch = json.loads((experiments / make_golden.NAMES["branch"] / "cbs_spec.json").read_text())
    assert "trunk_batch" in branch["method_record"] and "trunk_batch" not in branch  # the test can fail
    return experiments


@pytest.mark.parametrize("method", ["branch", "ladder"])  # the methods that record one (scratch's is empty)
def test_the_report_reads_the_methods_record_in_either_layout_the_same(method, rewritten, tmp_path):
    got = make_golden.reported(method, rewritten, tmp_path / "out")
    for name, text in got.items():
        expected = (make_golden.EXPECTED / method / name).read_text()
        assert not report_differences(name, text, expected), f"{method}: {name} differs in the record's layout"

