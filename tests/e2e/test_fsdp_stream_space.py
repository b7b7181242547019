"""The shipped FSDP + Parquet space (search_spaces/gpt2_fsdp_stream.yaml) end to end on a real local Ray, through
the CLI's ``search`` command: each trial a Ray Train run of 2 gloo workers sharding GPT-2 with FSDP2 and reading the
corpus through Ray Data (the pieces' own tests: tests/train/test_fsdp.py, tests/data/test_parquet_stream.py). The
command runs in this process on the tests' shared Ray, which it leaves up as it does a user's own session
(``python -m cbs_ray.search`` in its own process, starting its own Ray: tests/e2e/test_end_to_end.py)."""

import json
import sys

import pytest

from cbs_ray.cli import main
from helpers.paths import ROOT, SEARCH_SPACES


@pytest.mark.slow  # two TorchTrainer runs of 2 workers: CI's `pytest -m slow` step
def test_the_fsdp_stream_space_answers_end_to_end(tmp_path, shared_ray, capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    from write_markov_parquet import write_corpus

    write_corpus(tmp_path / "corpus", shards=2, rows=512, length=64, eval_rows=128)
    out = tmp_path / "out"
    shrink = [f"data.path={tmp_path / 'corpus'}", "search.batch_sizes=[16, 32]", "search.num_trials=2",
              "training.budget_samples=256", "training.eval_every_samples=128", "asha.grace_period_samples=128",
              "data.eval_examples=128", f"storage_path={tmp_path / 'rr'}"]
    args = [a for o in shrink for a in ("--set", o)]
    code = main(["search", "--space", str(SEARCH_SPACES / "gpt2_fsdp_stream.yaml"), *args, "--output", str(out)])
    assert code == 0, capsys.readouterr().err[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(r["batch_size"] for r in summary["per_batch"]) == [16, 32]
    assert all(r["best_eval_loss"] < 6.3 for r in summary["per_batch"])  # below ln 512 = 6.24 + a margin: it trained
