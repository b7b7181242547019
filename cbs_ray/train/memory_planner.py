"""The largest per-worker micro-batch that fits in accelerator memory.

Before a GPU trial trains, each worker tries training steps (forward + backward + optimizer step, twice,
so the optimizer's state is resident as in training) at growing micro-batch sizes, with the model in
training mode, and catches out-of-memory: the plan is the largest power of two p such that p / 0.9 still fits, so a
10 % margin is left for fragmentation and longer-lived buffers. The workers take the minimum so DDP never
waits on a rank that could not fit its share. Results are cached per (model, sequence length, precision,
device) so later trials on the same kind of device do not probe again. The search is pure and takes any
``fits(micro_batch) -> bool``, so it is tested with a fake memory function.

On a CPU there is no out-of-memory exception to catch (the machine swaps, or the kernel kills the
process), so the probe runs only against a limit the user gives: ``cpu_fits`` measures the worker
process's peak resident memory during the step, and refuses without running any size whose peak,
extrapolated from the sizes already run, would exceed the limit.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Callable

from filelock import FileLock

__all__ = ["plan_micro_batch", "NOTHING_FITS", "PROBE_LIMIT", "ProbeCache", "probe_key", "cuda_fits", "cpu_fits",
           "extrapolated_peak", "PeakResidentMemory"]


PROBE_LIMIT = 2 ** 16
"""The largest micro-batch the probe tries (per worker); trials cap the result at their own share."""

NOTHING_FITS = "not even a micro-batch of 1 fits in memory"
"""The probe's MemoryError message; the search ends at the first trial that raises it (nothing_fits.py)."""


def plan_micro_batch(fits: Callable[[int], bool], *, upper: int = PROBE_LIMIT, safety: float = 0.9) -> int:
    """The micro-batch to train with: the largest power of two p <= ``upper`` that fits with room to
    spare, i.e. ``fits(ceil(p / safety))``. Doubling p from 1, so log2(p) + 2 tries; the answer does not
    depend on the share of a particular batch, so it can be cached and capped per trial. Raises
    MemoryError if not even 1 fits with the margin."""
    def fits_with_margin(p: int) -> bool:
        return fits(math.ceil(p / safety))

    if not fits_with_margin(1):
        raise MemoryError(NOTHING_FITS)
    p = 1
    while p * 2 <= upper and fits_with_margin(p * 2):
        p *= 2
    return p


def probe_key(model: dict, seq_len: int, precision: str, device_name: str, *, training: str = "") -> str:
    """The cache key: the model, sequence length, precision and device, and ``training``: what else sets a
    step's memory (the optimizer's state, gradient checkpointing, DDP's buckets)."""
    what = model.get("name") or json.dumps(model.get("config"), sort_keys=True)
    return f"{what}|seq={seq_len}|{precision}|{device_name}" + (f"|{training}" if training else "")


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
        """Add one entry. The read-modify-write holds a file lock (``filelock``: concurrent trials on a node lost
        each other's entries) and writes through a temporary file of its own, renamed into place (a reader
        never sees half a file)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{self.path}.lock"):
            entries = self._load()
            entries[key] = {"micro_batch": int(micro_batch), "limit": int(limit)}
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(json.dumps(entries, indent=2))
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise


def _probe_step(model, optimizer, m: int, *, seq_len: int, vocab_size: int, task: str, dtype,
                batch_of: Callable[[int], dict] | None = None) -> None:
    """Two training steps (forward + backward + optimizer step) at micro-batch m, on the model's device,
    under autocast ``dtype`` (None: full precision): on random tokens, or on ``batch_of(m)`` (the model's
    inputs, on its device: a user's model and data, ``sources.user_objects.UserObjects.probe_workload``). The first
    allocates the optimizer's state (Adam: two numbers per parameter); the second's forward and backward run
    beside it, as every training step after the first does."""
    import torch

    device = next(model.parameters()).device
    if batch_of is not None:
        inputs = batch_of(m)
    else:
        ids = torch.randint(0, vocab_size, (m, seq_len), device=device)
        labels = ids if task == "causal-lm" else torch.zeros(m, dtype=torch.long, device=device)
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    for _ in range(2):
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = model(**inputs)["loss"]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


OUT_OF_MEMORY_SIGNS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
                       "CUDNN_STATUS_NOT_ENOUGH_WORKSPACE")
"""What a RuntimeError says when a library under torch ran out of GPU memory."""


def cuda_fits(model, make_optimizer, *, seq_len: int, vocab_size: int, task: str, dtype,
              batch_of: Callable[[int], dict] | None = None,
              agree: Callable[[bool], bool] = lambda ok: ok) -> Callable[[int], bool]:
    """``fits(m)`` for a CUDA model: two training steps on random tokens at micro-batch m under autocast
    ``dtype`` (``_probe_step``); False on out-of-memory. Gradients and optimizer state are dropped after.
    ``agree``: the answer every rank takes (a sharded model's ranks: ``train.microbatch_probe.agreed_by_all``)."""
    import torch

    def runs(m: int) -> bool:
        optimizer = make_optimizer()
        try:
            _probe_step(model, optimizer, m, seq_len=seq_len, vocab_size=vocab_size, task=task, dtype=dtype,
                        batch_of=batch_of)
            torch.cuda.synchronize()
            return True
        except torch.cuda.OutOfMemoryError:
            return False
        except RuntimeError as e:  # out of memory inside cuBLAS/cuDNN or a CUDA call, raised as RuntimeError
            if any(sign in str(e) for sign in OUT_OF_MEMORY_SIGNS):
                return False
            raise
        finally:
            optimizer.zero_grad(set_to_none=True)
            del optimizer
            torch.cuda.empty_cache()

    def fits(m: int) -> bool:
        return agree(runs(m))

    return fits


class PeakResidentMemory:
    """This process's peak resident memory (Linux: VmHWM, reset through /proc/self/clear_refs; elsewhere
    the peak since the process started, which can only make the probe more cautious)."""

    def reset(self) -> None:
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            pass

    def bytes(self) -> int:
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


def extrapolated_peak(baseline: int, runs: list[tuple[int, int]], m: int) -> int | None:
    """The peak memory expected at micro-batch m, from ``runs`` of (micro-batch, measured peak) and the
    ``baseline`` before any step: the largest run's memory above the baseline, scaled in proportion to m.
    Gradients and optimizer state do not grow with m, so this overestimates: a size it allows stays
    within the limit. None before any run (the first size is run unseen; the planner starts at 1)."""
    if not runs:
        return None
    largest, peak = max(runs)
    return baseline + math.ceil(max(peak - baseline, 0) * m / largest)


def cpu_fits(model, make_optimizer, *, seq_len: int, vocab_size: int, task: str, dtype, limit_bytes: int,
             memory: PeakResidentMemory | None = None, log: Callable[[str], None] = lambda _: None,
             batch_of: Callable[[int], dict] | None = None,
             agree: Callable[[bool], bool] = lambda ok: ok) -> Callable[[int], bool]:
    """``fits(m)`` on a CPU: the process's peak resident memory during two training steps at micro-batch m
    (``_probe_step``) stays within ``limit_bytes``. A size whose extrapolated peak exceeds the limit
    is refused without running it. ``agree``: the answer every rank takes, both whether to run a size and whether
    it fitted (a sharded model's ranks run each size together: ``train.microbatch_probe.agreed_by_all``)."""
    memory = memory or PeakResidentMemory()
    memory.reset()
    baseline = memory.bytes()
    runs: list[tuple[int, int]] = []

    def fits(m: int) -> bool:
        expected = extrapolated_peak(baseline, runs, m)
        here = expected is None or expected <= limit_bytes
        if not agree(here):
            log(f"micro-batch {m}: {(expected or 0) / 2**20:.0f} MiB expected, over the {limit_bytes / 2**20:.0f} MiB "
                "limit; not run" if not here else f"micro-batch {m}: over the limit on another rank; not run")
            return False
        optimizer = make_optimizer()
        memory.reset()
        try:
            _probe_step(model, optimizer, m, seq_len=seq_len, vocab_size=vocab_size, task=task, dtype=dtype,
                        batch_of=batch_of)
            peak = memory.bytes()
        finally:
            optimizer.zero_grad(set_to_none=True)
            del optimizer
        runs.append((m, peak))
        log(f"micro-batch {m}: peak {peak / 2**20:.0f} MiB{'' if peak <= limit_bytes else ', over the limit'}")
        return agree(peak <= limit_bytes)

    return fits
