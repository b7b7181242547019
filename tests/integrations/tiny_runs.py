"""A tiny regression model (a few hundred parameters) trained under the schedule 8 → 16 → 32 by an unmodified HF
Trainer, Lightning and the plain loop, each run recording per optimizer step the samples it trained and the LR it
used: the resume and LR-in-samples tests compare these records. Seconds a run on one CPU thread."""

from __future__ import annotations

import torch

from cbs_ray.integrations import BatchSizeSchedule

STAGES = [(0, 8), (64, 16), (192, 32)]
TOTAL = 320  # 8 steps of 8, 8 of 16, 4 of 32: 20 steps
MICRO, DIM, BASE_LR = 4, 16, 1e-2


def schedule(**options) -> BatchSizeSchedule:
    return BatchSizeSchedule(STAGES, budget_samples=TOTAL, **options)


class TinyRegression(torch.nn.Module):
    """Mean squared error of a linear map: returns ``{"loss": …}`` as HF models do."""

    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.linear = torch.nn.Linear(DIM, 1)

    def forward(self, x, y=None):
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
        self.records.append((self.rows, optimizer.param_groups[0]["lr"]))
        self.rows = 0


def hf_trainer(output_dir: str, *, callbacks=(), model=None, data=None, **settings):
    """An unmodified HF Trainer with the schedule callback; returns (trainer, recorder). ``settings`` override the
    TrainingArguments (the LR schedule, saving)."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from cbs_ray.integrations.hf import BatchSizeScheduleCallback, training_arguments

    model = model or TinyRegression()
    recorder = Recorder(model)

    class Watch(TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
            recorder.watch(optimizer)

    arguments = dict(output_dir=output_dir, learning_rate=BASE_LR, lr_scheduler_type="constant", optim="adamw_torch",
                     weight_decay=0.0, max_grad_norm=0.0, seed=0, train_sampling_strategy="sequential",
                     report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, use_cpu=True,
                     dataloader_num_workers=0, **training_arguments(schedule(), MICRO))
    arguments.update(settings)
    trainer = Trainer(model=model, args=TrainingArguments(**arguments), train_dataset=Rows(data or rows()),
                      callbacks=[BatchSizeScheduleCallback(schedule()), Watch(), *callbacks])
    return trainer, recorder
