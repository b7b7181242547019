"""``--dry-run`` states the model's parameters and the tokens per parameter at D and at the ladder's rungs: the figure
that places a run in the regime pre-training runs in (~20 at D)."""

from cbs_ray.spec.load import load_spec
from cbs_ray.tune.api import dry_run_lines


def test_the_markov_space_states_its_tokens_per_parameter_at_d_and_at_each_rung():
    lines = list(dry_run_lines(load_spec("search_spaces/markov_lm.yaml", ["search.method=ladder"])))
    # a 1-layer, 32-wide GPT-2 over 512 tokens of 16 positions: 512·32 + 16·32 + (12·32² + 13·32) + 2·32 = 29 664;
    # D = 40 960 samples of 16 tokens = 655 360 tokens = 22.09 per parameter
    assert "model: 29,664 parameters; 22.1 tokens per parameter at D (40960 samples of 16 tokens)" in lines
    rungs = next(line for line in lines if line.startswith("  tokens per parameter at each rung: "))
    assert rungs.split(": ")[1].split(", ")[0] == "1.4"  # 2560 samples · 16 / 29 664 = 1.38


def test_a_run_below_the_regime_says_so_and_padded_samples_state_no_tokens():
    from cbs_ray.sources.model import model_config
    from cbs_ray.tune.prepare import Prepared, regime_lines, spec_model

    spec = load_spec("search_spaces/markov_lm.yaml", [])
    config = model_config(spec_model(spec), spec.task, vocab_size=512, num_labels=0, pad_id=0, max_seq_length=16)
    # 10 240 samples of 16 tokens over 29 664 parameters: 5.52 per parameter
    assert regime_lines(spec, Prepared(None, 10240, config)) == [
        "model: 29,664 parameters; 5.5 tokens per parameter at D (10240 samples of 16 tokens) — below the ~20 "
        "pre-training runs at"]
    spec.data.builtin_task = "sentiment"  # padded sentences: no token count per sample
    assert regime_lines(spec, Prepared(None, 10240, config)) == [
        "model: 29,664 parameters (tokens per parameter not stated: padded samples)"]


def test_the_dry_run_states_the_passes_over_the_corpus_and_warns_past_one():
    """Issue 59: a 65 536-sample budget over a 12 288-row corpus passes 5.33 times; the markov space's 40 960 samples
    over its 163 840 training sequences pass a quarter of the way; the ladder's rungs each their share."""
    from cbs_ray.tune.prepare import corpus_pass_lines

    lines = corpus_pass_lines(12288, 65536)
    assert lines[0] == "data: 5.33 passes over the 12,288 training examples at D (65536 samples)"
    assert lines[1].startswith("  warning: the budget passes 5.33 times over the training set") and "12288" in lines[1]
    assert corpus_pass_lines(12288, 12288) == ["data: 1 passes over the 12,288 training examples at D (12288 samples)"]
    assert corpus_pass_lines(None, 65536) == []
    markov = list(dry_run_lines(load_spec("search_spaces/markov_lm.yaml", ["search.method=ladder"])))
    passes = next(line for line in markov if line.startswith("data: "))
    assert passes.startswith("data: 0.25 passes over the 163,840 training examples at D (40960 samples), 0.016, ")
    assert not any("warning: the budget passes" in line for line in markov)


def test_the_evaluation_line_states_the_examples_the_evaluation_set_really_has():
    """Issue 59: "the evaluation set's first 4096 examples" where the set has 1024 was false."""
    from cbs_ray.methods.scratch.search import search_outline_lines

    spec = load_spec(None, [])
    small = search_outline_lines(spec, 7168, eval_examples=1024)[-1]
    assert small == ("  evaluation: every report on all 1024 examples of the evaluation set (training."
                     "eval_subset_examples 4096 is at least the set)")
    large = search_outline_lines(spec, 7168, eval_examples=24576)[-1]
    assert large.startswith("  evaluation: reports before the last on the evaluation set's first 4096 examples")
    default = list(dry_run_lines(spec))  # the default space's 24 576 evaluation examples: the subset holds
    assert any("evaluation set's first 4096 examples" in line for line in default)
