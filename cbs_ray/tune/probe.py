"""The probe (``--probe``, ``search.batch_sizes: auto``): its spec, one short trial that measures the gradient
noise scale B_simple, and the batch-size grid centred on what it measured. The driver runs it in its own Ray
session, before the search's stages (``tune.driver.run_probe``).
"""

from __future__ import annotations

import copy

from cbs_ray.maths.noise_scale import proposed_grid
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.resolve import packing_on
from cbs_ray.spec.rules import validate
from cbs_ray.spec.schema import SearchSpec

__all__ = ["probe_spec", "probe_grid"]


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
    probe.method_sections = {key: type(section)() for key, section in spec.method_sections.items()}
    probe.training.budget_samples, probe.training.budget_epochs = spec.asha.grace_period_samples, None
    # A token budget's packed texts stay packed in the probe, which trains a sample budget.
    probe.training.budget_tokens, probe.data.packing = None, packing_on(spec)
    probe.training.noise_scale = True
    if spec.resources.workers_per_trial == 1 and batch >= 4:
        probe.training.micro_batch_size = min(spec.training.micro_batch_size or batch, batch // 4)

    validate(probe)
    return probe


def probe_grid(probe: SearchSpec, experiment_path: str, train_examples: int) -> tuple[float, list[int]]:
    """What the probe's experiment measured: (B_simple averaged over the run, the proposed grid, each batch within
    the ``train_examples`` of the training set); a ``SpecError`` when it could not measure B_simple."""
    from cbs_ray.analysis.tables import noise_scale_table  # pandas: a --dry-run's plan loads none of it
    from cbs_ray.records.storage import load_history

    _, noise = noise_scale_table(load_history(experiment_path))
    if noise["mean"] is None or not noise["mean"] > 0:
        raise SpecError(f"search.batch_sizes: the probe could not measure B_simple "
                        f"({noise['note'] or 'the estimate did not settle; lengthen asha.grace_period_samples'})")
    # Each batch size must split over the workers (the smallest is at least one sample per worker).
    grid = proposed_grid(noise["mean"], smallest=max(2, probe.resources.workers_per_trial), largest=train_examples)
    print(f"probe: B_simple = {noise['mean']:.3g} (early {noise['early']:.3g}); proposed batch sizes {grid}",
          flush=True)
    return noise["mean"], grid
