"""The micro-batch probe inside a trial: the largest micro-batch that fits (``train.memory_planner``),
agreed by every worker, cached per model and device.

Under FSDP (``training.parallelism: fsdp``) the probe runs on the sharded model, so it measures the memory of one
rank (its shard of the parameters, gradients and optimizer state, plus a block's gathered parameters and the
activations). Every probe step is then a collective, so every rank must try the same sizes in the same order:
each answer of ``fits`` (and, on a CPU, each decision to run a size at all) is agreed by an all-reduce MIN before
the search goes on (``agreed_by_all``), and every rank ends with the same micro-batch. On a GPU an out-of-memory on one
rank only, inside a block's all-gather, leaves the others waiting in it until the process group's timeout: FSDP
shards evenly, so the ranks run out together in practice.
"""

from __future__ import annotations

from typing import Optional

import torch

from cbs_ray.train.config import TrialConfig
from cbs_ray.train.fsdp import is_fsdp, local_tensors, restore_local_tensors
from cbs_ray.train.memory_planner import ProbeCache, cpu_fits, cuda_fits, plan_micro_batch, probe_key
from cbs_ray.train.optimizer import make_optimizer


def probe_micro_batch_size(model, cfg: TrialConfig, session, amp_dtype,
                           source=None) -> tuple[Optional[int], Optional[int]]:
    """On CUDA: the largest micro-batch that fits (memory_planner), cached per model, sequence length,
    precision and device, agreed across ranks by taking the minimum. On a CPU the same within
    ``memory_limit_gb`` of peak resident memory, and skipped without one. Returns the micro-batch cap and
    the largest size known to fit (the agreed probe result, a training step's worth of memory), None
    where the probe was skipped."""

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
    # What else sets a step's memory: the optimizer's state, checkpointing, DDP's gradient buckets or FSDP's
    # shards (one rank's share of the model: the number of ranks sets it).
    sharded = is_fsdp(model)
    training = "+".join([t.optimizer] + (["checkpointing"] if t.gradient_checkpointing else [])
                        + ([f"fsdp{session.world_size}"] if sharded else ["ddp"] if session.world_size > 1 else []))
    key = probe_key(described, seq_len, t.precision, device_name, training=training)
    limit = cfg.probe_limit
    cache = ProbeCache()
    found = cache.get(key, limit)
    if found is None:
        model.to(session.device)
        step_args = dict(seq_len=seq_len, vocab_size=getattr(cfg.model_config, "vocab_size", 0), task=cfg.task,
                         dtype=amp_dtype, batch_of=batch_of, agree=agreed_by_all(session) if sharded else _alone)

        def new_optimizer():
            return make_optimizer(model, t, cfg.peak_lr, model_config=cfg.model_config)

        def log(line: str) -> None:
            if session.rank == 0:
                print(f"micro-batch probe: {line}", flush=True)

        # The probe's optimizer steps move the weights and its random batches draw from the RNG: both are
        # put back, so a trial trains the same whether its plan was probed or read from the cache.
        initial = local_tensors(model) if sharded else {
            name: value.detach().to("cpu", copy=True) for name, value in model.state_dict().items()}
        # Measured as it will train: a pretrained model comes in eval mode, without dropout and (in
        # transformers) without gradient checkpointing. DDP will keep a second copy of the gradients in
        # its all-reduce buckets; the probe runs before DDP wraps the model, so it holds as much aside.
        model.train()
        buckets = torch.zeros(sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad),
                              dtype=torch.uint8, device=session.device) \
            if session.world_size > 1 and not sharded else None
        with torch.random.fork_rng(devices=[session.device] if on_gpu else []):
            if on_gpu:
                fits = cuda_fits(model, new_optimizer, **step_args)
            else:
                fits = cpu_fits(model, new_optimizer, limit_bytes=int((t.memory_limit_gb or 0) * 2 ** 30), log=log,
                                **step_args)
            try:
                found = plan_micro_batch(fits, upper=limit)  # for the search's largest share; capped below
            except MemoryError as e:
                raise MemoryError(f"{e} ({device_name}, sequence length {seq_len}, {t.precision})") from None
        del buckets
        restore_local_tensors(model, initial) if sharded else model.load_state_dict(initial)
        model.zero_grad(set_to_none=True)
        if session.rank == 0:
            cache.put(key, found, limit)
    largest_fitting = session.all_reduce_min(found)
    agreed = min(largest_fitting, cfg.batch_size // session.world_size)
    return (min(agreed, t.micro_batch_size) if t.micro_batch_size else agreed), largest_fitting


def _alone(ok: bool) -> bool:
    return ok


def agreed_by_all(session):
    """``agree(ok)``: True only where every rank's ``ok`` is (an all-reduce MIN), so every rank of a sharded model
    takes the same branch of the probe's search and runs the same collectives."""

    def agree(ok: bool) -> bool:
        return session.all_reduce_min(int(ok)) == 1

    return agree
