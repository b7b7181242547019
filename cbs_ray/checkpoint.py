"""A trial's checkpoint: what a restarted trial (a dead worker, a resumed experiment) continues from.

Rank 0 writes one ``state.pt`` at every milestone into the directory it reports to Tune/Train; a restart
is handed the last one by its session's ``get_checkpoint()``.
"""

from __future__ import annotations

import os

import torch

__all__ = ["STATE_FILE", "save_state", "load_state"]

STATE_FILE = "state.pt"


def save_state(directory: str, model, optimizer, scheduler, scaler, step: int, progress: dict) -> None:
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


def load_state(checkpoint, model, optimizer, scheduler, scaler) -> tuple[int, dict]:
    """Restore what ``save_state`` wrote from a Tune/Train ``Checkpoint``; returns (step, progress)."""
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
