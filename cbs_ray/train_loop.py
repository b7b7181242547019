"""The per-worker training loop of one trial: the same code runs in a Ray Train worker (multi-worker or
GPU trials) and in-process inside the Tune trial (single-CPU-worker trials). Only the ``Session``
(sessions.py) differs.

Per optimizer step: ``accumulation`` micro-batches, each micro-batch's summed loss divided by the items
in the whole step (examples; for a causal LM the target tokens, counted over all micro-batches and
workers), so the accumulated gradient is the mean over the effective batch exactly as one step of B
would compute it; DDP's all-reduce only on the last micro-step (``no_sync``), global-norm clipping, then
one optimizer and one scheduler step. Samples are counted in
samples (B per step), the LR schedule in optimizer steps. At every ``eval_every_samples`` milestone the
validation metric is summed over each worker's exact shard of the eval set, all-reduced, reported and
(rank 0) checkpointed.

In stages, after torchtune's recipes and Levanter's trainer: building (``_setup_model``,
``_setup_optimizer``, ``_restore``, ``_setup_data``), one optimizer step that returns its readings
(``_optimizer_step``), and what happens every ``eval_every_samples`` (``_at_milestone``). Every report is
one ``TrialReport``. The trial's options are read from its spec's sections (``cfg.spec.training``).
What the model and data are is one question the stages ask their ``source``: ``BuiltinSource`` (the
spec's HF model and the driver's tokenized arrays) or the user's own objects (``user_objects.UserObjects``).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import tempfile
import time
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

import torch

from .budget import BatchPlan, milestones, plan_batch
from .checkpoint import load_branch_start, load_state, mark_trunk_done, publish_state, save_state, wait_for_trunk
from .lr_schedule import lr_multiplier
from .metrics import TrialGauges
from .noise_scale import NOT_MEASURABLE, NoiseScaleMeter, b_simple
from .optimizer import make_optimizer

if TYPE_CHECKING:
    from .trial import TrialConfig

__all__ = ["TrialReport", "StepReadings", "train_loop", "evaluate", "WORST_METRIC", "BuiltinSource", "loop_source"]

WORST_METRIC = {"accuracy": 0.0, "eval_loss": float("inf"), "perplexity": float("inf"), "bleu": 0.0}
_METRICS_OF_EVERY_TASK = ("eval_loss", "perplexity")


@dataclass(kw_only=True)
class TrialReport:
    """One report of a trial: a row of its Tune results, whose columns the summary reads. A milestone's
    report sets every field; a diverged trial's report has the worst metric as its evaluation and leaves
    unset (None, and out of the reported dict) what it never measured: noise, warmup steps, throughput,
    clocks other than the wall time, and the resume point."""

    evaluation: dict
    """``evaluate``'s metrics (eval_loss, perplexity; accuracy and eval_examples for classification), at
    the full budget the dev set's as ``dev_*``; a diverged trial: ``WORST_METRIC``'s for its task."""
    grad_sq: Optional[float] = None
    """|G|² of the gradient noise scale (moving average, averaged over workers); NaN: not measurable."""
    trace_sigma: Optional[float] = None
    """tr(Σ) of the gradient noise scale; NaN: not measurable."""
    b_simple: Optional[float] = None
    """B_simple = tr(Σ) / |G|² (McCandlish et al. 2018); NaN: not measurable."""
    b_small: Optional[int] = None
    """The small batch the noise probe measures the gradient at."""
    noise_scale_note: Optional[str] = None
    """Why the noise scale is NaN ("" when measured)."""
    samples_seen: int
    steps: int
    """Optimizer steps taken (fp16 overflow skips do not count)."""
    batch_size: int
    alpha: float
    warmup_fraction: float
    warmup_steps: Optional[int] = None
    peak_lr: float
    lr: float
    """The LR of the last step taken."""
    train_loss: float
    """Mean training loss over the report interval, averaged over workers (diverged: the loss that
    diverged)."""
    grad_norm: float
    """The last step's global gradient norm, before clipping."""
    samples_per_s: Optional[float] = None
    """Training throughput over the report interval (evaluation and checkpoints excluded)."""
    train_time_s: Optional[float] = None
    """Seconds in optimizer steps since the trial started (a restart continues the clock)."""
    wall_time_s: float
    """Seconds since the loop started, building excluded (a restart continues the clock)."""
    micro_batch: int
    accumulation: int
    workers: int
    first_step_at: Optional[float] = None
    """When the first optimizer step (since the last start) ended, epoch seconds."""
    trial_started_at: Optional[float] = None
    reported_at: Optional[float] = None
    diverged: bool
    resumed_from_samples: Optional[int] = None
    """The checkpoint's samples this run continued from (0: from the start)."""
    node_id: str = ""
    """The Ray node ID of the worker that reported (rank 0's is the one Tune keeps; an in-process trial's
    its own); empty outside Ray. Node IPs are alike when several raylets share one host, their IDs not."""
    role: Optional[str] = None
    """Branch mode: the run's role (``branch_plan.ROLES``: trunk, branch, schedule); None from scratch."""
    start_samples: Optional[int] = None
    """Branch mode: the trunk checkpoint a branch started from (0 for the trunk and the schedule run)."""
    tokens_seen: Optional[int] = None
    """With packed data (every sample the same tokens): ``samples_seen`` in tokens."""

    def to_dict(self) -> dict:
        """What is reported to Tune: the evaluation's metrics, then every field that is set."""
        metrics = dict(self.evaluation)
        for f in fields(self)[1:]:
            value = getattr(self, f.name)
            if value is not None:
                metrics[f.name] = value
        return metrics


class StepReadings(NamedTuple):
    """What one optimizer step read back from the device (its one wait), and what became of the step."""

    loss: float
    """This rank's training loss of the step (the mean over the effective batch, its share of it)."""
    grad_norm: float
    """The global gradient norm before clipping (of the all-reduced gradient: the same on every rank)."""
    lr: float
    """The LR the step was taken at (NaN for a skipped step)."""
    skipped: bool
    """An fp16 overflow: the scaler skipped the step and lowered its scale."""
    diverged: bool
    """A non-finite gradient norm (or a lone rank's loss) no loss scale can mend: no step was taken."""


@dataclass
class _Parts:
    """What building makes and the step and the milestones use."""

    model: torch.nn.Module
    """DDP-wrapped where there are workers: no_sync, the parameters and the state dict."""
    forward: Callable
    """What runs the forward passes: the compiled module with ``training.compile``, else ``model``."""
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler
    amp_dtype: Optional[torch.dtype]
    plan: BatchPlan
    eval_batch: int
    micro_batches: Any
    """The endless iterator of host micro-batches, continuing where a checkpoint left it."""
    params: list
    clip: float
    is_ddp: bool
    noise: Optional[NoiseScaleMeter]
    local_sqnorm: Optional[Callable[[], torch.Tensor]]
    source: Any
    """Where the model and data come from: ``BuiltinSource`` (the spec's) or ``user_objects.UserObjects``."""


@dataclass
class _Progress:
    """Where the trial stands: the step, the examples drawn and the clocks a checkpoint saves, and the
    current report interval."""

    step: int
    drawn: int
    """Examples this rank has drawn: a skipped fp16 step draws its micro-batches without a step, and a
    restart may plan another micro-batch size (then the position is the nearest micro-batch)."""
    resumed_from_samples: int
    loop_start: float
    train_time: float
    first_loss: Optional[float]
    first_step_at: Optional[float] = None
    samples: int = 0
    """Samples seen (absolute: a branch counts from the trunk's checkpoint it started at)."""
    interval_time: float = 0.0
    interval_loss: float = 0.0
    interval_steps: int = 0
    interval_samples: int = 0


# ---- pieces of the loop ----------------------------------------------------------------------------

def autocast_dtype(precision: str, device: torch.device) -> Optional[torch.dtype]:
    """The autocast dtype for ``precision`` on ``device`` (None: plain fp32)."""
    if precision == "auto":
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def summed_loss(model, batch: dict, cfg: TrialConfig) -> torch.Tensor:
    """The micro-batch's loss summed over its items (see ``items_in``): the model's own mean loss times the
    examples for classification; the (label-smoothed) cross-entropy on the logits otherwise."""
    task, label_smoothing = cfg.task, cfg.spec.training.label_smoothing
    if task != "causal-lm" and not label_smoothing:
        return model(**batch).loss * len(batch["labels"])
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    labels = batch["labels"]
    if task == "causal-lm":
        logits, labels = logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten()
    return torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100, reduction="sum",
                                             label_smoothing=label_smoothing)


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


class BuiltinSource:
    """The spec path's model and data: the HF model built from ``cfg.model_config``, the driver's tokenized
    arrays (``data.PreparedData``) as (ids, mask, labels) micro-batches, and this module's loss, item count
    and evaluation. ``user_objects.UserObjects`` answers the same questions for the user's own model and
    data; ``_setup`` picks one and the stages ask it."""

    def __init__(self, data, task: str):
        self.data, self.task = data, task
        self.items_vary = task == "causal-lm"  # a causal LM's target tokens; else examples, known per step
        self.has_dev = data.dev_ids is not None

    def build_model(self, cfg: TrialConfig) -> torch.nn.Module:
        from .model import build_model

        return build_model(cfg.model, cfg.task, cfg.model_config)

    def training_data(self):
        """(the training set, its collator: None for torch's default)."""
        d = self.data
        return torch.utils.data.TensorDataset(
            torch.tensor(d.train_ids), torch.tensor(d.train_mask), torch.tensor(d.train_labels)), None

    def items_in(self, batch) -> int:
        return items_in(batch, self.task)

    def inputs(self, batch, device) -> dict:
        return _inputs(batch, self.task, device)

    def summed_loss(self, forward, inputs: dict, cfg: TrialConfig, items: int) -> torch.Tensor:
        return summed_loss(forward, inputs, cfg)

    def evaluate(self, model, session, cfg: TrialConfig, **kwargs) -> dict:
        return evaluate(model, session, self.data, cfg, **kwargs)


def loop_source(data, task: str):
    """What the loop trains on: the user's objects as they are, the spec path's arrays through
    ``BuiltinSource`` (a seq2seq task's through ``seq2seq.Seq2SeqSource``)."""
    from .user_objects import UserObjects

    if isinstance(data, UserObjects):
        return data
    if task == "seq2seq":
        from .seq2seq import Seq2SeqSource

        return Seq2SeqSource(data, task)
    return BuiltinSource(data, task)


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
def evaluate(model, session, data, cfg: TrialConfig, *, on_dev: bool = False,
             batch_size: Optional[int] = None) -> dict:
    """Metric over the whole eval set (``on_dev``: the dev set): each rank sums over its exact shard
    (rank::world_size, no padding duplicates) in batches of ``batch_size`` (default
    ``training.eval_batch_size``), sums are all-reduced, then divided."""
    model.eval()
    shard = slice(session.rank, None, session.world_size)
    arrays = (data.dev_ids, data.dev_mask, data.dev_labels) if on_dev else (data.eval_ids, data.eval_mask,
                                                                             data.eval_labels)
    ids, mask, labels = (torch.tensor(a[shard]) for a in arrays)
    sums = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, count
    task = cfg.task
    size = batch_size or cfg.spec.training.eval_batch_size
    amp_dtype = autocast_dtype(cfg.spec.training.precision, session.device)  # the model is evaluated as it trains
    for start in range(0, len(ids), size):
        batch = _inputs((ids[start:start + size], mask[start:start + size], labels[start:start + size]),
                        task, session.device)
        with torch.autocast(session.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        logits = logits.float()
        if task == "causal-lm":
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
    if task == "sequence-classification":
        metrics["accuracy"] = float(sums[1] / sums[2])
        metrics["eval_examples"] = int(sums[2])  # what the accuracy's standard error is computed from
    return metrics


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


def _probe_micro_batch(model, cfg: TrialConfig, session, amp_dtype, source=None) -> tuple[Optional[int], Optional[int]]:
    """On CUDA: the largest micro-batch that fits (memory_planner), cached per model, sequence length,
    precision and device, agreed across ranks by taking the minimum. On a CPU the same within
    ``memory_limit_gb`` of peak resident memory, and skipped without one. Returns the micro-batch cap and
    the largest size known to fit (the agreed probe result, a training step's worth of memory), None
    where the probe was skipped."""
    from .memory_planner import ProbeCache, cpu_fits, cuda_fits, plan_micro_batch, probe_key

    t = cfg.spec.training
    on_gpu = session.device.type == "cuda"
    if not on_gpu and not t.memory_limit_gb:
        if session.rank == 0:
            print("micro-batch probe skipped: not on a GPU and no training.memory_limit_gb", flush=True)
        return t.micro_batch_size, None
    # The spec's model trains on random tokens of the data's padded length; the user's objects on their own
    # longest items (user_objects.UserObjects.probe_workload).
    workload = getattr(source, "probe_workload", None)
    described, seq_len, batch_of = workload(model.to(session.device), session.device) if workload else (
        cfg.model, cfg.probe_seq_len, None)
    device_name = torch.cuda.get_device_name(session.device) if on_gpu else f"cpu<={t.memory_limit_gb}GiB"
    # What else sets a step's memory: the optimizer's state, checkpointing, and DDP's gradient buckets.
    training = "+".join([t.optimizer] + (["checkpointing"] if t.gradient_checkpointing else [])
                        + (["ddp"] if session.world_size > 1 else []))
    key = probe_key(described, seq_len, t.precision, device_name, training=training)
    limit = cfg.probe_limit
    cache = ProbeCache()
    found = cache.get(key, limit)
    if found is None:
        model.to(session.device)
        step_args = dict(seq_len=seq_len, vocab_size=getattr(cfg.model_config, "vocab_size", 0), task=cfg.task,
                         dtype=amp_dtype, batch_of=batch_of)

        def new_optimizer():
            return make_optimizer(model, t, cfg.peak_lr, model_config=cfg.model_config)

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
                fits = cpu_fits(model, new_optimizer, limit_bytes=int(t.memory_limit_gb * 2 ** 30), log=log,
                                **step_args)
            try:
                found = plan_micro_batch(fits, upper=limit)  # for the search's largest share; capped below
            except MemoryError as e:
                raise MemoryError(f"{e} ({device_name}, sequence length {seq_len}, {t.precision})") from None
        del buckets
        model.load_state_dict(initial)
        model.zero_grad(set_to_none=True)
        if session.rank == 0:
            cache.put(key, found, limit)
    largest_fitting = session.all_reduce_min(found)
    agreed = min(largest_fitting, cfg.batch_size // session.world_size)
    return (min(agreed, t.micro_batch_size) if t.micro_batch_size else agreed), largest_fitting


# ---- building -------------------------------------------------------------------------------------

def _setup_model(cfg: TrialConfig, session, amp_dtype, source) -> tuple[torch.nn.Module, BatchPlan, int]:
    """The model (``source``'s: gradient checkpointing on, micro-batch probed where asked), its batch plan
    and evaluation batch, placed on the device and prepared by the session (DDP)."""
    training = cfg.spec.training
    model = source.build_model(cfg)
    if training.gradient_checkpointing:
        # The HF model's own switch (renamed in transformers 5), before DDP wraps the model.
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    micro_cap, fits_up_to = _probe_micro_batch(model, cfg, session, amp_dtype, source) if training.probe_micro_batch \
        else (training.micro_batch_size, None)
    # A forward without gradients needs less memory than a training step of the same size: evaluating in
    # batches no larger than the probed size cannot run out where training did not. Larger could: a
    # causal LM's logits over a large vocabulary, in fp32, grow with the batch whatever the probe's limit.
    eval_batch = min(training.eval_batch_size, fits_up_to) if fits_up_to else training.eval_batch_size
    plan: BatchPlan = _first_batch_plan(cfg, session.world_size, micro_cap)
    if session.rank == 0:
        run = cfg.plan
        print((f"trial ({run.role}, samples {run.start_samples} to {run.stop_samples}, batches "
               f"{[b for _, b in run.batch_schedule]}): " if run else "trial: ")
              + f"{plan}, peak lr {cfg.peak_lr:.3g} (alpha {cfg.alpha:.3g}), {cfg.total_steps} steps, "
              f"{cfg.warmup_steps} warmup steps" + (f", eval batch {eval_batch} (memory)"
                                                    if eval_batch < training.eval_batch_size else ""), flush=True)
    model = session.prepare_model(model.to(session.device))  # Ray's prepare_model moves it too; a local run needs it
    return model, plan, eval_batch


def _first_batch_plan(cfg: TrialConfig, workers: int, micro_cap: Optional[int]) -> BatchPlan:
    """How the first step's batch is made. From scratch: the trial's one batch, micro-batches of at most
    ``micro_cap``. Branch mode: the micro-batch is fixed for the run, planned for the smallest batch of its
    schedule; a larger batch accumulates more micro-batches (``_batch_plan_for``). A run at the trunk's batch
    with the noise scale on, on a single worker, takes micro-batches of half that batch: the trunk's B_simple
    is measured (the probe needs accumulation ≥ 2), and the schedule run trains exactly as the trunk while
    their batches agree."""
    run = cfg.plan
    if run is None:
        return plan_batch(cfg.batch_size, workers, micro_cap)
    if (cfg.spec.training.noise_scale and workers == 1 and run.batch_schedule[0][1] == run.trunk_batch
            and run.trunk_batch >= 2):
        micro_cap = min(micro_cap or run.trunk_batch, run.trunk_batch // 2)
    micro = plan_batch(min(b for _, b in run.batch_schedule), workers, micro_cap).micro_batch
    return _batch_plan_for(cfg.batch_size, micro, workers)


def _batch_plan_for(batch: int, micro: int, workers: int) -> BatchPlan:
    """``batch`` in micro-batches of ``micro`` on each of ``workers`` (branch mode: the run's micro-batch at
    the batch of the step)."""
    per_worker, rest = divmod(batch, workers)
    if rest or per_worker % micro:
        raise ValueError(f"batch {batch} is not a whole number of micro-batches of {micro} on {workers} workers")
    return BatchPlan(batch, micro, per_worker // micro, workers)


def _setup_optimizer(cfg: TrialConfig, model, session, amp_dtype):
    """The optimizer at the trial's peak LR, its LR schedule (warmup, then decay, in optimizer steps) and
    the fp16 gradient scaler (disabled otherwise)."""
    training = cfg.spec.training
    optimizer = make_optimizer(model, training, cfg.peak_lr, model_config=cfg.model_config)
    # fp16 needs loss scaling; bf16 has fp32's exponent range and does not.
    scaler = torch.amp.GradScaler(session.device.type, enabled=amp_dtype == torch.float16)
    if cfg.plan is not None:
        return optimizer, _planned_lr(cfg, optimizer), scaler
    warmup, total_steps, decay = cfg.warmup_steps, cfg.total_steps, training.lr_decay
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_multiplier(step, warmup, total_steps, decay=decay))
    return optimizer, scheduler, scaler


def _planned_lr(cfg: TrialConfig, optimizer) -> torch.optim.lr_scheduler.LambdaLR:
    """Branch mode's schedule: this run's k-th optimizer step at ``plan.lr_at`` of the samples it starts at
    and its batch, as a factor of the LR the optimizer was built at (``cfg.peak_lr``), so layer-wise LR decay's
    groups keep their ratios. Counted in steps taken, as the scratch schedule is: a restart's scheduler state
    is the step it resumes at."""
    run, reference = cfg.plan, cfg.peak_lr
    steps = run.steps()

    def factor(step: int) -> float:
        return run.lr_at(*steps[min(step, len(steps) - 1)]) / reference

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _restore(cfg: TrialConfig, session, model, optimizer, scheduler, scaler) -> tuple[int, dict]:
    """(step, saved progress) of the session's checkpoint; (0, {}) for a trial starting afresh."""
    checkpoint = session.get_checkpoint()
    # A restarted trial (dead worker, resumed experiment) continues from its last milestone, clocks included.
    step, saved = load_state(checkpoint, model, optimizer, scheduler, scaler) if checkpoint else (0, {})
    if step and session.rank == 0:
        print(f"trial: resumed from its checkpoint at {_samples_after(cfg, step)} samples", flush=True)
    if not checkpoint and cfg.plan is not None and cfg.plan.role == "branch":
        return 0, _start_branch(cfg, session, model, optimizer, scheduler, scaler)
    return step, saved


def _start_branch(cfg: TrialConfig, session, model, optimizer, scheduler, scaler) -> dict:
    """A branch's start: wait for the trunk's checkpoint at ``start_samples``, take its weights and optimizer
    state (``checkpoint.load_branch_start``), set the LR back to the branch's own (the loaded state carries
    the trunk's), and return what the branch continues from the trunk: its data position and first loss (the
    divergence test's reference), not its clocks."""
    run = cfg.plan
    path = run.checkpoint_path(run.start_samples)
    wait_for_trunk(path, run.checkpoint_dir, log=lambda line: print(line, flush=True) if session.rank == 0 else None)
    trunk = load_branch_start(path, model, optimizer, scaler)
    for group, lr in zip(optimizer.param_groups, scheduler.get_last_lr()):
        group["lr"] = lr
    if session.rank == 0:
        print(f"branch: started from the trunk's checkpoint at {run.start_samples} samples", flush=True)
    return {"samples_drawn": trunk["samples_drawn"], "first_loss": trunk.get("first_loss")}


def _samples_after(cfg: TrialConfig, step: int) -> int:
    """Samples seen after ``step`` optimizer steps of this run (absolute in branch mode)."""
    if cfg.plan is None:
        return step * cfg.batch_size
    steps = cfg.plan.steps()
    return cfg.plan.stop_samples if step >= len(steps) else steps[step][0]


def _setup_data(cfg: TrialConfig, source, session, plan: BatchPlan, drawn: int):
    """The endless micro-batches of this rank's share of ``source``'s training set, after the ``drawn``
    examples a checkpoint says were taken."""
    training = cfg.spec.training
    dataset, collate = source.training_data()
    if cfg.plan is not None and cfg.plan.largest_batch:
        dataset = _whole_batches(dataset, cfg.plan.largest_batch)
    workers = cfg.dataloader_workers
    # The loop's own DistributedSampler, seeded by the trial, one worker included: its shuffle is a function
    # of (seed, epoch), which a restart can replay. Ray's prepare_data_loader leaves it in place; without it,
    # it adds one with seed 0 (the same data order for every seed, so repeats would differ only in their
    # initial weights) and rebuilds the loader without persistent_workers.
    sampler = _ResumableSampler(dataset, num_replicas=session.world_size, rank=session.rank, shuffle=True,
                                seed=cfg.seed, drop_last=True)
    loader = session.prepare_data_loader(torch.utils.data.DataLoader(
        dataset, batch_size=plan.micro_batch, sampler=sampler, drop_last=True, collate_fn=collate,
        generator=torch.Generator().manual_seed(cfg.seed), num_workers=workers,
        pin_memory=cfg.use_gpu if training.pin_memory is None else training.pin_memory,
        persistent_workers=workers > 0 if training.persistent_workers is None else training.persistent_workers))
    return _endless_micro_batches(loader, drawn=drawn // plan.micro_batch)


def _whole_batches(dataset, batch: int):
    """The first whole number of ``batch`` examples of ``dataset`` (branch mode: ``BranchPlan.largest_batch``):
    every run's epoch is then a whole number of its micro-batches, so runs with different micro-batches walk
    the same data order with the same epoch boundaries."""
    usable = len(dataset) // batch * batch
    if not usable:
        raise ValueError(f"branch mode: the training set ({len(dataset)} examples) holds no whole batch of {batch}")
    return dataset if usable == len(dataset) else torch.utils.data.Subset(dataset, range(usable))


def _setup(cfg: TrialConfig, data, session) -> tuple[_Parts, _Progress]:
    """Everything the steps need, in order: model, optimizer and schedule, restore, data, noise probe."""
    training = cfg.spec.training
    amp_dtype = autocast_dtype(training.precision, session.device)
    source = loop_source(data, cfg.task)
    model, plan, eval_batch = _setup_model(cfg, session, amp_dtype, source)
    optimizer, scheduler, scaler = _setup_optimizer(cfg, model, session, amp_dtype)
    step, saved = _restore(cfg, session, model, optimizer, scheduler, scaler)
    # The compiled module runs the forward passes; the (DDP-wrapped) model keeps no_sync, the parameters
    # and the state dict, so checkpoints and the noise probe see the same objects either way.
    forward = torch.compile(model, mode=None if training.compile_mode == "default" else training.compile_mode) \
        if training.compile else model
    drawn = saved.get("samples_drawn", step * plan.accumulation * plan.micro_batch)
    micro_batches = _setup_data(cfg, source, session, plan, drawn)
    params = [p for p in model.parameters() if p.requires_grad]
    # Branch mode measures the noise scale on the trunk only: its B_simple is what the branch summary plots.
    measured = training.noise_scale and (cfg.plan is None or cfg.plan.role == "trunk")
    noise, local_sqnorm = _attach_noise_probe(model, params, plan) if measured else (None, None)
    parts = _Parts(model=model, forward=forward, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
                   amp_dtype=amp_dtype, plan=plan, eval_batch=eval_batch, micro_batches=micro_batches,
                   params=params, is_ddp=hasattr(model, "no_sync"),
                   clip=training.grad_clip_norm if training.grad_clip_norm is not None else float("inf"),
                   noise=noise, local_sqnorm=local_sqnorm, source=source)
    samples = _samples_after(cfg, step)
    progress = _Progress(step=step, drawn=drawn, resumed_from_samples=samples if step else 0,
                         loop_start=time.perf_counter() - saved.get("wall_time_s", 0.0),
                         train_time=saved.get("train_time_s", 0.0), first_loss=saved.get("first_loss"),
                         samples=samples)
    return parts, progress


# ---- the loop --------------------------------------------------------------------------------------

def train_loop(cfg: TrialConfig, data, session) -> None:
    """Train one (batch size, alpha, warmup) configuration to the equal-sample budget, reporting at
    every milestone. Stops early, reporting ``diverged=True`` and the worst metric, on a non-finite loss
    or gradient norm, or when a report interval's mean loss exceeds ``divergence_factor`` × the first
    step's loss (Adam at a far too high LR blows the loss up without ever producing a NaN).

    Branch mode (``cfg.plan``, see ``branch_plan``): the same loop in samples, from the plan's start to its
    stop, each step at the plan's batch and LR, reporting at the plan's points. The trunk publishes its state
    at each branch point for the branches (``checkpoint.publish_state``) and marks its end (``TRUNK_DONE``);
    a branch starts from the trunk's state at its point (``_start_branch``)."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank (DDP also broadcasts)
    run = cfg.plan
    stop = run.stop_samples if run else cfg.total_steps * cfg.batch_size
    report_at = set(run.report_at if run else milestones(cfg.budget_samples, cfg.spec.training.eval_every_samples))
    save_at = set(run.save_at) if run and run.role == "trunk" else set()
    parts, progress = _setup(cfg, data, session)
    gauges = TrialGauges(cfg.trial_id, cfg.batch_size, cfg.metric) if cfg.trial_id and session.rank == 0 else None
    parts.model.train()
    while progress.samples < stop:
        if run is not None:  # the batch of this step; the micro-batch stays the run's
            parts.plan = _batch_plan_for(run.batch_at(progress.samples), parts.plan.micro_batch, parts.plan.workers)
        t0 = time.perf_counter()
        readings = _optimizer_step(cfg, session, parts)
        progress.drawn += parts.plan.accumulation * parts.plan.micro_batch
        if readings.skipped:
            continue
        if readings.diverged:
            _report_divergence(session, cfg, parts.plan, progress, readings, readings.loss)
            break
        progress.step += 1
        progress.samples += parts.plan.batch_size
        if progress.first_step_at is None:
            progress.first_step_at = time.time()
            progress.first_loss = readings.loss if progress.first_loss is None else progress.first_loss
        elapsed = time.perf_counter() - t0
        progress.interval_time += elapsed
        progress.train_time += elapsed
        progress.interval_loss += readings.loss
        progress.interval_steps += 1
        progress.interval_samples += parts.plan.batch_size
        if progress.samples in report_at and not _at_milestone(cfg, data, session, parts, progress, readings,
                                                               gauges):
            break
        if progress.samples in save_at and session.rank == 0:
            _publish_for_branches(cfg, parts, progress)
    if run is not None and run.role == "trunk" and session.rank == 0:
        mark_trunk_done(run.checkpoint_dir, str(progress.samples))


def _publish_for_branches(cfg: TrialConfig, parts: _Parts, progress: _Progress) -> None:
    """The trunk's state at a branch point, where the branches from it read it: everything a restart would
    take, and the data position a branch continues the trunk's data order from."""
    path = cfg.plan.checkpoint_path(progress.samples)
    if publish_state(path, parts.model, parts.optimizer, parts.scheduler, parts.scaler, progress.step, {
            "samples_drawn": progress.drawn, "first_loss": progress.first_loss, "samples_seen": progress.samples,
            "micro_batch": parts.plan.micro_batch}):
        print(f"trunk: checkpoint for the branches at {progress.samples} samples: {path}", flush=True)


def _optimizer_step(cfg: TrialConfig, session, parts: _Parts) -> StepReadings:
    """One optimizer step over the plan's micro-batches: forward and backward each, unscale and clip, one
    read of the device, then the step taken, skipped (fp16 overflow) or refused (diverged)."""
    plan, scaler, optimizer = parts.plan, parts.scaler, parts.optimizer
    batches = [next(parts.micro_batches) for _ in range(plan.accumulation)]
    step_loss, small, to_mean, local_items = _accumulate_gradients(cfg, session, parts, batches)
    scale = scaler.get_scale() if scaler.is_enabled() else 1.0
    scaler.unscale_(optimizer)  # true gradients for clipping, the norm and the noise scale
    norm = torch.nn.utils.clip_grad_norm_(parts.params, parts.clip)  # norm before clipping
    if parts.local_sqnorm is not None:
        # The DDP hook saw this worker's summed gradient × to_mean, not ÷ its own items (the same for
        # equal micro-batches of examples).
        small = parts.local_sqnorm() / (to_mean * max(sum(local_items), 1)) ** 2
    # The step's one wait for the device: loss, norm and the noise probe's norm come back together.
    readings = torch.stack([step_loss, norm.double()] + ([small.double()] if small is not None else [])).tolist()
    step_loss, grad_norm = readings[0], readings[1]
    if small is not None:
        parts.noise.add(readings[2] / scale ** 2, grad_norm ** 2)
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
        return StepReadings(step_loss, grad_norm, math.nan, skipped=True, diverged=False)
    lr = optimizer.param_groups[0]["lr"]  # what the step is taken at (the scheduler's last LR, or a branch's own)
    # The clipped norm is of the all-reduced gradient, so every rank takes the same branch here; a
    # local loss can only be trusted alone when there is a single rank.
    if not math.isfinite(grad_norm) or (session.world_size == 1 and not math.isfinite(step_loss)):
        return StepReadings(step_loss, grad_norm, lr, skipped=False, diverged=True)
    scaler.step(optimizer)
    scaler.update()
    parts.scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return StepReadings(step_loss, grad_norm, lr, skipped=False, diverged=False)


def _accumulate_gradients(cfg: TrialConfig, session, parts: _Parts, batches: list):
    """Forward and backward over the step's host micro-batches. Returns the step's loss (a device tensor,
    read with the norm), the noise probe's first-micro-batch squared norm (or None), the loss factor
    ``to_mean`` and each micro-batch's items."""
    source, device, amp_dtype = parts.source, session.device, parts.amp_dtype
    step_loss = torch.zeros((), dtype=torch.float64, device=device)  # read once per step, by the caller
    small = None
    local_items = [source.items_in(batch) for batch in batches]
    # Examples per step are known; a causal LM's target tokens (or a user collator's num_items_in_batch)
    # are summed over the workers (one scalar).
    step_items = sum(local_items) if source.items_vary else parts.plan.batch_size  # this step's batch
    if source.items_vary and session.world_size > 1:
        step_items = int(session.all_reduce(torch.tensor(step_items, device=device)))
    # Each micro-batch's summed loss over the step's items is its share of the step's mean; DDP averages
    # the workers' gradients, hence × world size. (Each micro-batch's mean ÷ accumulation would weight a
    # short micro-batch's tokens more than a long one's: a mean of means, which one step of B is not.)
    to_mean = session.world_size / max(step_items, 1)
    last = len(batches) - 1
    for k, batch in enumerate(source.inputs(b, device) for b in batches):
        sync = contextlib.nullcontext() if (k == last or not parts.is_ddp) else parts.model.no_sync()
        with sync:
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                loss = source.summed_loss(parts.forward, batch, cfg, local_items[k]) * to_mean
            parts.scaler.scale(loss).backward()
        step_loss += loss.detach()
        if k == 0 and parts.noise is not None and parts.local_sqnorm is None:
            # The first micro-batch's own mean gradient: its mean loss carried to_mean × its items
            # (1 / accumulation for equal micro-batches of examples).
            small = _sqnorm(parts.params) / (to_mean * max(local_items[0], 1)) ** 2
    return step_loss, small, to_mean, local_items


# ---- at a milestone -------------------------------------------------------------------------------

def _at_milestone(cfg: TrialConfig, data, session, parts: _Parts, progress: _Progress, readings: StepReadings,
                  gauges: Optional[TrialGauges]) -> bool:
    """Evaluate (and at the full budget the dev set), check the interval for divergence, report, and
    checkpoint (rank 0). False when the trial diverged (reported as such) and must stop."""
    samples = progress.samples
    evaluation = parts.source.evaluate(parts.forward, session, cfg, batch_size=parts.eval_batch)
    if samples == cfg.budget_samples and parts.source.has_dev:
        dev = parts.source.evaluate(parts.forward, session, cfg, on_dev=True, batch_size=parts.eval_batch)
        evaluation.update({f"dev_{key}": dev[key] for key in ("accuracy", "bleu", "eval_loss", "eval_examples") if key in dev})
    noise = _noise_metrics(parts.noise, session)
    if cfg.plan is not None and cfg.plan.role != "trunk":
        noise["noise_scale_note"] = f"not measured on a branch-mode {cfg.plan.role} run (the trunk's is plotted)"
    # Mean training loss over the interval and the first step's loss, averaged over workers: every
    # rank sees the same numbers and takes the same branch.
    train_loss, initial_loss = (session.all_reduce(torch.tensor(
        [progress.interval_loss / progress.interval_steps, progress.first_loss], dtype=torch.float64,
        device=session.device)) / session.world_size).tolist()
    if train_loss > cfg.spec.training.divergence_factor * initial_loss:
        _report_divergence(session, cfg, parts.plan, progress, readings, train_loss)
        return False
    report = _trial_report(
        cfg, parts.plan, progress, readings, train_loss, evaluation=evaluation, **noise,
        warmup_steps=cfg.warmup_steps, samples_per_s=progress.interval_samples / progress.interval_time,
        train_time_s=progress.train_time, first_step_at=progress.first_step_at, trial_started_at=cfg.started_at,
        reported_at=time.time(), diverged=False, resumed_from_samples=progress.resumed_from_samples)
    progress.interval_time, progress.interval_loss, progress.interval_steps = 0.0, 0.0, 0
    progress.interval_samples = 0
    metrics = report.to_dict()
    if gauges is not None:
        gauges.publish(metrics)
    with tempfile.TemporaryDirectory() as directory:
        if session.rank == 0:
            save_state(directory, parts.model, parts.optimizer, parts.scheduler, parts.scaler, progress.step, {
                "train_time_s": progress.train_time, "wall_time_s": report.wall_time_s,
                "first_loss": progress.first_loss, "samples_drawn": progress.drawn})
        session.report(metrics, directory if session.rank == 0 else None)
    return True


def _trial_report(cfg: TrialConfig, plan: BatchPlan, progress: _Progress, readings: StepReadings,
                  train_loss: float, **fields_of_this_report) -> TrialReport:
    """The report at the trial's current step: what every report has, plus this one's own fields. ``plan``
    is the batch in use (branch mode: the last step's, with its peak LR by the alpha rule)."""
    run = cfg.plan
    return TrialReport(
        samples_seen=progress.samples, steps=progress.step, batch_size=plan.batch_size,
        alpha=cfg.alpha, warmup_fraction=cfg.warmup_fraction,
        peak_lr=run.peak_lr(plan.batch_size) if run else cfg.peak_lr, lr=readings.lr,
        train_loss=train_loss, grad_norm=readings.grad_norm, wall_time_s=time.perf_counter() - progress.loop_start,
        micro_batch=plan.micro_batch, accumulation=plan.accumulation, workers=plan.workers, node_id=ray_node_id(),
        role=run.role if run else None, start_samples=run.start_samples if run else None,
        tokens_seen=progress.samples * cfg.tokens_per_sample if cfg.tokens_per_sample else None,
        **fields_of_this_report)


def ray_node_id() -> str:
    """The Ray node this process runs on, or "" outside a Ray worker or driver (the in-process tests).
    Ray is not imported here for the asking: a process that never imported it is not in Ray."""
    import sys

    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return ""
    return ray.get_runtime_context().get_node_id() or ""


def _report_divergence(session, cfg: TrialConfig, plan: BatchPlan, progress: _Progress, readings: StepReadings,
                       train_loss: float) -> None:
    """Report a diverged trial: the worst metric for its task, no checkpoint."""
    worst = {name: value for name, value in WORST_METRIC.items() if name in _METRICS_OF_EVERY_TASK
             or (name, cfg.task) in (("accuracy", "sequence-classification"), ("bleu", "seq2seq"))}
    if cfg.metric not in worst:  # a compute_metrics key: the worst its direction allows
        worst[cfg.metric] = -math.inf if cfg.spec.search.mode == "max" else math.inf
    report = _trial_report(cfg, plan, progress, readings, train_loss, evaluation=worst, diverged=True)
    session.report(report.to_dict(), None)


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
