"""Lightning's BatchSizeScheduleCallback: the schedule 8 → 16 → 32 at step boundaries, exactly those batches
at those sample counts, the LR × √2 per doubling, and the plain-loop helper's weights."""

import math

import pytest

pytest.importorskip("lightning")
pytestmark = pytest.mark.slow  # trains a tiny GPT-2 (run with -m slow, under the CPU lock)

from schedule_runs import (  # noqa: E402
    BASE_LR,
    EXPECTED_BATCHES,
    max_weight_difference,
    plain_reference,
    tiny_gpt2,
    token_rows,
    train_lightning,
)

EXPECTED_LRS = [BASE_LR * m for m in [1.0] * 8 + [math.sqrt(2)] * 8 + [2.0] * 4]


@pytest.mark.parametrize("scheduler", [True, False], ids=["lambda-lr", "no-scheduler"])
def test_lightning_trains_the_schedule_and_matches_the_plain_loop(scheduler):
    rows = token_rows()
    model = tiny_gpt2()
    run = train_lightning(model, rows, scheduler=scheduler)
    plain, plain_model = plain_reference()  # tiny_gpt2() trained by the plain loop on the same rows
    assert [n for n, _ in run.records] == EXPECTED_BATCHES
    assert [lr for _, lr in run.records] == pytest.approx(EXPECTED_LRS, rel=1e-12)
    assert run.trainer.global_step == 20
    moved = max_weight_difference(model, tiny_gpt2())
    assert max_weight_difference(model, plain_model) < 1e-4 < moved / 100
    assert [n for n, _ in plain.records] == EXPECTED_BATCHES
