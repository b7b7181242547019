"""The per-worker training loop of one trial: the same code runs in a Ray Train worker (multi-worker or
GPU trials) and in-process inside the Tune trial (single-CPU-worker trials). Only the ``Session`` differs.

Per optimizer step: ``accumulation`` micro-batches, each micro-batch's summed loss divided by the items
in the whole step (examples; for a causal LM the target tokens, counted over all micro-batches and
workers), so the accumulated gradient is the mean over the effective batch exactly as one step of B
would compute it; DDP's all-reduce only on the last micro-step (``no_sync``), global-norm clipping, then
one optimizer and one scheduler step. Samples are counted in
samples (B per step), the LR schedule in optimizer steps. At every ``eval_every_samples`` milestone the
validation metric is summed over each worker's exact shard of the eval set, all-reduced, reported and
(rank 0) checkpointed.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from .budget import BatchPlan, milestones, optimizer_steps, plan_batch
from .metrics import TrialGauges
from .noise_scale import NOT_MEASURABLE, NoiseScaleMeter, b_simple
from .lr_schedule import lr_multiplier, scaled_lr, warmup_steps

__all__ = ["TrialSetup", "LocalSession", "TrainSession", "train_loop", "WORST_METRIC"]

WORST_METRIC = {"accuracy": 0.0, "eval_loss": float("inf"), "perplexity": float("inf")}
STATE_FILE = "state.pt"


@dataclass
class TrialSetup:
    """Everything one trial's loop needs, resolved in the driver (plain values, picklable)."""

    batch_size: int
    alpha: float
    warmup_fraction: float
    budget_samples: int
    eval_every_samples: int
    base_lr: float
    base_batch: int
    lr_decay: str
    optimizer: str
    weight_decay: float
    grad_clip_norm: Optional[float]
    micro_batch_size: Optional[int]
    task: str
    metric: str
    model: dict
    model_config: Any
    threads: int
    seed: int
    use_gpu: bool = False
    noise_scale: bool = True
    label_smoothing: float = 0.0
    layer_lr_decay: float = 1.0
    precision: str = "fp32"
    gradient_checkpointing: bool = False
    compile: bool = False
    compile_mode: str = "default"
    dataloader_workers: int = 0
    pin_memory: Optional[bool] = None
    """None: on a GPU."""
    persistent_workers: Optional[bool] = None
    """None: whenever there are DataLoader workers."""
    divergence_factor: float = 10.0
    probe_micro_batch: bool = False
    probe_seq_len: Optional[int] = None
    probe_limit: Optional[int] = None
    """Largest micro-batch the probe tries: the search's largest batch per worker (default: this batch's)."""
    memory_limit_gb: Optional[float] = None
    """CPU: the peak resident memory the probe plans within (no limit: no probe on a CPU)."""
    eval_batch_size: int = 256
    """Evaluation batch per worker; lowered to the probed micro-batch when memory set it."""
    started_at: float = field(default_factory=time.time)
    trial_id: str = ""
    """The Tune trial's id (tags the trial's gauges in Ray's metrics); empty outside Tune."""

    @property
    def peak_lr(self) -> float:
        return scaled_lr(self.base_lr, self.batch_size, self.base_batch, self.alpha)

    @property
    def total_steps(self) -> int:
        return optimizer_steps(self.budget_samples, self.batch_size)


class LocalSession:
    """One CPU worker running inside the Tune trial process: reports straight to Tune."""

    world_size, rank = 1, 0
    device = torch.device("cpu")

    def prepare_model(self, model):
        return model

    def prepare_data_loader(self, loader):
        return loader

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def all_reduce_min(self, value: int) -> int:
        return value

    def report(self, metrics: dict, checkpoint_dir: Optional[str]) -> None:
        from ray import tune

        checkpoint = tune.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        tune.report(metrics, checkpoint=checkpoint)

    def get_checkpoint(self):
        from ray import tune

        return tune.get_checkpoint()


class TrainSession:
    """A Ray Train worker: DDP through ``prepare_model``, the loop's seeded DistributedSampler kept by
    ``prepare_data_loader``, metrics via ``ray.train.report`` (forwarded to Tune by TuneReportCallback)."""

    def __init__(self):
        import ray.train
        import ray.train.torch

        context = ray.train.get_context()
        self.world_size = context.get_world_size()
        self.rank = context.get_world_rank()
        self.device = ray.train.torch.get_device()

    def prepare_model(self, model):
        import ray.train.torch

        return ray.train.torch.prepare_model(model)

    def prepare_data_loader(self, loader):
        import ray.train.torch

        # Batches stay on the host: the loop counts a causal LM's tokens there (no wait for the device)
        # and copies each batch itself, non-blocking from pinned memory.
        return ray.train.torch.prepare_data_loader(loader, move_to_device=False)

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            torch.distributed.all_reduce(tensor)
        return tensor

    def all_reduce_min(self, value: int) -> int:
        """The smallest ``value`` over all ranks (workers agree on one micro-batch)."""
        if self.world_size == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.long, device=self.device)
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MIN)
        return int(tensor.item())

    def report(self, metrics: dict, checkpoint_dir: Optional[str]) -> None:
        import ray.train

        checkpoint = ray.train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        ray.train.report(metrics, checkpoint=checkpoint)

    def get_checkpoint(self):
        import ray.train

        return ray.train.get_checkpoint()


def per_report_loggers() -> list[str]:
    """The Ray loggers that write a console line at INFO for every report of every rank: "Checkpoint
    successfully created at: …" (Tune's and Train's storage) and "Reporting training result N:
    TrainingReport(…all metrics…)" (Train V2's worker context, whose logger is named by its file path).
    Forwarded to the driver, they bury Tune's own progress table."""
    import importlib.util

    names = ["ray.train._internal.storage", "ray.train.v2._internal.execution.storage"]
    context = importlib.util.find_spec("ray.train.v2._internal.execution.context")
    if context is not None:
        names.append(context.origin)
    return names


def quiet_per_report_logs() -> None:
    """Raise those loggers to WARNING in this process; their warnings and errors still show."""
    import logging

    for name in per_report_loggers():
        logging.getLogger(name).setLevel(logging.WARNING)


def train_worker(config: dict) -> None:
    """Entry point of a Ray Train worker (``TorchTrainer(train_loop_per_worker=train_worker)``)."""
    quiet_per_report_logs()
    train_loop(config["setup"], config["data"], TrainSession())


# ---- pieces of the loop ----------------------------------------------------------------------------

_LAYER = re.compile(r"(?:^|\.)(?:layer|layers|h|block|blocks)\.(\d+)\.")


def layer_lr_scale(name: str, num_layers: int, decay: float) -> float:
    """LR multiplier of a parameter under layer-wise decay: encoder layer i of L gets decay^(L − i),
    embeddings decay^(L + 1), everything else (pooler, head, final norm) 1."""
    if decay == 1.0:
        return 1.0
    match = _LAYER.search(name)
    if match:
        return decay ** (num_layers - int(match.group(1)))
    if "embed" in name or re.search(r"(?:^|\.)(wte|wpe)\.", name):
        return decay ** (num_layers + 1)
    return 1.0


def make_optimizer(model: torch.nn.Module, setup: TrialSetup, lr: float) -> torch.optim.Optimizer:
    """AdamW, LAMB or SGD; weight decay on weight matrices only (not biases or LayerNorm), as in BERT;
    one parameter group per (decay, LR scale) so layer-wise LR decay rides on the same scheduler."""
    config = setup.model_config
    num_layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", 0) or 0
    groups: dict[tuple[bool, float], list] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            key = (p.ndim >= 2, layer_lr_scale(name, num_layers, setup.layer_lr_decay))
            groups.setdefault(key, []).append(p)
    param_groups = [{"params": params, "weight_decay": setup.weight_decay if decayed else 0.0, "lr": lr * scale}
                    for (decayed, scale), params in sorted(groups.items(), key=lambda kv: (not kv[0][0], -kv[0][1]))]
    if setup.optimizer == "sgd":
        return torch.optim.SGD(param_groups, lr=lr, momentum=0.9)
    if setup.optimizer == "lamb":
        import pytorch_optimizer

        # The paper's LAMB (v3): weight decay inside the trust ratio, no bias correction on the step size.
        return pytorch_optimizer.Lamb(param_groups, lr=lr, betas=(0.9, 0.999), eps=1e-6, weight_decouple=False,
                                      adam_debias=True)
    # On a GPU the fused kernel: one launch for all parameters' update instead of a foreach loop over them.
    on_gpu = all(p.is_cuda for group in param_groups for p in group["params"])
    return torch.optim.AdamW(param_groups, lr=lr, betas=(0.9, 0.999), eps=1e-8, fused=on_gpu or None)


def autocast_dtype(precision: str, device: torch.device) -> Optional[torch.dtype]:
    """The autocast dtype for ``precision`` on ``device`` (None: plain fp32)."""
    if precision == "auto":
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def summed_loss(model, batch: dict, setup: TrialSetup) -> torch.Tensor:
    """The micro-batch's loss summed over its items (see ``items_in``): the model's own mean loss times the
    examples for classification; the (label-smoothed) cross-entropy on the logits otherwise."""
    if setup.task != "causal-lm" and not setup.label_smoothing:
        return model(**batch).loss * len(batch["labels"])
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    labels = batch["labels"]
    if setup.task == "causal-lm":
        logits, labels = logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten()
    return torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100, reduction="sum",
                                             label_smoothing=setup.label_smoothing)


def items_in(batch, task: str) -> int:
    """What the loss averages over in a host micro-batch (ids, mask, labels): its examples, or for a causal
    LM its target tokens (each token after the first that is not padding)."""
    ids, mask, _ = batch
    return int(mask[:, 1:].sum()) if task == "causal-lm" else len(ids)


def _inputs(batch, task: str, device) -> dict:
    # Asynchronous from pinned memory (training.pin_memory): the copy overlaps the device's work in flight.
    ids, mask, labels = (t.to(device, non_blocking=True) for t in batch)
    if task == "causal-lm":
        labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class _ResumableSampler(torch.utils.data.DistributedSampler):
    """A DistributedSampler whose epoch can start ``skip`` indices in, without loading what comes before
    (a restarted trial's position in its epoch)."""

    skip = 0

    def __iter__(self):
        return itertools.islice(super().__iter__(), self.skip, None)


def _endless_micro_batches(loader, drawn: int = 0):
    """The loader's micro-batches, epoch after epoch, after the first ``drawn`` (what the trial took before
    its checkpoint). The sampler shuffles by (seed, epoch), the same on every rank, so a restarted trial
    continues the data order exactly where it stopped, mid-epoch included."""
    epoch, skip = divmod(drawn, len(loader))
    while True:
        loader.sampler.set_epoch(epoch)
        loader.sampler.skip = skip * loader.batch_size
        yield from loader
        epoch, skip = epoch + 1, 0


@torch.no_grad()
def evaluate(model, session, data, setup: TrialSetup, *, on_dev: bool = False,
             batch_size: Optional[int] = None) -> dict:
    """Metric over the whole eval set (``on_dev``: the dev set): each rank sums over its exact shard
    (rank::world_size, no padding duplicates) in batches of ``batch_size`` (default
    ``setup.eval_batch_size``), sums are all-reduced, then divided."""
    model.eval()
    shard = slice(session.rank, None, session.world_size)
    arrays = (data.dev_ids, data.dev_mask, data.dev_labels) if on_dev else (data.eval_ids, data.eval_mask,
                                                                             data.eval_labels)
    ids, mask, labels = (torch.tensor(a[shard]) for a in arrays)
    sums = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, count
    size = batch_size or setup.eval_batch_size
    amp_dtype = autocast_dtype(setup.precision, session.device)  # the model is evaluated as it trains
    for start in range(0, len(ids), size):
        batch = _inputs((ids[start:start + size], mask[start:start + size], labels[start:start + size]),
                        setup.task, session.device)
        with torch.autocast(session.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        logits = logits.float()
        if setup.task == "causal-lm":
            shifted, target = logits[:, :-1].flatten(0, 1), batch["labels"][:, 1:].flatten()
            loss = torch.nn.functional.cross_entropy(shifted, target, ignore_index=-100, reduction="sum")
            sums += torch.tensor([loss.item(), 0.0, float((target != -100).sum())], dtype=torch.float64)
        else:
            loss = torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="sum")
            correct = (logits.argmax(-1) == batch["labels"]).sum()
            sums += torch.tensor([loss.item(), float(correct), float(len(logits))], dtype=torch.float64)
    sums = session.all_reduce(sums.to(session.device)).cpu()
    eval_loss = float(sums[0] / sums[2])
    model.train()
    metrics = {"eval_loss": eval_loss, "perplexity": math.exp(min(eval_loss, 700.0))}
    if setup.task == "sequence-classification":
        metrics["accuracy"] = float(sums[1] / sums[2])
        metrics["eval_examples"] = int(sums[2])  # what the accuracy's standard error is computed from
    return metrics


def _save_state(directory: str, model, optimizer, scheduler, scaler, step: int, progress: dict) -> None:
    """Weights, optimizer, schedule and fp16 loss scale, the step, the random stream (dropout's), and the
    clocks and first loss a restart continues from."""
    raw = model.module if hasattr(model, "module") else model
    device = next(raw.parameters()).device
    rng = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(device)
    torch.save({"model": raw.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(), "step": step,
                "rng": rng, "progress": progress}, os.path.join(directory, STATE_FILE))


def _load_state(checkpoint, model, optimizer, scheduler, scaler) -> tuple[int, dict]:
    with checkpoint.as_directory() as directory:
        # On the CPU first (never unpickling code): saved from rank 0's GPU, the tensors would otherwise all
        # land on that GPU, on every rank of the node; loading the state dicts copies them where they belong.
        state = torch.load(os.path.join(directory, STATE_FILE), weights_only=True, map_location="cpu")
    raw = model.module if hasattr(model, "module") else model
    raw.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if state.get("scaler"):
        scaler.load_state_dict(state["scaler"])  # fp16: the loss scale found so far, not 65536 again
    # Rank 0's random stream, restored on every rank: all ranks start from one seed. Deterministic either way.
    rng = state.get("rng", {})
    if "cpu" in rng:
        torch.set_rng_state(rng["cpu"])
    device = next(raw.parameters()).device
    if "cuda" in rng and device.type == "cuda":
        torch.cuda.set_rng_state(rng["cuda"], device)
    return int(state["step"]), state.get("progress", {})


def _sqnorm(params) -> torch.Tensor:
    # One fused kernel over all gradients (the same one clip_grad_norm_ uses), not one per parameter.
    norms = torch._foreach_norm([p.grad.detach() for p in params if p.grad is not None])
    return torch.linalg.vector_norm(torch.stack(norms)) ** 2


def _attach_noise_probe(model, params, plan: BatchPlan):
    """Set up the two gradients B_simple needs (see noise_scale.py). Returns (meter, local_sqnorm) where
    ``local_sqnorm()`` gives the small-batch squared norm of the step just taken (a tensor on the device:
    reading it is left to the loop's one sync per step), or (None, None).

    Several workers: a DDP communication hook sums each bucket's squares before the default all-reduce,
    i.e. the worker's own gradient over micro × accumulation samples, at no extra pass. One worker with
    accumulation: the first micro-batch's gradient, read before the next micro-batch adds to it."""
    if plan.workers > 1 and hasattr(model, "register_comm_hook"):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        state = {"sq": torch.zeros((), dtype=torch.float64, device=next(model.parameters()).device)}

        def hook(state, bucket):
            # One fused norm over the flat bucket, no copy; stays on the device, so no sync here.
            state["sq"] += torch.linalg.vector_norm(bucket.buffer().detach()).double() ** 2
            return allreduce_hook(None, bucket)

        model.register_comm_hook(state, hook)

        def local_sqnorm() -> torch.Tensor:
            value, state["sq"] = state["sq"], torch.zeros_like(state["sq"])
            return value

        return NoiseScaleMeter(plan.micro_batch * plan.accumulation, plan.batch_size), local_sqnorm
    if plan.accumulation > 1:
        return NoiseScaleMeter(plan.micro_batch, plan.batch_size), None
    return None, None


def _probe_micro_batch(model, setup: TrialSetup, session, amp_dtype) -> tuple[Optional[int], Optional[int]]:
    """On CUDA: the largest micro-batch that fits (memory_planner), cached per model, sequence length,
    precision and device, agreed across ranks by taking the minimum. On a CPU the same within
    ``memory_limit_gb`` of peak resident memory, and skipped without one. Returns the micro-batch cap and
    the largest size known to fit (the agreed probe result, a training step's worth of memory), None
    where the probe was skipped."""
    from .memory_planner import ProbeCache, cpu_fits, cuda_fits, plan_micro_batch, probe_key

    on_gpu = session.device.type == "cuda"
    if not on_gpu and not setup.memory_limit_gb:
        if session.rank == 0:
            print("micro-batch probe skipped: not on a GPU and no training.memory_limit_gb", flush=True)
        return setup.micro_batch_size, None
    seq_len = int(setup.model_config.max_position_embeddings
                  if setup.probe_seq_len is None else setup.probe_seq_len)
    device_name = torch.cuda.get_device_name(session.device) if on_gpu else f"cpu<={setup.memory_limit_gb}GiB"
    # What else sets a step's memory: the optimizer's state, checkpointing, and DDP's gradient buckets.
    training = "+".join([setup.optimizer] + (["checkpointing"] if setup.gradient_checkpointing else [])
                        + (["ddp"] if session.world_size > 1 else []))
    key = probe_key(setup.model, seq_len, setup.precision, device_name, training=training)
    limit = setup.probe_limit or setup.batch_size // session.world_size
    cache = ProbeCache()
    found = cache.get(key, limit)
    if found is None:
        model.to(session.device)
        step_args = dict(seq_len=seq_len, vocab_size=setup.model_config.vocab_size, task=setup.task, dtype=amp_dtype)

        def new_optimizer():
            return make_optimizer(model, setup, setup.peak_lr)

        def log(line: str) -> None:
            if session.rank == 0:
                print(f"micro-batch probe: {line}", flush=True)

        # The probe's optimizer steps move the weights and its random batches draw from the RNG: both are
        # put back, so a trial trains the same whether its plan was probed or read from the cache.
        initial = {name: value.detach().to("cpu", copy=True) for name, value in model.state_dict().items()}
        # Measured as it will train: a pretrained model comes in eval mode, without dropout and (in
        # transformers) without gradient checkpointing. DDP will keep a second copy of the gradients in
        # its all-reduce buckets; the probe runs before DDP wraps the model, so it holds as much aside.
        model.train()
        buckets = torch.zeros(sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad),
                              dtype=torch.uint8, device=session.device) if session.world_size > 1 else None
        with torch.random.fork_rng(devices=[session.device] if on_gpu else []):
            if on_gpu:
                fits = cuda_fits(model, new_optimizer, **step_args)
            else:
                fits = cpu_fits(model, new_optimizer, limit_bytes=int(setup.memory_limit_gb * 2 ** 30), log=log,
                                **step_args)
            try:
                found = plan_micro_batch(fits, upper=limit)  # for the search's largest share; capped below
            except MemoryError as e:
                raise MemoryError(f"{e} ({device_name}, sequence length {seq_len}, {setup.precision})") from None
        del buckets
        model.load_state_dict(initial)
        model.zero_grad(set_to_none=True)
        if session.rank == 0:
            cache.put(key, found, limit)
    largest_fitting = session.all_reduce_min(found)
    agreed = min(largest_fitting, setup.batch_size // session.world_size)
    return (min(agreed, setup.micro_batch_size) if setup.micro_batch_size else agreed), largest_fitting


# ---- the loop --------------------------------------------------------------------------------------

def train_loop(setup: TrialSetup, data, session) -> None:
    """Train one (batch size, alpha, warmup) configuration to the equal-sample budget, reporting at
    every milestone. Stops early, reporting ``diverged=True`` and the worst metric, on a non-finite loss
    or gradient norm, or when a report interval's mean loss exceeds ``divergence_factor`` × the first
    step's loss (Adam at a far too high LR blows the loss up without ever producing a NaN)."""
    from .model import build_model

    torch.set_num_threads(setup.threads)
    torch.manual_seed(setup.seed)  # identical initial weights on every rank (DDP also broadcasts)
    total_steps = setup.total_steps
    warmup = warmup_steps(setup.warmup_fraction, total_steps)
    report_at = set(milestones(setup.budget_samples, setup.eval_every_samples))
    amp_dtype = autocast_dtype(setup.precision, session.device)

    model = build_model(setup.model, setup.task, setup.model_config)
    if setup.gradient_checkpointing:
        # The HF model's own switch (renamed in transformers 5), before DDP wraps the model.
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    micro_cap, fits_up_to = _probe_micro_batch(model, setup, session, amp_dtype) if setup.probe_micro_batch \
        else (setup.micro_batch_size, None)
    # A forward without gradients needs less memory than a training step of the same size: evaluating in
    # batches no larger than the probed size cannot run out where training did not. Larger could: a
    # causal LM's logits over a large vocabulary, in fp32, grow with the batch whatever the probe's limit.
    eval_batch = min(setup.eval_batch_size, fits_up_to) if fits_up_to else setup.eval_batch_size
    plan: BatchPlan = plan_batch(setup.batch_size, session.world_size, micro_cap)
    if session.rank == 0:
        print(f"trial: {plan}, peak lr {setup.peak_lr:.3g} (alpha {setup.alpha:.3g}), {total_steps} steps, "
              f"{warmup} warmup steps" + (f", eval batch {eval_batch} (memory)" if eval_batch < setup.eval_batch_size
                                          else ""), flush=True)
    model = session.prepare_model(model.to(session.device))  # Ray's prepare_model moves it too; a local run needs it
    optimizer = make_optimizer(model, setup, setup.peak_lr)
    # fp16 needs loss scaling; bf16 has fp32's exponent range and does not.
    scaler = torch.amp.GradScaler(session.device.type, enabled=amp_dtype == torch.float16)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_multiplier(step, warmup, total_steps, decay=setup.lr_decay))
    checkpoint = session.get_checkpoint()
    # A restarted trial (dead worker, resumed experiment) continues from its last milestone, clocks included.
    step, progress = _load_state(checkpoint, model, optimizer, scheduler, scaler) if checkpoint else (0, {})
    resumed_from_samples = step * setup.batch_size
    if resumed_from_samples and session.rank == 0:
        print(f"trial: resumed from its checkpoint at {resumed_from_samples} samples", flush=True)
    # The compiled module runs the forward passes; the (DDP-wrapped) model keeps no_sync, the parameters
    # and the state dict, so checkpoints and the noise probe see the same objects either way.
    forward = torch.compile(model, mode=None if setup.compile_mode == "default" else setup.compile_mode) \
        if setup.compile else model

    dataset = torch.utils.data.TensorDataset(
        torch.tensor(data.train_ids), torch.tensor(data.train_mask), torch.tensor(data.train_labels))
    workers = setup.dataloader_workers
    # The loop's own DistributedSampler, seeded by the trial, one worker included: its shuffle is a function
    # of (seed, epoch), which a restart can replay. Ray's prepare_data_loader leaves it in place; without it,
    # it adds one with seed 0 (the same data order for every seed, so repeats would differ only in their
    # initial weights) and rebuilds the loader without persistent_workers.
    sampler = _ResumableSampler(dataset, num_replicas=session.world_size, rank=session.rank, shuffle=True,
                                seed=setup.seed, drop_last=True)
    loader = session.prepare_data_loader(torch.utils.data.DataLoader(
        dataset, batch_size=plan.micro_batch, sampler=sampler, drop_last=True,
        generator=torch.Generator().manual_seed(setup.seed), num_workers=workers,
        pin_memory=setup.use_gpu if setup.pin_memory is None else setup.pin_memory,
        persistent_workers=workers > 0 if setup.persistent_workers is None else setup.persistent_workers))
    # Examples this rank has drawn: a skipped fp16 step draws its micro-batches without a step, and a
    # restart may plan another micro-batch size (then the position is the nearest micro-batch).
    drawn = progress.get("samples_drawn", step * plan.accumulation * plan.micro_batch)
    micro_batches = _endless_micro_batches(loader, drawn=drawn // plan.micro_batch)
    is_ddp = hasattr(model, "no_sync")
    clip = setup.grad_clip_norm if setup.grad_clip_norm is not None else float("inf")
    params = [p for p in model.parameters() if p.requires_grad]
    noise, local_sqnorm = _attach_noise_probe(model, params, plan) if setup.noise_scale else (None, None)

    loop_start = time.perf_counter() - progress.get("wall_time_s", 0.0)
    train_time, first_loss = progress.get("train_time_s", 0.0), progress.get("first_loss")
    interval_time, interval_loss, interval_steps = 0.0, 0.0, 0
    first_step_at = None
    gauges = TrialGauges(setup.trial_id, setup.batch_size, setup.metric) if setup.trial_id and session.rank == 0 \
        else None
    model.train()
    while step < total_steps:
        t0 = time.perf_counter()
        step_loss = torch.zeros((), dtype=torch.float64, device=session.device)  # read once per step, below
        small = None
        batches = [next(micro_batches) for _ in range(plan.accumulation)]
        drawn += plan.accumulation * plan.micro_batch
        local_items = [items_in(batch, setup.task) for batch in batches]
        # Examples per step are known; a causal LM's target tokens are summed over the workers (one scalar).
        step_items = sum(local_items) if setup.task == "causal-lm" else setup.batch_size
        if setup.task == "causal-lm" and session.world_size > 1:
            step_items = int(session.all_reduce(torch.tensor(step_items, device=session.device)))
        # Each micro-batch's summed loss over the step's items is its share of the step's mean; DDP averages
        # the workers' gradients, hence × world size. (Each micro-batch's mean ÷ accumulation would weight a
        # short micro-batch's tokens more than a long one's: a mean of means, which one step of B is not.)
        to_mean = session.world_size / max(step_items, 1)
        for k, batch in enumerate(_inputs(b, setup.task, session.device) for b in batches):
            sync = contextlib.nullcontext() if (k == plan.accumulation - 1 or not is_ddp) else model.no_sync()
            with sync:
                with torch.autocast(session.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                    loss = summed_loss(forward, batch, setup) * to_mean
                scaler.scale(loss).backward()
            step_loss += loss.detach()
            if k == 0 and noise is not None and local_sqnorm is None:
                # The first micro-batch's own mean gradient: its mean loss carried to_mean × its items
                # (1 / accumulation for equal micro-batches of examples).
                small = _sqnorm(params) / (to_mean * max(local_items[0], 1)) ** 2
        scale = scaler.get_scale() if scaler.is_enabled() else 1.0
        scaler.unscale_(optimizer)  # true gradients for clipping, the norm and the noise scale
        norm = torch.nn.utils.clip_grad_norm_(params, clip)  # norm before clipping
        if local_sqnorm is not None:
            # The DDP hook saw this worker's summed gradient × to_mean, not ÷ its own items (the same for
            # equal micro-batches of examples).
            small = local_sqnorm() / (to_mean * max(sum(local_items), 1)) ** 2
        # The step's one wait for the device: loss, norm and the noise probe's norm come back together.
        readings = torch.stack([step_loss, norm.double()] + ([small.double()] if small is not None else [])).tolist()
        step_loss, grad_norm = readings[0], readings[1]
        if small is not None:
            noise.add(readings[2] / scale ** 2, grad_norm ** 2)
        # fp16 overflow, not divergence: the scaler skips the step and halves the scale. Decided on what all
        # ranks share (the all-reduced gradient's norm and the scale; a rank's own loss only when it is the
        # only rank), and only while the scale is at least 1: a gradient still non-finite at a scale below 1
        # is non-finite unscaled, which no smaller scale mends, so the trial has diverged (else: skips forever).
        overflow = scaler.is_enabled() and not math.isfinite(grad_norm) and scale >= 1.0 and (
            session.world_size > 1 or math.isfinite(step_loss))
        if overflow:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            continue
        lr = scheduler.get_last_lr()[0]
        # The clipped norm is of the all-reduced gradient, so every rank takes the same branch here; a
        # local loss can only be trusted alone when there is a single rank.
        if not math.isfinite(grad_norm) or (session.world_size == 1 and not math.isfinite(step_loss)):
            _report_divergence(session, setup, plan, step, lr, step_loss, grad_norm, loop_start)
            return
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if first_step_at is None:
            first_step_at = time.time()
            first_loss = step_loss if first_loss is None else first_loss
        elapsed = time.perf_counter() - t0
        interval_time += elapsed
        train_time += elapsed
        interval_loss += step_loss
        interval_steps += 1
        samples = step * setup.batch_size
        if samples not in report_at:
            continue
        metrics = evaluate(forward, session, data, setup, batch_size=eval_batch)
        if samples == setup.budget_samples and data.dev_ids is not None:
            dev = evaluate(forward, session, data, setup, on_dev=True, batch_size=eval_batch)
            metrics.update({f"dev_{key}": dev[key] for key in ("accuracy", "eval_loss", "eval_examples") if key in dev})
        metrics.update(_noise_metrics(noise, session))
        # Mean training loss over the interval and the first step's loss, averaged over workers: every
        # rank sees the same numbers and takes the same branch.
        train_loss, initial_loss = (session.all_reduce(torch.tensor(
            [interval_loss / interval_steps, first_loss], dtype=torch.float64, device=session.device))
            / session.world_size).tolist()
        if train_loss > setup.divergence_factor * initial_loss:
            _report_divergence(session, setup, plan, step, lr, train_loss, grad_norm, loop_start)
            return
        metrics.update({
            "samples_seen": samples, "steps": step, "batch_size": setup.batch_size,
            "alpha": setup.alpha, "warmup_fraction": setup.warmup_fraction, "warmup_steps": warmup,
            "peak_lr": setup.peak_lr, "lr": lr, "train_loss": train_loss,
            "grad_norm": grad_norm, "samples_per_s": interval_steps * setup.batch_size / interval_time,
            "train_time_s": train_time, "wall_time_s": time.perf_counter() - loop_start,
            "micro_batch": plan.micro_batch, "accumulation": plan.accumulation, "workers": plan.workers,
            "first_step_at": first_step_at, "trial_started_at": setup.started_at,
            "reported_at": time.time(), "diverged": False, "resumed_from_samples": resumed_from_samples,
        })
        interval_time, interval_loss, interval_steps = 0.0, 0.0, 0
        if gauges is not None:
            gauges.publish(metrics)
        with tempfile.TemporaryDirectory() as directory:
            if session.rank == 0:
                _save_state(directory, model, optimizer, scheduler, scaler, step, {
                    "train_time_s": train_time, "wall_time_s": metrics["wall_time_s"], "first_loss": first_loss,
                    "samples_drawn": drawn})
            session.report(metrics, directory if session.rank == 0 else None)


def _noise_metrics(noise, session) -> dict:
    """B_simple now: each estimate's moving average, averaged over workers, then their ratio. NaN where
    the averaged |G|² is not yet positive, and (with ``noise_scale_note``) where a single batch size was
    all there was."""
    if noise is None:
        return {"grad_sq": math.nan, "trace_sigma": math.nan, "b_simple": math.nan,
                "b_small": math.nan, "noise_scale_note": "off or " + NOT_MEASURABLE}
    local = torch.tensor(noise.averages(), dtype=torch.float64, device=session.device)
    grad_sq, trace = (session.all_reduce(local) / session.world_size).cpu().tolist()
    return {"grad_sq": grad_sq, "trace_sigma": trace, "b_simple": b_simple(grad_sq, trace), "b_small": noise.b_small,
            "noise_scale_note": ""}


def _report_divergence(session, setup, plan, step, lr, loss, grad_norm, loop_start) -> None:
    metrics = {name: value for name, value in WORST_METRIC.items()
               if setup.task == "sequence-classification" or name != "accuracy"}
    metrics.update({
        "samples_seen": step * setup.batch_size, "steps": step, "batch_size": setup.batch_size,
        "alpha": setup.alpha, "warmup_fraction": setup.warmup_fraction, "peak_lr": setup.peak_lr, "lr": lr,
        "train_loss": loss, "grad_norm": grad_norm, "wall_time_s": time.perf_counter() - loop_start,
        "micro_batch": plan.micro_batch, "accumulation": plan.accumulation, "workers": plan.workers,
        "diverged": True,
    })
    session.report(metrics, None)
