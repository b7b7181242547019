"""``cbs-ray plan`` end to end on a real local Ray (issue 59): a full run of 16 384 tokens on a small markov language
(8 tokens a sample: D = 2048 samples), a from-scratch search at D too large for ``--afford-samples 1000``, so the plan
runs the ladder with D as its full budget and its last line is the ladder's decision for D."""

import json

import pytest

from cbs_ray.cli import main

pytestmark = pytest.mark.slow

SPACE = "search_spaces/markov_lm.yaml"
SMALL = ["training.eval_every_samples=1024", "asha.grace_period_samples=1024", "search.batch_sizes=[8, 16, 32, 64]",
         "search.num_trials=4", "data.builtin_eval_examples=256", "data.markov_vocab_size=64", "data.markov_rank=4",
         "data.max_seq_length=8", "model.config={model_type: gpt2, n_embd: 32, n_layer: 1, n_head: 2, n_positions: 8, "
         "resid_pdrop: 0.0, embd_pdrop: 0.0, attn_pdrop: 0.0}", "ladder.fraction=0.5", "ladder.seeds=1",
         "ladder.first_rung=0.0625", "ladder.min_steps=8"]


def test_the_plan_runs_the_ladder_for_d_and_ends_in_its_decision(tmp_path, shared_ray, capsys):
    sets = [a for s in SMALL + [f"storage_path={tmp_path / 'ray_results'}"] for a in ("--set", s)]
    argv = ["plan", "--space", SPACE, "--full-budget-tokens", "16384", "--afford-samples", "1000",
            "--output", str(tmp_path / "out"), *sets]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "plan: the full run: 16384 tokens = D 2048 samples of 8 tokens"
    assert "a from-scratch search at D would train 8192 samples, more than the 1000 affordable" in out[1]
    assert out[-1].startswith("Decision for the full run (16384 tokens): ")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "ladder" in summary and summary["decision"]["for_budget_samples"] == 2048
