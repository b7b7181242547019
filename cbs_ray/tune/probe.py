"""The probe's spec (``--probe``, ``search.batch_sizes: auto``): one short trial that measures the gradient
noise scale B_simple; ``methods.scratch.search.run_probe`` runs it and proposes a batch-size grid centred on it.
"""

from __future__ import annotations

import copy

from cbs_ray.spec.resolve import packing_on
from cbs_ray.spec.rules import validate
from cbs_ray.spec.schema import SearchSpec

__all__ = ["probe_spec"]


def probe_spec(spec: SearchSpec) -> SearchSpec:
    """A one-trial, one-batch-size version of ``spec`` that measures B_simple: at ``base_batch`` for
    ``batch_sizes: auto`` (else the geometric middle of the grid), trained for the ASHA grace period,
    with gradient accumulation (4 micro-batches) when there is only one worker."""
    probe = copy.deepcopy(spec)
    batches = spec.batch_sizes
    batch = batches[len(batches) // 2]
    probe.name = f"{spec.name}-probe"
    probe.search.batch_sizes, probe.search.num_trials = [batch], 1
    # One trial whatever the search's strategy (a grid would train every alpha × warmup point) and repeats.
    probe.search.strategy, probe.search.early_stopping, probe.search.repeats = "random", False, 1
    probe.search.method = type(spec.search)().method  # the default method: a branch search's probe is one plain trial
    probe.branch = type(spec.branch)()
    probe.training.budget_samples, probe.training.budget_epochs = spec.asha.grace_period_samples, None
    # A token budget's packed texts stay packed in the probe, which trains a sample budget.
    probe.training.budget_tokens, probe.data.packing = None, packing_on(spec)
    probe.training.noise_scale = True
    if spec.resources.workers_per_trial == 1 and batch >= 4:
        probe.training.micro_batch_size = min(spec.training.micro_batch_size or batch, batch // 4)

    validate(probe)
    return probe
