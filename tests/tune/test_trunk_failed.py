"""Issue 40 row 6: a branch search whose trunk failed for good is told apart from one whose trunk finished
(hand-built histories; the e2e test in tests/e2e/test_trunk_lost.py kills a real trunk)."""

import pandas as pd
import pytest

from cbs_ray.methods.branch.report import TrunkFailed, trunk_lost
from cbs_ray.records.columns import Column
from cbs_ray.records.storage import ReportError

BUDGET = 4096


def _history(trunk_reached: int, trunk_flagged: bool = False) -> pd.DataFrame:
    rows = [{Column.role: "trunk", Column.samples_seen: s, Column.failed: trunk_flagged}
            for s in range(1024, trunk_reached + 1, 1024)]
    rows += [{Column.role: "branch", Column.samples_seen: 3072, Column.failed: False}]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("history, failed_roles, lost", [
    (_history(2048), {"trunk"}, 2048),  # killed: an error file, Tune's state still says running
    (_history(2048, trunk_flagged=True), set(), 2048),  # Tune's ERROR
    (_history(BUDGET), {"trunk"}, None),  # failed once, restarted from a checkpoint and finished
    (_history(BUDGET), set(), None),
    (_history(2048), {"branch"}, None),  # a branch failed: the trunk is fine
    (pd.DataFrame({Column.role: ["branch"], Column.samples_seen: [3072]}), {"trunk"}, 0),  # died before reporting
])
def test_a_trunk_that_failed_for_good_is_found(history, failed_roles, lost):
    assert trunk_lost(history, failed_roles, BUDGET) == lost


def test_a_failed_trunk_is_a_report_error_the_command_line_ends_in_one_line():
    assert issubclass(TrunkFailed, ReportError)


def test_the_trunks_end_marker_says_it_failed(tmp_path):
    from cbs_ray.methods.branch.report import failed_roles
    from cbs_ray.train.checkpoint import mark_trunk_done

    checkpoints = tmp_path / "trunk_checkpoints"
    mark_trunk_done(str(checkpoints), "4096")  # finished
    assert "trunk" not in failed_roles(str(tmp_path), str(checkpoints))
    mark_trunk_done(str(checkpoints), "failed")  # methods.branch.trunk_watch, once Tune gave up on it
    assert "trunk" in failed_roles(str(tmp_path), str(checkpoints))
