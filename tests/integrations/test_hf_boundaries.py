"""Stage starts and epoch ends in an unmodified HF Trainer (issue 48): a linear ramp 8, 12, 16, 20, 24 whose
starts are not multiples of their batches trains with each start deferred to the next valid boundary (said once),
and an epoch end that cuts steps short is named once, each step with its samples, and the run reaches max_steps."""

import itertools
import logging

import pytest
from tiny_runs import hf_trainer, rows

from cbs_ray.integrations import BatchSizeSchedule

pytest.importorskip("accelerate")


def test_a_linear_ramp_is_deferred_to_valid_boundaries_and_trained_exactly(tmp_path, caplog):
    with pytest.warns(UserWarning, match="budget_samples 288 ends inside step 17"):  # a plain loop's steps: 284, 308
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


CUT = [8] * 8 + [16, 16, 4] + [16] * 5 + [16, 4] + [32, 32]
"""Samples per step of 8 → 16 → 32 (20 steps) over 100-sample epochs at micro-batch 4, by the Trainer's rule: step
10 is the first epoch's last micro-batch; in the second, step 16 (accumulation 8 from micro-batch 20) ends at 24, a
multiple of 8, and step 17 is the epoch's last micro-batch."""


def test_an_epoch_end_that_cuts_a_step_is_named_and_the_trainer_reaches_max_steps(tmp_path, caplog):
    from transformers import TrainerCallback

    pulled: list[int] = []  # micro-batches the Trainer divided each step's loss by (its prefetched chunk)

    class Pulled(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            pulled.append(trainer.current_gradient_accumulation_steps)

    trainer, recorder = hf_trainer(str(tmp_path), data=rows(100), callbacks=[Pulled()])  # 100 samples an epoch
    with caplog.at_level(logging.WARNING, logger="cbs_ray.integrations.hf"):
        trainer.train()
    said = [r.getMessage() for r in caplog.records if "epoch's end" in r.getMessage()]
    assert len(said) == 1 and "step 10 trains 4 samples, not its stage's 16; step 16 trains 16 samples, not its " \
        "stage's 32; step 17 trains 4 samples, not its stage's 32" in said[0]
    # All 20 steps (the Trainer counted 2 epochs at accumulation 2 and stopped at step 18), each of the size named.
    assert trainer.state.global_step == 20 and [n for n, _ in recorder.records] == CUT
    logged = [r["effective_batch_size"] for r in trainer.state.log_history if "loss" in r]
    assert logged == CUT
    # samples_seen counts what trained (issue 58, finding 10: it said 320 where 264 trained), and so does the rate.
    seen = [r["samples_seen"] for r in trainer.state.log_history if "loss" in r]
    assert seen == list(itertools.accumulate(CUT)) and seen[-1] == 264
    final = trainer.state.log_history[-1]
    assert final["train_samples_per_second"] == pytest.approx(264 / final["train_runtime"], rel=1e-2)
    # Each step's loss divided by its own micro-batches: steps 16 and 17 were one chunk of 5, both divided by 5.
    assert [4 * n for n in pulled] == CUT
