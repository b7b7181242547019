"""Issue 58 finding 3: a FIFO named ``*.parquet`` in ``data.path`` blocked ``search --dry-run`` forever, before Ray
(the schema read opened it and waited for a writer). Every listed shard must be a regular file (a link to one is),
checked before anything opens it; anything else is one line naming the shard, exit 2."""

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.spec.scale_rules import parquet_shards

REPO = Path(__file__).resolve().parents[2]


def spec_args(path) -> list[str]:
    return ["task=causal-lm", "model.config={model_type: gpt2, n_embd: 32, n_layer: 1, n_head: 2, n_positions: 16}",
            "model.vocab_size=512", "data.source=parquet", f"data.path={path}", "data.max_seq_length=16",
            "data.eval_examples=2", "search.metric=eval_loss", "search.mode=min", "search.batch_sizes=[8, 32]",
            "training.budget_samples=128", "training.eval_every_samples=64", "asha.grace_period_samples=64",
            "search.num_trials=2", "training.micro_batch_size=8"]


def _corpus(folder):
    folder.mkdir(exist_ok=True)
    for name in ("a.parquet", "zz.parquet"):
        pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4, 5, 6]]}), folder / name)
    return folder


def test_a_fifo_shard_fails_the_dry_run_in_one_line_instead_of_blocking(tmp_path):
    corpus = _corpus(tmp_path / "corpus")
    os.mkfifo(corpus / "b.parquet")
    try:  # its own process, so that a blocked open fails the test instead of hanging it
        result = subprocess.run([sys.executable, "-m", "cbs_ray.search", "--dry-run",
                                 *[a for arg in spec_args(corpus) for a in ("--set", arg)]],
                                capture_output=True, text=True, cwd=tmp_path, timeout=60,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    except subprocess.TimeoutExpired:
        pytest.fail("search --dry-run blocked on a FIFO named b.parquet")
    assert result.returncode == 2, result.stderr[-500:]
    assert f"data.path: {corpus / 'b.parquet'} is a FIFO" in result.stderr
    assert result.stderr.strip().count("\n") == 0


@pytest.mark.parametrize("plant, says", [
    ("fifo", "is a FIFO"), ("folder", "is a folder"), ("dangling", "cannot read the shard"),
])
def test_a_shard_that_is_not_a_regular_file_is_named(tmp_path, plant, says):
    corpus = _corpus(tmp_path)
    planted = corpus / "b.parquet"
    if plant == "fifo":
        os.mkfifo(planted)
    elif plant == "folder":
        planted.mkdir()
    else:
        planted.symlink_to(tmp_path / "gone.parquet")
    with pytest.raises(SpecError, match=f"data.path: .*({says}.*b.parquet|b.parquet {says})") as error:
        load_spec(None, spec_args(corpus))
    assert "\n" not in str(error.value)


def test_a_link_to_a_regular_shard_is_a_shard(tmp_path):
    corpus = _corpus(tmp_path / "corpus")
    (corpus / "b.parquet").symlink_to(corpus / "a.parquet")
    assert [p.name for p in parquet_shards(str(corpus))] == ["a.parquet", "b.parquet", "zz.parquet"]
