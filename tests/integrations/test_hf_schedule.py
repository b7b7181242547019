"""BatchSizeScheduleCallback in an unmodified HF Trainer: the schedule 8 → 16 → 32 trains exactly those batches
at exactly those sample counts, with the LR × √2 per doubling, and ends on the plain-loop helper's weights."""

import math

import pytest

pytest.importorskip("accelerate")
pytestmark = pytest.mark.slow  # trains a tiny GPT-2 (run with -m slow, under the CPU lock)

from schedule_runs import (  # noqa: E402
    BASE_LR,
    EXPECTED_BATCHES,
    max_weight_difference,
    plain_reference,
    tiny_gpt2,
    token_rows,
    train_hf,
)

EXPECTED_LRS = [BASE_LR * m for m in [1.0] * 8 + [math.sqrt(2)] * 8 + [2.0] * 4]


def test_plain_loop_helper_trains_the_schedule():
    recorder, _ = plain_reference()
    assert [n for n, _ in recorder.records] == EXPECTED_BATCHES
    assert [lr for _, lr in recorder.records] == pytest.approx(EXPECTED_LRS, rel=1e-12)


def test_hf_trainer_trains_the_schedule_and_matches_the_plain_loop(tmp_path):
    rows = token_rows()
    hf_model = tiny_gpt2()
    hf = train_hf(hf_model, rows, str(tmp_path))
    _, plain_model = plain_reference()  # tiny_gpt2() trained by the plain loop on the same rows
    assert [n for n, _ in hf.records] == EXPECTED_BATCHES  # samples seen per optimizer step
    assert [lr for _, lr in hf.records] == pytest.approx(EXPECTED_LRS, rel=1e-12)
    state = hf.trainer.state
    assert state.global_step == 20
    logged = [r for r in state.log_history if "loss" in r]
    assert [r["effective_batch_size"] for r in logged] == EXPECTED_BATCHES
    assert [r["learning_rate"] for r in logged] == pytest.approx(EXPECTED_LRS)  # the trainer logs the scaled LR
    assert logged[-1]["samples_seen"] == 320
    # The same weights within float32 Adam's rounding: far below what training moved them by.
    moved = max_weight_difference(hf_model, tiny_gpt2())
    assert max_weight_difference(hf_model, plain_model) < 1e-4 < moved / 100
