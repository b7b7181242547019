"""In-run noise scale (plain hook, HF and Lightning callbacks) on a synthetic problem whose answer is known:
each sample's gradient is G + ε with |G|² = 1 and tr Σ = 64, so B_simple = 64 (McCandlish et al. 2018)."""

import math

import pytest
import torch
from torch.utils.data import DataLoader

from cbs_ray.integrations import BatchSizeSchedule
from cbs_ray.integrations.torch_loop import NoiseScaleHook, scheduled_steps

DIM, GRAD_SQ, TRACE = 1024, 1.0, 64.0
TRUE_B_SIMPLE = TRACE / GRAD_SQ
MICRO, BATCH, STEPS = 4, 32, 300
TOLERANCE = 0.10  # the target, fixed before any run


def samples(n: int, seed: int = 0) -> torch.Tensor:
    """Per-sample gradients G + ε, ε ~ N(0, σ² I) with d·σ² = tr Σ."""
    g = torch.Generator().manual_seed(seed)
    direction = torch.full((DIM,), math.sqrt(GRAD_SQ / DIM))
    return direction + torch.randn(n, DIM, generator=g) * math.sqrt(TRACE / DIM)


class Linear(torch.nn.Module):
    """loss = mean over the batch of w · x: its gradient is the batch's mean x, whatever w is."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(DIM))

    def forward(self, x, labels=None):
        return {"loss": (x @ self.w).mean()}


def test_plain_hook_measures_b_simple_within_ten_percent():
    model = Linear()
    hook = NoiseScaleHook(list(model.parameters()), micro_batch=MICRO)
    loader = DataLoader(samples(STEPS * BATCH), batch_size=MICRO)
    for step in scheduled_steps(loader, BatchSizeSchedule([(0, BATCH)], budget_samples=STEPS * BATCH)):
        for i, x in enumerate(step.micro_batches):
            (model(x)["loss"] / step.accumulation_steps).backward()
            hook.after_backward(i, step)
        model.zero_grad()
    reading = hook.reading
    assert reading.steps == STEPS
    assert reading.grad_sq == pytest.approx(GRAD_SQ, rel=TOLERANCE)
    assert reading.trace_sigma == pytest.approx(TRACE, rel=TOLERANCE)
    assert reading.b_simple == pytest.approx(TRUE_B_SIMPLE, rel=TOLERANCE)
    assert reading.above_batch and hook.passed_at_step is not None  # 64 > the batch of 32


def test_plain_hook_skips_steps_of_one_micro_batch():
    model = Linear()
    hook = NoiseScaleHook(list(model.parameters()), micro_batch=BATCH)
    loader = DataLoader(samples(4 * BATCH), batch_size=BATCH)
    for step in scheduled_steps(loader, BatchSizeSchedule([(0, BATCH)], budget_samples=4 * BATCH)):
        (model(step.micro_batches[0])["loss"]).backward()
        assert hook.after_backward(0, step) is None
    assert hook.reading is None and "not measurable" in hook.note


class Rows(torch.utils.data.Dataset):
    def __init__(self, x):
        self.x = x

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i]}


@pytest.mark.slow
def test_hf_noise_scale_callback_reads_before_clipping_and_logs_b_simple(tmp_path):
    pytest.importorskip("accelerate")
    from transformers import Trainer, TrainingArguments

    from cbs_ray.integrations.hf import NoiseScaleCallback

    callback = NoiseScaleCallback()
    # max_grad_norm 0.5 clips every step (|G_32|² ≈ 3): B_simple must come from the gradient before clipping.
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=MICRO,
                             gradient_accumulation_steps=BATCH // MICRO, max_steps=STEPS, learning_rate=1e-6,
                             max_grad_norm=0.5, train_sampling_strategy="sequential", report_to="none",
                             save_strategy="no", logging_steps=50, disable_tqdm=True, use_cpu=True)
    trainer = Trainer(model=Linear(), args=args, train_dataset=Rows(samples(STEPS * BATCH)), callbacks=[callback])
    trainer.train()
    reading = callback.hook.reading
    assert reading.steps == STEPS
    assert reading.b_simple == pytest.approx(TRUE_B_SIMPLE, rel=TOLERANCE)
    assert reading.grad_sq == pytest.approx(GRAD_SQ, rel=TOLERANCE)
    logged = [r for r in trainer.state.log_history if "b_simple" in r]
    assert logged and logged[-1]["b_simple"] == pytest.approx(reading.b_simple)
    assert logged[-1]["b_simple_above_batch"] == 1


@pytest.mark.slow
def test_lightning_noise_scale_callback_reads_before_clipping():
    pytest.importorskip("lightning")
    import lightning.pytorch as pl

    from cbs_ray.integrations.lightning import NoiseScaleCallback

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = Linear()

        def training_step(self, batch, batch_idx):
            return self.model(batch)["loss"]

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-6)

    callback = NoiseScaleCallback()
    trainer = pl.Trainer(max_steps=STEPS, accelerator="cpu", devices=1, accumulate_grad_batches=BATCH // MICRO,
                         gradient_clip_val=0.5, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[callback])
    trainer.fit(Module(), DataLoader(samples(STEPS * BATCH), batch_size=MICRO))
    reading = callback.hook.reading
    assert reading.steps == STEPS
    assert reading.b_simple == pytest.approx(TRUE_B_SIMPLE, rel=TOLERANCE)
    assert trainer.callback_metrics["b_simple"] == pytest.approx(reading.b_simple, rel=1e-6)
