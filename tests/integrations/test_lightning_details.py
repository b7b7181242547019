"""Lightning details of issue 48: an epoch end that cuts a step is named before the first step, and a NaN noise
reading is logged at Lightning's cadence (log_every_n_steps > 1) rather than dropped."""

import logging
import math

import pytest
import torch

pytest.importorskip("lightning")


def test_an_epoch_end_that_cuts_a_step_is_named(tmp_path, caplog):
    from tiny_runs import lightning_fit, rows

    with caplog.at_level(logging.WARNING, logger="cbs_ray.integrations.lightning"):
        trainer, recorder, _ = lightning_fit(str(tmp_path), data=rows(100))  # 100 samples an epoch, 8 → 16 → 32
    said = [r.getMessage() for r in caplog.records if "epoch's end" in r.getMessage()]
    assert len(said) == 1 and "step 10 trains 4 samples, not its stage's 16; step 16 trains 16 samples, not its " \
        "stage's 32; step 17 trains 4 samples, not its stage's 32" in said[0]
    # Lightning ends a step as the HF Trainer does: the sizes named are the sizes trained.
    assert trainer.global_step == 20
    assert [n for n, _ in recorder.records] == [8] * 8 + [16, 16, 4] + [16] * 5 + [16, 4] + [32, 32]


def test_a_nan_reading_is_logged_at_lightnings_cadence():
    import lightning.pytorch as pl

    from cbs_ray.integrations.lightning import NoiseScaleCallback

    class Module(pl.LightningModule):
        """Every sample is the same vector of ones: no noise, tr Σ reads exactly 0, so B_simple is NaN."""

        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(8))

        def training_step(self, batch, batch_idx):
            return (batch @ self.w).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    callback = NoiseScaleCallback()
    trainer = pl.Trainer(max_steps=20, accelerator="cpu", devices=1, accumulate_grad_batches=2, log_every_n_steps=5,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[callback])
    trainer.fit(Module(), torch.utils.data.DataLoader(torch.ones(160, 8), batch_size=4))
    assert callback.hook.reading.steps == 20 and math.isnan(callback.hook.reading.b_simple)
    assert "b_simple" in trainer.callback_metrics and math.isnan(float(trainer.callback_metrics["b_simple"]))
