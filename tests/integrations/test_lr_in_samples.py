"""The LR laid out in samples (issue 48): the user's warmup and decay, written for a run at the first stage's batch
B0, are read at the samples seen (in B0 steps), and the stage's multiplier goes on top, in a plain loop and an
unmodified HF Trainer. Reading them by optimizer step (the old way) runs the decay ahead of the samples."""

import math
import textwrap

import pytest
import torch
from tiny_runs import BASE_LR, MICRO, TOTAL, Recorder, TinyRegression, hf_trainer, rows, schedule

from cbs_ray.integrations import BatchSizeSchedule
from cbs_ray.integrations.torch_loop import scale_lambda_scheduler, scheduled_steps
from cbs_ray.maths.lr_schedule import lr_multiplier

MULTIPLIERS = [1.0] * 8 + [math.sqrt(2)] * 8 + [2.0] * 4
SAMPLES_BEFORE = [8 * k for k in range(8)] + [64 + 16 * k for k in range(8)] + [192 + 32 * k for k in range(4)]
B0, B0_STEPS, WARMUP = 8, TOTAL // 8, 5  # the trunk: 40 steps at B0, 5 of warmup


def trunk_shape(b0_step: int) -> float:
    return lr_multiplier(b0_step, WARMUP, B0_STEPS, decay="linear")


def test_lr_at_reads_the_shape_at_the_samples_seen_times_the_multiplier():
    s = schedule(warmup_samples=WARMUP * B0)
    assert s.warmup_steps == WARMUP and s.base_batch == B0
    # Sample 200 is in stage 2 (×2) and B0 step 25 of the trunk: (1 − (25 − 5 + 1)/(40 − 5 + 1)) × 2.
    assert s.lr_at(200) == pytest.approx((1 - 21 / 36) * 2.0)
    factor = s.lr_factor()
    assert [factor(k) for k in range(20)] == pytest.approx([trunk_shape(n // B0) * m
                                                             for n, m in zip(SAMPLES_BEFORE, MULTIPLIERS)])
    with pytest.raises(Exception, match="budget_samples"):
        BatchSizeSchedule([(0, 8)]).lr_at(0)


def test_plain_loop_lr_at_every_step_is_the_trunk_shape_at_its_samples_times_the_multiplier():
    model = TinyRegression()
    optimizer = torch.optim.AdamW(model.parameters(), lr=BASE_LR)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, trunk_shape)  # written for a run at B0
    assert scale_lambda_scheduler(scheduler, schedule())
    recorder = Recorder(model)
    recorder.watch(optimizer)
    loader = torch.utils.data.DataLoader(rows(), batch_size=MICRO)
    for step in scheduled_steps(loader, schedule()):
        for micro in step.micro_batches:
            (model(**micro)["loss"] / step.accumulation_steps).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    expected = [BASE_LR * trunk_shape(n // B0) * m for n, m in zip(SAMPLES_BEFORE, MULTIPLIERS)]
    assert [n for n, _ in recorder.records] == [8] * 8 + [16] * 8 + [32] * 4
    assert [lr for _, lr in recorder.records] == pytest.approx(expected, rel=1e-12)


def test_hf_trainers_own_linear_schedule_is_laid_out_in_samples(tmp_path):
    pytest.importorskip("accelerate")
    from transformers.optimization import _get_linear_schedule_with_warmup_lr_lambda as hf_linear

    trainer, recorder = hf_trainer(str(tmp_path), lr_scheduler_type="linear", warmup_steps=WARMUP)
    trainer.train()
    # The Trainer's linear schedule for a run at B0 (40 steps, 5 of warmup), read at each step's samples.
    expected = [BASE_LR * hf_linear(n // B0, num_warmup_steps=WARMUP, num_training_steps=B0_STEPS) * m
                for n, m in zip(SAMPLES_BEFORE, MULTIPLIERS)]
    assert [n for n, _ in recorder.records] == [8] * 8 + [16] * 8 + [32] * 4
    assert [lr for _, lr in recorder.records] == pytest.approx(expected, rel=1e-12)
    logged = [r["learning_rate"] for r in trainer.state.log_history if "loss" in r]
    assert logged == pytest.approx(expected, rel=1e-9)  # the Trainer logs the LR used


@pytest.mark.parametrize("kind", ["cosine", "constant_with_warmup"])
def test_hf_own_schedulers_are_rebuilt_for_the_run_at_b0(kind):
    pytest.importorskip("transformers")
    from transformers import TrainingArguments
    from transformers.optimization import get_scheduler

    from cbs_ray.integrations.hf import at_base_batch

    args = TrainingArguments(output_dir="unused", max_steps=20, warmup_steps=0.25, lr_scheduler_type=kind,
                             use_cpu=True, report_to="none")
    optimizer = torch.optim.SGD(TinyRegression().parameters(), lr=BASE_LR)
    trainer_built = get_scheduler(kind, optimizer, num_warmup_steps=args.get_warmup_steps(20), num_training_steps=20)
    rebuilt = at_base_batch(args, schedule())(trainer_built.lr_lambdas[0])
    at_b0 = get_scheduler(kind, optimizer, num_warmup_steps=10, num_training_steps=B0_STEPS).lr_lambdas[0]
    # A quarter of the samples is 10 of the run's 40 steps at B0 (not 5 of its 20 scheduled steps).
    assert [rebuilt(k) for k in range(B0_STEPS)] == pytest.approx([at_b0(k) for k in range(B0_STEPS)])


def test_a_factor_already_laid_out_in_samples_is_not_scaled_twice():
    optimizer = torch.optim.SGD(TinyRegression().parameters(), lr=BASE_LR)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule().lr_factor(trunk_shape))
    assert scale_lambda_scheduler(scheduler, schedule())  # already laid out: left as it is
    for _ in range(10):
        optimizer.step()
        scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(BASE_LR * trunk_shape(SAMPLES_BEFORE[10] // B0) * math.sqrt(2))


def test_the_torch_loop_docstrings_loop_runs_and_sets_the_lr_laid_out_in_samples():
    # Issue 58, finding 24: the module docstring showed the per-step `group["lr"] = base_lr * step.lr_multiplier`
    # (the API before issue 48). Its loop, run as written, must set the trunk's shape at each step's samples.
    from contextlib import nullcontext
    from types import SimpleNamespace

    import cbs_ray.integrations.torch_loop as torch_loop

    snippet = torch_loop.__doc__.split("::\n", 1)[1].split("\n\n", 1)[0]
    net = TinyRegression()
    optimizer = torch.optim.AdamW(net.parameters(), lr=BASE_LR)
    recorder = Recorder(net)
    recorder.watch(optimizer)

    class Noise:
        def after_backward(self, i, step):
            pass

    names = {"torch": torch, "nullcontext": nullcontext, "scheduled_steps": scheduled_steps, "schedule": schedule(),
             "loader": torch.utils.data.DataLoader(rows(), batch_size=MICRO), "optimizer": optimizer, "ddp": False,
             "model": lambda **micro: SimpleNamespace(loss=net(**micro)["loss"]), "noise": Noise(),
             "your_shape": trunk_shape}
    exec(compile(textwrap.dedent(snippet), "torch_loop docstring", "exec"), names)
    expected = [BASE_LR * trunk_shape(n // B0) * m for n, m in zip(SAMPLES_BEFORE, MULTIPLIERS)]
    assert [lr for _, lr in recorder.records] == pytest.approx(expected, rel=1e-12)
