"""A tiny GPT-2 (from a config, no download) trained on a fixed sequence of random tokens under the schedule
8 → 16 → 32, by HF Trainer, Lightning and the plain-loop helper; each run records, per optimizer step, the
samples it trained (all processes) and the LR it used. Shared by the integration tests and the DDP script."""

from __future__ import annotations

import functools
import os

import torch
import torch.distributed as dist

from cbs_ray.integrations import BatchSizeSchedule
from cbs_ray.integrations.torch_loop import scale_lambda_scheduler, scheduled_steps, world_size

SCHEDULE = [(0, 8), (64, 16), (192, 32)]
TOTAL = 320  # 8 steps of 8, 8 of 16, 4 of 32: 20 steps
EXPECTED_BATCHES = [8] * 8 + [16] * 8 + [32] * 4
MICRO = 4
BASE_LR = 1e-3
SEQ = 16


def schedule() -> BatchSizeSchedule:
    return BatchSizeSchedule(SCHEDULE, budget_samples=TOTAL)


def tiny_gpt2(seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=64, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config)


def token_rows(n: int = TOTAL, seed: int = 1) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 64, (n, SEQ), generator=g)
    return [{"input_ids": row, "labels": row.clone()} for row in ids]


class StepRecorder:
    """Counts the rows the model sees between optimizer steps (a forward pre-hook) and the LR of each step
    (an optimizer step post-hook: Lightning runs the last micro-batch inside step()): ``records`` is
    [(samples over all processes, lr)] per step."""

    def __init__(self, model, optimizer=None):
        self.rows, self.records = 0, []
        model.register_forward_pre_hook(self._count, with_kwargs=True)
        if optimizer is not None:
            self.watch(optimizer)

    def _count(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.rows += int(ids.shape[0])

    def watch(self, optimizer) -> None:
        optimizer.register_step_post_hook(self._step)

    def _step(self, optimizer, args, kwargs):
        rows = torch.tensor([self.rows])
        if world_size() > 1:
            dist.all_reduce(rows)
        self.records.append((int(rows.item()), optimizer.param_groups[0]["lr"]))
        self.rows = 0


def train_plain(model, rows: list[dict], *, ddp: bool = False) -> StepRecorder:
    """The plain-loop helper: AdamW, a constant LambdaLR scaled by the schedule, loss ÷ accumulation."""
    from contextlib import nullcontext

    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(rows, shuffle=False) if ddp else None
    loader = DataLoader(rows, batch_size=MICRO, sampler=sampler, shuffle=False)
    net = torch.nn.parallel.DistributedDataParallel(model) if ddp else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=BASE_LR, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    scale_lambda_scheduler(scheduler, schedule())
    recorder = StepRecorder(model, optimizer)
    for step in scheduled_steps(loader, schedule()):
        for i, micro in enumerate(step.micro_batches):
            with net.no_sync() if ddp and not step.is_last(i) else nullcontext():
                (net(**micro).loss / step.accumulation_steps).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return recorder


@functools.cache
def plain_reference() -> tuple[StepRecorder, torch.nn.Module]:
    """The plain-loop helper's run of ``tiny_gpt2()`` on ``token_rows()`` (one process), and the model it trained:
    what the single-process HF and Lightning tests compare with. Deterministic, so trained once per pytest process
    and shared; the tests read it and train it no further."""
    model = tiny_gpt2()
    return train_plain(model, token_rows()), model


class Rows(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def train_hf(model, rows: list[dict], output_dir: str, *, callbacks=(), max_grad_norm: float = 0.0,
             accumulation_override=None) -> StepRecorder:
    """HF Trainer, unmodified: sequential data order, constant LR, the schedule callback."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from cbs_ray.integrations.hf import BatchSizeScheduleCallback, training_arguments

    recorder = StepRecorder(model)

    class Watch(TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
            recorder.watch(getattr(optimizer, "optimizer", optimizer))

    # torchrun's WORLD_SIZE: the process group starts with TrainingArguments, after this line.
    settings = training_arguments(schedule(), MICRO, world_size=int(os.environ.get("WORLD_SIZE", "1")))
    if accumulation_override:
        settings.update(accumulation_override)
    args = TrainingArguments(output_dir=output_dir, learning_rate=BASE_LR, lr_scheduler_type="constant",
                             optim="adamw_torch", weight_decay=0.0, max_grad_norm=max_grad_norm, seed=0,
                             train_sampling_strategy="sequential", report_to="none", save_strategy="no",
                             logging_steps=1, disable_tqdm=True, use_cpu=True, dataloader_num_workers=0, **settings)
    trainer = Trainer(model=model, args=args, train_dataset=Rows(rows),
                      callbacks=[BatchSizeScheduleCallback(schedule()), Watch(), *callbacks])
    trainer.train()
    recorder.trainer = trainer
    return recorder


def max_weight_difference(a, b) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    return max(float((sa[k] - sb[k]).abs().max()) for k in sa)


def train_lightning(model, rows: list[dict], *, callbacks=(), accumulate: int = 2, micro: int = MICRO,
                    max_steps: int | None = None, scheduler: bool = True):
    """Lightning, with the schedule callback: AdamW and a constant LambdaLR stepped every optimizer step."""
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    from cbs_ray.integrations.lightning import BatchSizeScheduleCallback

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model

        def training_step(self, batch, batch_idx):
            return self.model(**batch).loss

        def configure_optimizers(self):
            optimizer = torch.optim.AdamW(self.model.parameters(), lr=BASE_LR, weight_decay=0.0)
            recorder.watch(optimizer)
            if not scheduler:
                return optimizer
            lam = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": lam, "interval": "step"}}

    recorder = StepRecorder(model)
    trainer = pl.Trainer(max_steps=max_steps or schedule().optimizer_steps(), accelerator="cpu", devices=1,
                         accumulate_grad_batches=accumulate, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[BatchSizeScheduleCallback(schedule()), *callbacks])
    trainer.fit(Module(), DataLoader(rows, batch_size=micro, shuffle=False))
    recorder.trainer = trainer
    return recorder
