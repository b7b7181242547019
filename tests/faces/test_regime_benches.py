"""Issue 57's two pre-registered benches, read without training: the acceptance's judge on hand-built runs whose
exponent and size ratio are known, and the validation's protocol (its draws, budgets in the regime, its pairing)."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import prediction_validation_regime as validation  # noqa: E402
import regime_testbed as testbed  # noqa: E402


def _run(width, parameters, b_at, at_d):
    """A hand-built kept run: rungs at 2560·√2^k samples whose B_crit is ``b_at(samples)``, B_crit ``at_d`` at D."""
    rungs = [{"samples_seen": 2560 * 2 ** (k / 2), "b_crit": b_at(2560 * 2 ** (k / 2)), "overhead_20pct": 16}
             for k in range(7)]
    return {"corpus": "markov", "width": width, "parameters": parameters, "wall_s": 1.0, "commit": "x",
            "tokens_per_sample": 16, "batch_sizes": [4, 8, 16, 32, 64, 128, 256, 512], "ladder": {"rungs": rungs},
            "prediction": {"budget_samples": 40960},
            "prediction_validation": {"measured_b_crit": at_d, "measured_overhead_20pct": 32}}


def test_the_acceptance_reads_a_known_exponent_and_leaves_out_what_it_must():
    run = _run(32, 29664, lambda d: 64 * (d / 2560) ** 0.5, 64 * 16 ** 0.5)  # B_crit ∝ D^0.5 exactly, 256 at D
    readings = testbed.readings(run)
    assert [r["left_out"] for r in readings] == [None] * 8
    assert testbed.slope([(r["samples"], r["b_crit"]) for r in readings]) == pytest.approx(0.5)
    low = _run(32, 29664, lambda d: 2.0, 256)  # below the grid's 4 at every rung: only D counts
    assert [r["left_out"] for r in testbed.readings(low)][:7] == ["below the grid (4)"] * 7
    few = testbed.readings(_run(8, 10 ** 6, lambda d: 64.0, 64.0))  # 2560·16/10⁶ = 0.04 token per parameter
    assert few[0]["left_out"] == "0.041 tokens per parameter < 1"


def test_the_acceptance_judges_every_run_and_the_size_ratio(tmp_path, capsys):
    import json

    for width, at_d in ((8, 200.0), (16, 250.0), (32, 290.0)):  # max/min 1.45 <= 1.5
        run = _run(width, {8: 5112, 16: 11760, 32: 29664}[width], lambda d: 64 * (d / 2560) ** 0.5, at_d)
        (tmp_path / f"markov-{width}.json").write_text(json.dumps(run))
    testbed.judge(tmp_path)
    out = capsys.readouterr().out
    assert "markov finding 2: B_crit at D by width {8: 200.0, 16: 250.0, 32: 290.0}: max/min 1.45 (met)" in out
    assert "acceptance: missed" in out  # the Python sources' runs are missing


def test_the_validation_draws_twelve_fresh_languages_and_two_python_sizes_in_the_regime():
    draws = validation.draws()
    markov = [d for d in draws if d.startswith("m")]
    assert len(markov) == 12 and sorted(d for d in draws if d.startswith("py")) == ["py16", "py32"]
    seeds = {next(s for s in draws[d][1] if s.startswith("data.markov_seed=")) for d in markov}
    assert len(seeds) == 12 and "data.markov_seed=1234" not in seeds and "data.markov_seed=4049" not in seeds
    # tokens per parameter at D1 (GPT-2, one layer, n_head 2, tied embeddings: V·w + T·w + 12w² + 13w + 2w)
    def parameters(vocab, length, width):
        return vocab * width + length * width + 12 * width ** 2 + 13 * width + 2 * width

    for key, (vocab, length, width) in {"markov": (512, 16, 8), "python_source:16": (256, 64, 16),
                                        "python_source:32": (256, 64, 32)}.items():
        samples, cadence = validation.BUDGETS[key]
        assert samples * length / parameters(vocab, length, width) >= 20, key
        assert samples % cadence == 0 and cadence % 256 == 0  # whole reports of the largest batch at D1


def test_the_validation_judges_each_seed_on_the_other_s_measurement():
    def row(seed, predicted, measured):
        return {"draw": "m00", "factor": 1, "seed": seed, "batch_sizes": [4, 256], "measured": measured,
                "prediction": {"b_crit": predicted, "interval_90": [predicted / 2, predicted * 2], "refusal": None,
                               "anchor_samples": 1000.0, "anchor_b_crit": 50.0, "budget_samples": 4000,
                               "literature_band": [50 * 4 ** 0.452, 50 * 4 ** 0.68]}}

    pairs = validation.pair([row(300, 100.0, 80.0), row(301, 90.0, 120.0)])
    assert [(p["seed"], p["measured_seed"], p["measured"]) for p in pairs] == [(300, 301, 120.0), (301, 300, 80.0)]
    baseline = 50 * 4 ** validation.BASELINE_EXPONENT  # the anchor carried with 0.566: 109.4
    assert pairs[0]["error"] == pytest.approx(abs(math.log2(100 / 120)))
    assert pairs[0]["baseline_error"] == pytest.approx(abs(math.log2(baseline / 120)))
    assert pairs[1]["inside"] and pairs[0]["width"] == pytest.approx(2.0)
