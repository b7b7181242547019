"""Issue 60's validation protocol (bench/schedule_validation_regime.py), checked by arithmetic without running it:
≥ 8 settings drawn without outcomes, every one at ≥ 20 tokens per parameter, the rules on the same controls, the
dense tuned frontier, and a verdict that pools hand-built runs with the answer known."""

import sys

import pytest

from helpers.paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import schedule_validation_regime as sv  # noqa: E402


def test_every_setting_is_at_least_20_tokens_per_parameter_and_there_are_8():
    settings = sv.settings()
    assert len(settings) >= 8
    for name, (corpus, factor, _) in settings.items():
        # budget samples × tokens per sample ÷ the width's parameters (markov n_embd 8: 5 112; Python n_embd 16: 8 432)
        assert sv.tokens_per_parameter(corpus, factor) >= sv.MIN_TOKENS_PER_PARAMETER, name
        assert sv.budget_samples(corpus, factor) % sv.CADENCE == 0
    assert sv.tokens_per_parameter("markov", 1) == pytest.approx(6912 * 16 / 5112)
    assert sv.tokens_per_parameter("python_source", 1) == pytest.approx(3072 * 64 / 8432)
    assert {f for c, f, _ in settings.values()} == {1, 2}  # two budgets, on both corpora
    assert {c for c, _, _ in settings.values()} == {"markov", "python_source"}


def test_the_markov_draws_are_fresh_and_cover_the_knob_grid():
    draws = [s for c, _, s in sv.settings().values() if c == "markov"]
    seeds = {int(s[0].split("=")[1]) for s in draws}
    assert len(seeds) == 6 and not seeds & {1234, 7}  # the development languages
    knobs = {(s[1].split("=")[1], s[2].split("=")[1]) for s in draws}
    assert knobs == {(a, c) for a in ("1", "1.5", "2") for c in ("2", "3")}


def test_every_rule_runs_the_dense_frontier_on_the_first_rule_s_controls_with_a_decaying_lr():
    first, *rest = sv.RULES
    assert first == "fitted" and set(rest) == {"once_per_crossing", "seesaw"}
    for rule in sv.RULES:
        sets = sv.overrides("m0", rule, "/kept/controls")
        assert "branch.frontier=dense" in sets and "training.lr_decay=cosine" in sets
        assert "branch.validation_seeds=5" in sets and "branch.controls_from=/kept/controls" in sets
    assert "branch.controls_from=scratch" in sv.overrides("m0", first)


def test_the_verdict_needs_every_setting_non_inferior_and_25_percent_pooled(capsys):
    results = {f"s{i}": {"per_seed": {1: 0.3, 2: 0.35, 3: 0.3, 4: 0.32, 5: 0.31}, "non_inferior": True,
                         "batches": [8, 12, 16]} for i in range(8)}
    sv.verdict("fitted", results, expected=8)
    out = capsys.readouterr().out
    assert "every setting: True" in out and "met True" in out
    results["s3"]["non_inferior"] = False
    sv.verdict("fitted", results, expected=8)
    assert "every setting: False (not on s3)" in capsys.readouterr().out
    sv.verdict("fitted", {k: v for k, v in results.items() if k != "s3"}, expected=8)  # a missing setting
    assert "every setting: False" in capsys.readouterr().out
