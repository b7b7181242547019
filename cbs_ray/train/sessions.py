"""Where a trial's worker runs: the ``Session`` seam. The loop (train_loop.py) is the same everywhere; only
the session differs: ``LocalSession`` in-process inside the Tune trial (one CPU worker), ``TrainSession`` in a
Ray Train worker (DDP, gloo or NCCL), and test sessions that record reports or join a gloo group.

A session has ``world_size``, ``rank``, ``device``, ``prepare_model``, ``prepare_data_loader``, ``all_reduce``,
``all_reduce_min``, ``report(metrics, checkpoint_dir)`` and ``get_checkpoint()``.
"""

from __future__ import annotations

from typing import Optional

import torch

from cbs_ray.ray_internals import per_report_logger_modules

__all__ = ["LocalSession", "TrainSession", "per_report_loggers", "quiet_per_report_logs"]


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
    return per_report_logger_modules()


def quiet_per_report_logs() -> None:
    """Raise those loggers to WARNING in this process; their warnings and errors still show."""
    import logging

    for name in per_report_loggers():
        logging.getLogger(name).setLevel(logging.WARNING)
