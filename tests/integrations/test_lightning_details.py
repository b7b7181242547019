"""Lightning details of issue 48: an epoch end that cuts a step is named before the first step and the cut steps'
gradients are the means over their samples, and a NaN noise reading is logged at Lightning's cadence
(log_every_n_steps > 1) rather than dropped."""

import itertools
import logging
import math

import pytest
import torch

pytest.importorskip("lightning")


def test_an_epoch_end_that_cuts_a_step_is_named(tmp_path, caplog):
    import lightning.pytorch as pl
    from tiny_runs import lightning_fit, rows

    logged: list[float] = []

    class Logged(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if "samples_seen" in trainer.callback_metrics:
                logged.append(float(trainer.callback_metrics["samples_seen"]))

    with caplog.at_level(logging.WARNING, logger="cbs_ray.integrations.lightning"):
        trainer, recorder, _ = lightning_fit(str(tmp_path), data=rows(100), callbacks=[Logged()],
                                             log_every_n_steps=1)  # 100 samples an epoch, 8 → 16 → 32
    said = [r.getMessage() for r in caplog.records if "epoch's end" in r.getMessage()]
    assert len(said) == 1 and "step 10 trains 4 samples, not its stage's 16; step 16 trains 16 samples, not its " \
        "stage's 32; step 17 trains 4 samples, not its stage's 32" in said[0]
    # Lightning ends a step as the HF Trainer does: the sizes named are the sizes trained.
    assert trainer.global_step == 20
    trained = [8] * 8 + [16, 16, 4] + [16] * 5 + [16, 4] + [32, 32]
    assert [n for n, _ in recorder.records] == trained
    # samples_seen counts what trained (issue 58, finding 10): 264 at the end, not the schedule's 320.
    assert sorted(set(logged)) == list(itertools.accumulate(trained)) and logged[-1] == 264


def test_a_cut_steps_gradient_is_the_mean_over_the_samples_it_holds(tmp_path):
    # Lightning divides every micro-batch's loss by the stage's accumulation, and zeroes the gradients only where a
    # micro-batch's place in the epoch is a multiple of it: steps 10 and 17 (1 of 4 and 1 of 8 micro-batches) took a
    # quarter and an eighth of their mean gradient, and step 16 (from place 20 at accumulation 8) started on step
    # 15's. Checked at every step against the gradient of the mean loss over the step's samples at its weights.
    import lightning.pytorch as pl
    from tiny_runs import lightning_fit, rows

    data = rows(100)
    gaps: list[float] = []

    class Check(pl.Callback):  # after the schedule callback, which rescales the cut steps
        def __init__(self):
            self.seen = []

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.seen.append(batch)

        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            x = torch.cat([b["x"] for b in self.seen])
            y = torch.cat([b["y"] for b in self.seen])
            self.seen = []
            params = list(pl_module.parameters())
            expected = torch.autograd.grad(pl_module.model(x, y)["loss"], params)
            gaps.append(max(float((p.grad - e).abs().max() / e.abs().max()) for p, e in zip(params, expected)))

    lightning_fit(str(tmp_path), data=data, callbacks=[Check()])
    assert len(gaps) == 20 and max(gaps) < 1e-5


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
