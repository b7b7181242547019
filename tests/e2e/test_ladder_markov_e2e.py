"""The ladder on the built-in markov language end to end on a real local Ray (issue 36): every run read through the
average of its iterates, the smallest batch stopped at D and every other once it reached the smallest batch's loss
there (or the cap), the exact excess loss read, summary.json's ``ladder.reading`` and ``ladder.exponent_se``."""

import json

import pandas as pd
import pytest

from cbs_ray.spec.load import load_spec

pytestmark = pytest.mark.slow

SPACE = "search_spaces/markov_lm.yaml"
# A small language (V = 64, r = 4, 8 tokens) and a 1-layer, 32-wide GPT at D = 2048: batches 8…64, one seed, the
# smallest to half of D for the ladder (its rungs 256…1024) and to D for the validation; every other batch until
# it reaches the smallest one's excess loss at D, at most 4·D.
SMALL = ["search.method=ladder", "training.budget_samples=2048", "training.eval_every_samples=1024",
         "asha.grace_period_samples=1024", "search.batch_sizes=[8, 16, 32, 64]", "search.num_trials=4",
         "data.builtin_eval_examples=256", "data.markov_vocab_size=64", "data.markov_rank=4", "data.max_seq_length=8",
         "model.config={model_type: gpt2, n_embd: 32, n_layer: 1, n_head: 2, n_positions: 8, resid_pdrop: 0.0, "
         "embd_pdrop: 0.0, attn_pdrop: 0.0}", "ladder.fraction=0.5", "ladder.seeds=1", "ladder.first_rung=0.0625",
         "ladder.min_steps=8", "ladder.validate=true",
         # one trial at a time, the smallest batch first: its loss at D (the others' target) is known before they run.
         # Side by side, a larger batch reached the cap before the smallest had reported at D on a loaded box, and
         # went on past a target it had crossed (the stop counts crossings only once the target is known).
         "resources.max_concurrent_trials=1"]


@pytest.fixture(scope="module")
def ladder(tmp_path_factory, shared_ray):
    from cbs_ray import run_search

    root = tmp_path_factory.mktemp("markov-ladder")
    spec = load_spec(SPACE, SMALL + [f"storage_path={root / 'ray_results'}", f"output_dir={root / 'out'}"])
    return run_search(spec, verbose=0), root / "out"


def test_the_markov_ladder_reads_the_average_and_stops_each_batch_at_its_target(ladder):
    summary, out = ladder
    d = json.loads((out / "summary.json").read_text())
    lad, v = d["ladder"], d["prediction_validation"]
    assert d["metric"] == "excess_loss" and lad["reading"] == "ewa" and lad["column"] == "ewa_excess_loss"
    assert "exponent_se" in lad and (lad["exponent_se"] is None) == (lad["exponent"] is None or
                                                                     len(lad["rungs_used"]) < 3)
    assert all("censored" in r for r in lad["rungs"])
    # the space's warmup floor (8 steps: B=64 has 16 to the fraction, 0.05 of which would be 1) reached the runs, and
    # the rungs counted S(B) by the LR
    assert lad["step_count"] == "lr_weighted" and lad["warmup_steps"]["64"] == 8 and lad["warmup_steps"]["8"] == 8
    assert {"measured_b_crit", "within_interval", "log2_error", "samples_ratio", "baselines",
            "b_simple_prediction"} <= set(v)
    history = pd.read_csv(out / "history.csv")
    assert {"excess_loss", "ewa_excess_loss", "eval_loss", "ewa_eval_loss"} <= set(history.columns)
    assert (history["excess_loss"] > 0).all() and (history["ewa_excess_loss"] > 0).all()
    assert set(history[history.batch_size == 64]["warmup_steps"]) == {8}
    last = history.groupby("batch_size")["samples_seen"].max()
    assert last[8] == 2048                                  # the smallest batch: to D, not beyond
    target = history[(history.batch_size == 8) & (history.samples_seen == 2048)]["ewa_excess_loss"].iloc[0]
    for batch in (16, 32, 64):  # every other: until it reached that loss (or went on to 4·D = 8192, never further)
        run = history[history.batch_size == batch].sort_values("samples_seen")
        reached = run[run.ewa_excess_loss <= target]
        # stopped once it had reached it (at its crossing, or a few evaluations later where the smallest batch's
        # loss at D was not known yet: the two runs train side by side), never at the cap having reached it early
        assert len(reached) == 0 and last[batch] == 8192 or reached.samples_seen.iloc[0] <= last[batch] < 8192
    assert v["samples_ratio"] is not None and 0 < v["samples_ratio"] < 1
