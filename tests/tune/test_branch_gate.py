"""No branch waits in a trial slot for a checkpoint that does not exist (issue 29 row 1): the branch search's
runs reach Tune as their checkpoints are published, and end when the trunk does."""

import pytest
from ray.tune.search import Searcher

from cbs_ray.methods.branch.gate import PublishedCheckpoints, never_started
from cbs_ray.train.checkpoint import STATE_FILE, TRUNK_DONE, mark_trunk_done

TRUNK = {"role": "trunk", "log2_batch": 3, "start_samples": 0}


def branch(start, log2_batch=5):
    return {"role": "branch", "log2_batch": log2_batch, "start_samples": start}


def publish(directory, samples):
    (directory / f"samples_{samples}").mkdir(parents=True)
    (directory / f"samples_{samples}" / STATE_FILE).write_bytes(b"state")


@pytest.fixture
def gate(tmp_path):
    return PublishedCheckpoints([TRUNK, branch(1024), branch(1024, 6), branch(2048)], str(tmp_path))


def test_the_trunk_first_then_each_branch_once_its_checkpoint_is_published(gate, tmp_path):
    assert gate.suggest("t1") == TRUNK
    assert gate.suggest("t2") is None  # nothing published: no branch takes a slot to wait in
    publish(tmp_path, 1024)
    assert [gate.suggest("t3"), gate.suggest("t4"), gate.suggest("t5")] == [branch(1024), branch(1024, 6), None]
    publish(tmp_path, 2048)
    assert gate.suggest("t6") == branch(2048)
    assert gate.suggest("t7") == Searcher.FINISHED and gate.dropped == []


def test_a_trunk_that_ends_early_drops_the_branches_it_never_wrote_a_checkpoint_for(gate, tmp_path, capsys):
    assert gate.suggest("t1") == TRUNK
    publish(tmp_path, 1024)
    mark_trunk_done(str(tmp_path), "failed")  # TrunkWatch, when the trunk fails for good
    assert (tmp_path / TRUNK_DONE).exists()
    assert [gate.suggest("t2"), gate.suggest("t3")] == [branch(1024), branch(1024, 6)]  # published before its end
    assert gate.suggest("t4") == Searcher.FINISHED and gate.dropped == [branch(2048)]
    assert never_started([TRUNK, branch(1024), branch(2048)], str(tmp_path)) == [branch(2048)]


def test_the_queue_survives_a_save_and_restore(gate, tmp_path):
    gate.suggest("t1")
    gate.save(str(tmp_path / "searcher.pkl"))
    restored = PublishedCheckpoints([], "/elsewhere")
    restored.restore(str(tmp_path / "searcher.pkl"))
    assert (restored.pending, restored.checkpoint_dir) == (gate.pending, gate.checkpoint_dir)
