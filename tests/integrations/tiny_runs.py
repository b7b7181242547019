"""A tiny regression model (a few hundred parameters) trained under the schedule 8 → 16 → 32 by an unmodified HF
Trainer, Lightning and the plain loop, each run recording per optimizer step the samples it trained and the LR it
used: the resume and LR-in-samples tests compare these records. Seconds a run on one CPU thread."""

from __future__ import annotations

import os

import torch

from cbs_ray.integrations import BatchSizeSchedule

STAGES = [(0, 8), (64, 16), (192, 32)]
TOTAL = 320  # 8 steps of 8, 8 of 16, 4 of 32: 20 steps
MICRO, DIM, BASE_LR = 4, 16, 1e-2


def schedule(**options) -> BatchSizeSchedule:
    return BatchSizeSchedule(STAGES, budget_samples=TOTAL, **options)


class TinyRegression(torch.nn.Module):
    """Mean squared error of a linear map: returns ``{"loss": …}`` as HF models do."""

    def __init__(self, seed: int = 0, dropout: float = 0.0):
        super().__init__()
        torch.manual_seed(seed)
        self.linear = torch.nn.Linear(DIM, 1)
        self.dropout = torch.nn.Dropout(dropout) if dropout else None  # draws from torch's RNG every forward

    def forward(self, x, y=None):
        if self.dropout is not None:
            x = self.dropout(x)
        return {"loss": ((self.linear(x).squeeze(-1) - y) ** 2).mean()}


def rows(n: int = TOTAL, seed: int = 1) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, DIM, generator=g)
    y = x @ torch.linspace(-1, 1, DIM) + 0.1 * torch.randn(n, generator=g)
    return [{"x": a, "y": b} for a, b in zip(x, y)]


class Rows(torch.utils.data.Dataset):
    def __init__(self, data):
        self.data = data

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i]


class Recorder:
    """Rows the model sees between optimizer steps (a forward pre-hook) and each step's LR (an optimizer step
    post-hook): ``records`` is [(samples, lr)] per optimizer step."""

    def __init__(self, model):
        self.rows, self.records, self._watched = 0, [], set()
        model.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module, args, kwargs):
        first = next(iter(kwargs.values())) if kwargs else args[0]
        if isinstance(first, dict):
            first = next(iter(first.values()))
        self.rows += int(first.shape[0])

    def watch(self, optimizer) -> None:
        optimizer = getattr(optimizer, "optimizer", optimizer)
        if id(optimizer) not in self._watched:  # a second train() may hand over the same optimizer
            self._watched.add(id(optimizer))
            optimizer.register_step_post_hook(self._step)

    def _step(self, optimizer, args, kwargs):
        rows = torch.tensor([self.rows])
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(rows)  # samples of all processes
        self.records.append((int(rows.item()), optimizer.param_groups[0]["lr"]))
        self.rows = 0


def hf_trainer(output_dir: str, *, callbacks=(), model=None, data=None, plan=None, **settings):
    """An unmodified HF Trainer with the schedule callback; returns (trainer, recorder). ``settings`` override the
    TrainingArguments (the LR schedule, saving)."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from cbs_ray.integrations.hf import BatchSizeScheduleCallback, training_arguments

    plan = plan or schedule()
    model = model or TinyRegression()
    recorder = Recorder(model)

    class Watch(TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
            recorder.watch(optimizer)

    arguments = dict(output_dir=output_dir, learning_rate=BASE_LR, lr_scheduler_type="constant", optim="adamw_torch",
                     weight_decay=0.0, max_grad_norm=0.0, seed=0, train_sampling_strategy="sequential",
                     report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, use_cpu=True,
                     dataloader_num_workers=0,
                     **training_arguments(plan, MICRO, world_size=int(os.environ.get("WORLD_SIZE", "1"))))
    arguments.update(settings)
    trainer = Trainer(model=model, args=TrainingArguments(**arguments), train_dataset=Rows(data or rows()),
                      callbacks=[BatchSizeScheduleCallback(plan), Watch(), *callbacks])
    return trainer, recorder


class ResumableLoader(torch.utils.data.DataLoader):
    """A sequential DataLoader Lightning can resume mid-epoch (``state_dict``/``load_state_dict``, Lightning's
    interface for it): it skips the micro-batches the checkpointed run had trained in the epoch (``trained`` is set
    by the module's ``training_step``, so a prefetched batch is not counted)."""

    def __init__(self, data, batch_size):
        super().__init__(data, batch_size=batch_size, shuffle=False)
        self.trained, self._skip = 0, 0

    def __iter__(self):
        skip, self._skip = self._skip, 0
        for i, batch in enumerate(super().__iter__()):
            if i >= skip:
                yield batch

    def state_dict(self) -> dict:
        return {"trained": self.trained}

    def load_state_dict(self, state: dict) -> None:
        # A checkpoint at an epoch's end trained the whole epoch: the next one starts from its first batch (skipping
        # it all would run an empty epoch, whose iterator draws a seed from torch's RNG the uninterrupted run did not).
        self._skip = self.trained = int(state["trained"]) % len(self)


def lightning_fit(root: str, *, scheduler: bool = True, save_every: int | None = None, ckpt_path: str | None = None,
                  resumable: bool = True, data=None, callbacks=(), dropout: float = 0.0, **settings):
    """Lightning with the schedule callback: AdamW, a warmup LambdaLR stepped every step (or none); returns
    (trainer, recorder, model). ``settings`` go to ``pl.Trainer`` (``log_every_n_steps``)."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint

    from cbs_ray.integrations.lightning import BatchSizeScheduleCallback

    model = TinyRegression(dropout=dropout)
    recorder = Recorder(model)
    data = data or rows()
    loader = ResumableLoader(data, MICRO) if resumable else torch.utils.data.DataLoader(data, batch_size=MICRO)

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model

        def training_step(self, batch, batch_idx):
            loader.trained = batch_idx + 1
            return self.model(**batch)["loss"]

        def configure_optimizers(self):
            optimizer = torch.optim.AdamW(self.model.parameters(), lr=BASE_LR, weight_decay=0.0)
            recorder.watch(optimizer)
            if not scheduler:
                return optimizer
            warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / 5))
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": warmup, "interval": "step"}}

    callbacks = [BatchSizeScheduleCallback(schedule()), *callbacks]
    if save_every:
        callbacks.append(ModelCheckpoint(dirpath=root, every_n_train_steps=save_every, save_top_k=-1,
                                         filename="{step}"))
    trainer = pl.Trainer(max_steps=schedule().optimizer_steps(), accelerator="cpu", devices=1,
                         accumulate_grad_batches=2, logger=False, enable_checkpointing=bool(save_every),
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
                         callbacks=callbacks, **settings)
    trainer.fit(Module(), loader, ckpt_path=ckpt_path)
    return trainer, recorder, model
