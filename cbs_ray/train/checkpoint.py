"""A trial's checkpoint: what a restarted trial (a dead worker, a resumed experiment) continues from.

Rank 0 writes one ``state.pt`` at every milestone (under FSDP gathered whole first: ``state_dicts``) into the directory
it reports to Tune/Train; a restart is handed the last one by its session's ``get_checkpoint()``.

Branch mode (``run_plan``) shares state between runs as well: the trunk publishes the same ``state.pt`` at
each branch point into a directory of its own (``publish_state``: written aside and renamed, so a reader never
sees half a file) and marks its end with ``TRUNK_DONE``; a branch waits for its point (``wait_for_trunk``) and
starts from it (``load_branch_start``: the weights and the optimizer's state, not the LR schedule).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Optional

import torch

from cbs_ray.records.names import TRUNK_DONE  # the report reads it too: defined with the other names
from cbs_ray.train.fsdp import is_fsdp

__all__ = ["STATE_FILE", "state_dicts", "TRUNK_DONE", "save_state", "load_state", "publish_state", "mark_trunk_done",
           "wait_for_trunk", "load_branch_start"]

STATE_FILE = "state.pt"


def state_dicts(model, optimizer) -> tuple[dict, dict]:
    """The model's and the optimizer's state dicts as a checkpoint holds them. A DDP (or single) model's own. An
    FSDP2 model's gathered whole onto rank 0's CPU (``torch.distributed.checkpoint.state_dict`` with
    ``full_state_dict`` and ``cpu_offload``; the other ranks get empty dicts): a collective, which every rank
    calls. The checkpoint is then one ``state.pt`` as DDP's, its optimizer state keyed by parameter name; the
    price is that rank 0's host memory holds the whole model and its optimizer state once."""
    if not is_fsdp(model):
        raw = model.module if hasattr(model, "module") else model
        return raw.state_dict(), optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=options), get_optimizer_state_dict(model, optimizer, options=options)


def save_state(directory: str, model, optimizer, scheduler, scaler, step: int, progress: dict, *,
               states: Optional[tuple[dict, dict]] = None) -> None:
    """Weights, optimizer, schedule and fp16 loss scale, the step, the random stream (dropout's), and the
    clocks and first loss a restart continues from. ``states``: the (model, optimizer) state dicts where the
    caller gathered them (``state_dicts``: FSDP's, on every rank); else this model's own."""
    raw = model.module if hasattr(model, "module") else model
    device = next(raw.parameters()).device
    rng = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(device)
    model_state, optimizer_state = states if states is not None else state_dicts(model, optimizer)
    torch.save({"model": model_state, "optimizer": optimizer_state,
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(), "step": step,
                "rng": rng, "progress": progress}, os.path.join(directory, STATE_FILE))


def _read(directory: str) -> dict:
    # On the CPU first (never unpickling code): saved from rank 0's GPU, the tensors would otherwise all
    # land on that GPU, on every rank of the node; loading the state dicts copies them where they belong.
    return torch.load(os.path.join(directory, STATE_FILE), weights_only=True, map_location="cpu")


def _restore_into(state: dict, model, optimizer, scaler) -> None:
    """Weights, optimizer, fp16 loss scale and the random stream of ``state`` into the trial's objects."""
    raw = model.module if hasattr(model, "module") else model
    if is_fsdp(model):  # every rank holds the whole state read from the file, and keeps its shard of it
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True)
        set_model_state_dict(model, state["model"], options=options)
        if optimizer is not None:
            set_optimizer_state_dict(model, optimizer, state["optimizer"], options=options)
    else:
        raw.load_state_dict(state["model"])
        if optimizer is not None:
            optimizer.load_state_dict(state["optimizer"])
    if state.get("scaler"):
        scaler.load_state_dict(state["scaler"])  # fp16: the loss scale found so far, not 65536 again
    # Rank 0's random stream, restored on every rank: all ranks start from one seed. Deterministic either way.
    rng = state.get("rng", {})
    if "cpu" in rng:
        torch.set_rng_state(rng["cpu"])
    device = next(raw.parameters()).device
    if "cuda" in rng and device.type == "cuda":
        torch.cuda.set_rng_state(rng["cuda"], device)


def load_state(checkpoint, model, optimizer, scheduler, scaler) -> tuple[int, dict]:
    """Restore what ``save_state`` wrote from a Tune/Train ``Checkpoint``; returns (step, progress)."""
    with checkpoint.as_directory() as directory:
        state = _read(directory)
    _restore_into(state, model, optimizer, scaler)
    scheduler.load_state_dict(state["scheduler"])
    return int(state["step"]), state.get("progress", {})


def publish_state(path: str, model, optimizer, scheduler, scaler, step: int, progress: dict, *,
                  states: Optional[tuple[dict, dict]] = None) -> bool:
    """``save_state`` into the directory ``path`` (created, parents included), for other runs to read: written
    into a temporary directory beside it and renamed into place, so a reader that sees ``path/state.pt`` sees
    all of it. False, writing nothing, where it is already there (a restarted trunk passing the point again
    would write the same state)."""
    if os.path.exists(os.path.join(path, STATE_FILE)):
        return False
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(path))}.writing-", dir=parent)
    try:
        save_state(temporary, model, optimizer, scheduler, scaler, step, progress, states=states)
        os.rename(temporary, path)  # atomic on one filesystem; replaces an empty directory of that name
    except OSError:
        shutil.rmtree(temporary, ignore_errors=True)
        if os.path.exists(os.path.join(path, STATE_FILE)):
            return False  # another writer got there first
        raise
    return True


def trunk_checkpoint_path(checkpoint_dir: str, samples: int) -> str:
    """Where the trunk's checkpoint at ``samples`` is published (a directory holding ``STATE_FILE``), for
    the branches that start from it and the driver that waits for it."""
    return f"{checkpoint_dir.rstrip('/')}/samples_{samples}"


def mark_trunk_done(checkpoint_dir: str, how: str) -> None:
    """``TRUNK_DONE`` in the trunk's checkpoint directory, holding ``how`` it ended (the samples it reached,
    or ``failed``): the trunk will write no more checkpoints, so a branch still waiting for one stops waiting.
    Written by the trunk when it finishes or diverges, by the driver (``methods.branch.trunk_watch``) when it fails
    for good."""
    os.makedirs(checkpoint_dir, exist_ok=True)
    with open(os.path.join(checkpoint_dir, TRUNK_DONE), "w") as marker:
        marker.write(f"{how}\n")


def wait_for_trunk(path: str, checkpoint_dir: str, *, poll_s: float = 2.0, log=None) -> None:
    """Block until the trunk's checkpoint ``path/state.pt`` exists. A ``RuntimeError`` once the trunk has
    ended (``TRUNK_DONE`` in ``checkpoint_dir``) without writing it: it diverged before, or never reached, that
    point."""
    state = os.path.join(path, STATE_FILE)
    done = os.path.join(checkpoint_dir, TRUNK_DONE)
    waited = False
    while not os.path.exists(state):
        if os.path.exists(done):
            if os.path.exists(state):  # written just before the marker
                break
            raise RuntimeError(f"branch: the trunk ended without its checkpoint {state} (it diverged or stopped "
                               f"before that point); this branch has nothing to start from")
        if not waited and log is not None:
            log(f"branch: waiting for the trunk's checkpoint {state}")
        waited = True
        time.sleep(poll_s)


def load_branch_start(path: str, model, optimizer, scaler, *, keep_optimizer: bool = True) -> dict:
    """Start a branch from the trunk's checkpoint in ``path``: the weights, the optimizer's state (Adam's
    moments and step count, the paper's choice; ``keep_optimizer=False`` leaves the fresh optimizer's: see
    ``methods.branch.runs`` for why either is a choice), the fp16 loss scale and the random stream. Not the LR
    schedule: the branch's plan sets its LR. Returns the trunk's progress (``samples_drawn``: where the branch
    continues the trunk's data order)."""
    state = _read(path)
    _restore_into(state, model, optimizer if keep_optimizer else None, scaler)
    return state.get("progress", {})
