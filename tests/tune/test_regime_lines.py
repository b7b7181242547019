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
