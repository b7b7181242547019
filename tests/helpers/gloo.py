"""Two gloo ranks on this machine, as Ray Train would set them up, for the multiproc tests. Functions
that ``torch.multiprocessing.spawn`` runs must be importable by name in the child: they live in test modules
(whose folder pytest puts on sys.path) or here (tests/ is on sys.path through ``pythonpath``)."""

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
