"""Epoch ends never make a step another size than its stage's without a warning naming it (issue 48, defect 5):
the shared walk (``integrations.epoch_steps``) against hand-counted steps, and the plain loop, whose steps run on
across epoch ends but take in an epoch's short last micro-batch. HF Trainer and Lightning: test_hf_boundaries.py,
test_lightning_details.py."""

import logging

import torch
from tiny_runs import STAGES, rows

from cbs_ray.integrations import BatchSizeSchedule
from cbs_ray.integrations.epoch_steps import odd_steps_at_epoch_ends, short_micro_batch_steps, trainer_position
from cbs_ray.integrations.torch_loop import scheduled_steps


def test_the_trainers_rule_gives_the_cut_steps_and_the_epochs_to_max_steps():
    s = BatchSizeSchedule(STAGES, budget_samples=320)  # 8 × 8, 8 × 16, 4 × 32: 20 steps
    walk = odd_steps_at_epoch_ends(s, micro_batch=4, world_size=1, epoch_micro_batches=25, max_steps=20)
    assert [(o.step, o.samples, o.batch_size) for o in walk.odd] == [(10, 4, 16), (16, 16, 32), (17, 4, 32)]
    assert walk.epochs == 3 and walk.samples_at(16) == 16 and walk.samples_at(15) is None
    whole = odd_steps_at_epoch_ends(s, micro_batch=4, world_size=1, epoch_micro_batches=32, max_steps=20)
    assert whole.odd == [] and whole.epochs == 3  # 128 samples an epoch: a multiple of every batch
    two = odd_steps_at_epoch_ends(s, micro_batch=2, world_size=2, epoch_micro_batches=25, max_steps=20)
    assert [(o.step, o.samples) for o in two.odd] == [(10, 4), (16, 16), (17, 4)]  # samples of both processes
    # Where a resumed Trainer skips to: (epochs done, micro-batches into the epoch), the cut steps counted as drawn.
    where = {k: trainer_position(s, micro_batch=4, world_size=1, epoch_micro_batches=25, step=k)
             for k in (4, 11, 17, 18)}
    assert where == {4: (0, 8), 11: (1, 0), 17: (1, 24), 18: (2, 0)}


def test_the_samples_before_a_step_count_what_the_cut_steps_trained():
    # Issue 58, finding 10: 264 of 320 samples trained (test_hf_boundaries.CUT) while samples_seen said 320.
    s = BatchSizeSchedule(STAGES, budget_samples=320)
    walk = odd_steps_at_epoch_ends(s, micro_batch=4, world_size=1, epoch_micro_batches=25, max_steps=20)
    cut = [8] * 8 + [16, 16, 4] + [16] * 5 + [16, 4] + [32, 32]
    assert [walk.samples_before_step(s, k) for k in range(21)] == [sum(cut[:k]) for k in range(21)]
    assert walk.samples_before_step(s, 20) == 264 and s.samples_before_step(20) == 320


def test_the_plain_loop_names_the_steps_that_hold_a_short_last_micro_batch(caplog):
    s = BatchSizeSchedule(STAGES, budget_samples=320)
    loader = torch.utils.data.DataLoader(rows(102), batch_size=4)  # 26 micro-batches an epoch, the last of 2
    with caplog.at_level(logging.WARNING, logger="cbs_ray.integrations.torch_loop"):
        trained = [sum(int(m["x"].shape[0]) for m in step.micro_batches) for step in scheduled_steps(loader, s)]
    said = [r.getMessage() for r in caplog.records if "short last micro-batch" in r.getMessage()]
    assert len(said) == 1 and "step 10 trains 14 samples, not its stage's 16; step 16 trains 30 samples, not its " \
        "stage's 32; step 19 trains 30 samples, not its stage's 32" in said[0]
    odd = {o.step: o.samples for o in short_micro_batch_steps(s, micro_batch=4, world_size=1, epoch_samples=102,
                                                              steps=20)}
    assert trained == [odd.get(k, stage.batch_size) for k, stage in s.steps()]  # the sizes named are those trained
    # samples_before counts what the steps before trained (issue 58, finding 10), from any start_step too.
    steps = list(scheduled_steps(torch.utils.data.DataLoader(rows(102), batch_size=4), s))
    assert [step.samples_before for step in steps] == [sum(trained[:k]) for k in range(20)]
    resumed = scheduled_steps(torch.utils.data.DataLoader(rows(102), batch_size=4), s, start_step=17)
    assert [step.samples_before for step in resumed] == [sum(trained[:k]) for k in range(17, 20)]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cbs_ray.integrations.torch_loop"):
        list(scheduled_steps(torch.utils.data.DataLoader(rows(102), batch_size=4, drop_last=True), s))
        list(scheduled_steps(torch.utils.data.DataLoader(rows(100), batch_size=4), s))
    assert not caplog.records  # no short micro-batch: nothing to say
