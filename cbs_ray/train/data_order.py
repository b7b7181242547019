"""The training data's order: a seeded ``DistributedSampler`` that resumes where a checkpoint stopped,
and an endless stream of micro-batches over epochs.
"""

from __future__ import annotations

import itertools

import torch


class ResumableSampler(torch.utils.data.DistributedSampler):
    """A DistributedSampler whose epoch can start ``skip`` indices in, without loading what comes before
    (a restarted trial's position in its epoch)."""

    skip = 0

    def __iter__(self):
        return itertools.islice(super().__iter__(), self.skip, None)


def endless_micro_batches(loader, drawn: int = 0):
    """The loader's micro-batches, epoch after epoch, after the first ``drawn`` (what the trial took before
    its checkpoint). The sampler shuffles by (seed, epoch), the same on every rank, so a restarted trial
    continues the data order exactly where it stopped, mid-epoch included."""
    epoch, skip = divmod(drawn, len(loader))
    while True:
        loader.sampler.set_epoch(epoch)
        loader.sampler.skip = skip * loader.batch_size
        yield from loader
        epoch, skip = epoch + 1, 0
