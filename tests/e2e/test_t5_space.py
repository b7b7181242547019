"""The shipped T5 space (search_spaces/tiny_t5_cpu.yaml) end to end on a real local Ray, through the CLI's
``search`` command, run in this process on the tests' shared Ray (the encoder-decoder's unit tests are in
tests/sources/test_seq2seq.py)."""

import json

import pytest

from cbs_ray.cli import main
from helpers.paths import SEARCH_SPACES


@pytest.mark.slow  # ≈ 35 s on 2 cores: CI runs it in its `pytest -m slow` step beside plain pytest (issue 25)
def test_the_t5_space_answers_a_critical_batch_end_to_end(tmp_path, shared_ray, capsys):
    """The shipped space through the CLI, shrunk to two batch sizes and one trial each (a real local Ray)."""
    out = tmp_path / "out"
    shrink = ["search.batch_sizes=[16, 32]", "search.num_trials=2", "search.repeats=1", "training.budget_samples=2048",
              "training.eval_every_samples=1024", "asha.grace_period_samples=1024",
              "data.builtin_train_examples=2048", "data.builtin_eval_examples=256", f"storage_path={tmp_path / 'rr'}"]
    args = [a for o in shrink for a in ("--set", o)]
    code = main(["search", "--space", str(SEARCH_SPACES / "tiny_t5_cpu.yaml"), *args, "--output", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["critical_batch"]["batch_size"] in (16, 32)
    assert all(0.0 <= r["best_bleu"] <= 100.0 for r in summary["per_batch"])
    assert "Critical batch" in printed.out and (out / "report.html").is_file()
