"""Stage starts and epoch ends in an unmodified HF Trainer (issue 48): a linear ramp 8, 12, 16, 20, 24 whose
starts are not multiples of their batches trains with each start deferred to the next valid boundary (said once),
and an epoch end that would cut a step short is named before the first step."""

import logging

import pytest
from tiny_runs import hf_trainer, rows

from cbs_ray.integrations import BatchSizeSchedule

pytest.importorskip("accelerate")


def test_a_linear_ramp_is_deferred_to_valid_boundaries_and_trained_exactly(tmp_path, caplog):
    ramp = BatchSizeSchedule([(0, 8), (32, 12), (64, 16), (96, 20), (128, 24)], budget_samples=288)
    with caplog.at_level(logging.WARNING, logger="cbs_ray.integrations.schedule"):
        trainer, recorder = hf_trainer(str(tmp_path), plan=ramp, data=rows(288))
        trainer.train()
    deferred = ramp.for_trainers(warn=False)  # starts 0, 48, 96, 160, 240
    expected = [stage.batch_size for _, stage in deferred.steps()]
    assert expected[:7] == [8] * 6 + [12] and sum(expected) == 288
    assert [n for n, _ in recorder.records] == expected
    said = [r.getMessage() for r in caplog.records if "deferred" in r.getMessage()]
    assert len(said) == 1 and "stage 1 (batch 12) from sample 32 to 48" in said[0]


def test_an_epoch_end_that_cuts_a_step_is_named_before_the_first_step(tmp_path, caplog):
    trainer, recorder = hf_trainer(str(tmp_path), data=rows(100))  # 100 samples an epoch under 8 → 16 → 32
    with caplog.at_level(logging.WARNING, logger="cbs_ray.integrations.hf"):
        trainer.train()
    said = [r.getMessage() for r in caplog.records if "epoch" in r.getMessage()]
    assert said and "step 10 (batch 16, samples 96–112) crosses the epoch end at sample 100" in said[0]
    # The cut step trained the epoch's last 4 samples, and the log says so (not the stage's 16).
    assert recorder.records[10][0] == 4
    logged = [r["effective_batch_size"] for r in trainer.state.log_history if "loss" in r]
    assert logged[:11] == [8] * 8 + [16, 16, 4]
