"""The largest per-worker micro-batch that fits in accelerator memory.

Before a GPU trial trains, each worker tries forward + backward + optimizer step at growing micro-batch
sizes and catches out-of-memory: the plan is the largest power of two p such that p / 0.9 still fits, so a
10 % margin is left for fragmentation and longer-lived buffers. The workers take the minimum so DDP never
waits on a rank that could not fit its share. Results are cached per (model, sequence length, precision,
device) so later trials on the same kind of device do not probe again. The search is pure and takes any
``fits(micro_batch) -> bool``, so it is tested with a fake memory function.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Callable

__all__ = ["plan_micro_batch", "PROBE_LIMIT", "ProbeCache", "probe_key", "cuda_fits"]


PROBE_LIMIT = 2 ** 16
"""The largest micro-batch the probe tries (per worker); trials cap the result at their own share."""


def plan_micro_batch(fits: Callable[[int], bool], *, upper: int = PROBE_LIMIT, safety: float = 0.9) -> int:
    """The micro-batch to train with: the largest power of two p <= ``upper`` that fits with room to
    spare, i.e. ``fits(ceil(p / safety))``. Doubling p from 1, so log2(p) + 2 tries; the answer does not
    depend on the share of a particular batch, so it can be cached and capped per trial. Raises
    MemoryError if not even 1 fits with the margin."""
    def fits_with_margin(p: int) -> bool:
        return fits(math.ceil(p / safety))

    if not fits_with_margin(1):
        raise MemoryError("not even a micro-batch of 1 fits in memory")
    p = 1
    while p * 2 <= upper and fits_with_margin(p * 2):
        p *= 2
    return p


def probe_key(model: dict, seq_len: int, precision: str, device_name: str) -> str:
    what = model.get("name") or json.dumps(model.get("config"), sort_keys=True)
    return f"{what}|seq={seq_len}|{precision}|{device_name}"


class ProbeCache:
    """The planned micro-batch per probe key and the limit it was probed up to, in a JSON file (default
    ~/.cache/cbs_ray/). A plan below its limit is the device's memory ceiling and serves any later limit;
    a plan that reached its limit serves only limits up to that one (a larger one is probed again)."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path or Path.home() / ".cache" / "cbs_ray" / "micro_batch.json")

    def _load(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def get(self, key: str, limit: int) -> int | None:
        entry = self._load().get(key)
        if not isinstance(entry, dict):
            return None
        micro, probed_to = int(entry["micro_batch"]), int(entry["limit"])
        return min(micro, limit) if micro * 2 <= probed_to or limit <= probed_to else None

    def put(self, key: str, micro_batch: int, limit: int) -> None:
        entries = self._load()
        entries[key] = {"micro_batch": int(micro_batch), "limit": int(limit)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entries, indent=2))
        tmp.replace(self.path)  # atomic: concurrent trials never read half a file


def cuda_fits(model, make_optimizer, *, seq_len: int, vocab_size: int, task: str, dtype) -> Callable[[int], bool]:
    """``fits(m)`` for a CUDA model: one forward + backward + optimizer step on random tokens at micro-batch
    m under autocast ``dtype``; False on out-of-memory. Gradients and optimizer state are dropped after."""
    import torch

    device = next(model.parameters()).device

    def fits(m: int) -> bool:
        optimizer = make_optimizer()
        try:
            ids = torch.randint(0, vocab_size, (m, seq_len), device=device)
            labels = ids if task == "causal-lm" else torch.zeros(m, dtype=torch.long, device=device)
            with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
                loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
            loss.backward()
            optimizer.step()
            torch.cuda.synchronize()
            return True
        except torch.cuda.OutOfMemoryError:
            return False
        finally:
            optimizer.zero_grad(set_to_none=True)
            del optimizer
            torch.cuda.empty_cache()

    return fits
