"""Two gloo ranks on this machine, as Ray Train would set them up, for the multiproc tests. Functions
that ``torch.multiprocessing.spawn`` runs must be importable by name in the child: they live in test modules
(whose folder pytest puts on sys.path) or here (tests/ is on sys.path through ``pythonpath``)."""

import dataclasses
import os

import torch

from helpers.training import RecordingSession


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GlooCapture(RecordingSession):
    """One of two gloo ranks, with DDP and a DistributedSampler as Ray Train's prepare_model and
    prepare_data_loader set them up (a sampler already there is kept; otherwise one with seed 0)."""

    world_size = 2

    def __init__(self):
        import torch.distributed as dist

        super().__init__()
        self.rank = dist.get_rank()

    def prepare_model(self, model):
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)

    def prepare_data_loader(self, loader):
        from torch.utils.data import DataLoader, DistributedSampler

        self.loader = loader
        if isinstance(loader.sampler, DistributedSampler):
            return loader
        return DataLoader(loader.dataset, batch_size=loader.batch_size, drop_last=True,
                          sampler=DistributedSampler(loader.dataset, shuffle=True))

    def all_reduce(self, tensor):
        import torch.distributed as dist

        dist.all_reduce(tensor)
        return tensor

    def all_reduce_min(self, value: int) -> int:
        """The smallest ``value`` over the two ranks, as Ray Train's session (``TrainSession``) takes it."""
        from cbs_ray.train.sessions import TrainSession

        return TrainSession.all_reduce_min(self, value)


def join_gloo(rank: int, port: int) -> None:
    """Join the two-rank gloo group; a rank left waiting in a collective fails after a minute, not 30."""
    from datetime import timedelta

    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=60))
    torch.set_num_threads(1)


def train_recording_losses(overrides: list[str], session, *, warmup_fraction: float = 0.0,
                           plan_changes: dict | None = None) -> list[float]:
    """One B=16 trial of the spec ``overrides`` give, trained in this process by ``train.loop.train_loop`` on
    ``session`` (joined to a gloo group or not): every optimizer step's loss, in order (``loop._optimizer_step``
    wrapped for the run). ``plan_changes``: fields of the trial's ``RunPlan`` to replace."""
    from cbs_ray.records.trial_point import BATCH_KEY, encode_batch
    from cbs_ray.spec.load import load_spec
    from cbs_ray.train import loop
    from cbs_ray.train.config import TrialConfig
    from cbs_ray.tune.api import prepare

    losses, step = [], loop._optimizer_step

    def recording_step(*args, **kwargs):
        readings = step(*args, **kwargs)
        losses.append(readings.loss)
        return readings

    loop._optimizer_step = recording_step
    try:
        spec = load_spec(None, overrides)
        ready = prepare(spec)
        cfg = TrialConfig.from_tune(spec, {BATCH_KEY: encode_batch(16), "alpha": 0.5,
                                           "warmup_fraction": warmup_fraction},
                                    budget_samples=ready.budget_samples, model_config=ready.model_config)
        if plan_changes:
            cfg = dataclasses.replace(cfg, plan=dataclasses.replace(cfg.plan, **plan_changes))
        loop.train_loop(cfg, ready.data, session)
    finally:
        loop._optimizer_step = step
    return losses
