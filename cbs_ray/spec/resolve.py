"""The spec resolved against its data: the budget in samples (from samples, epochs or tokens), whether
texts are packed and their tokens per sample, and an auto batch grid written into the spec.
"""

from __future__ import annotations

from cbs_ray.maths.budget import samples_for_tokens
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.rules import check_budget, validate
from cbs_ray.spec.schema import SearchSpec

__all__ = ["packing_on", "tokens_per_sample"]


def apply_batch_grid(spec: SearchSpec, grid: list[int]) -> list[str]:
    """Replace ``batch_sizes: auto`` by ``grid`` and make the cadence fit it: ``eval_every_samples`` is
    raised to a multiple of the largest batch, the budget and grace period to multiples of that.
    Returns what changed, one line each, for the user to see."""
    t, a = spec.training, spec.asha
    changes = []
    spec.search.batch_sizes = sorted(grid)
    largest = max(grid)
    if t.eval_every_samples % largest:
        new = -(-t.eval_every_samples // largest) * largest
        changes.append(f"training.eval_every_samples {t.eval_every_samples} -> {new} (a multiple of B={largest})")
        t.eval_every_samples = new
    if t.budget_samples is not None and t.budget_samples % t.eval_every_samples:
        new = -(-t.budget_samples // t.eval_every_samples) * t.eval_every_samples
        changes.append(f"training.budget_samples {t.budget_samples} -> {new}")
        t.budget_samples = new
    if a.grace_period_samples % t.eval_every_samples:
        new = -(-a.grace_period_samples // t.eval_every_samples) * t.eval_every_samples
        changes.append(f"asha.grace_period_samples {a.grace_period_samples} -> {new}")
        a.grace_period_samples = new
    if spec.search.num_trials < len(grid):
        changes.append(f"search.num_trials {spec.search.num_trials} -> {len(grid)} (one per batch size)")
        spec.search.num_trials = len(grid)
    validate(spec)
    return changes


def resolve_budget(spec: SearchSpec, train_examples: int, tokens_per_sample: int | None = None) -> int:
    """The equal-sample budget in samples, resolving ``budget_epochs`` against the training set size (with
    packed texts, its number of blocks) and ``budget_tokens`` into whole samples of ``tokens_per_sample``
    tokens (the user's items' length; default ``max_seq_length``, the spec's packed blocks), and checking batch
    sizes against the data."""

    largest = spec.batch_sizes[-1]
    if largest > train_examples:
        raise SpecError(f"search.batch_sizes: largest batch {largest} exceeds the {train_examples} "
                        "training examples")
    t = spec.training
    if t.budget_samples is not None:
        return t.budget_samples
    if t.budget_tokens is not None and tokens_per_sample is not None:  # the user's items: checked here
        samples = samples_for_tokens(t.budget_tokens, tokens_per_sample, t.eval_every_samples)[0]
        if samples <= 0:
            raise SpecError(f"training.budget_tokens: {t.budget_tokens} tokens is less than one report interval "
                            f"({t.eval_every_samples} samples of {tokens_per_sample} tokens)")
        check_budget(spec, samples)
        return samples
    if t.budget_tokens is not None:  # validated: a whole number of report intervals within the budget rules
        return samples_for_tokens(t.budget_tokens, spec.data.max_seq_length, t.eval_every_samples)[0]
    assert t.budget_epochs is not None  # the spec's one budget (rules._one_budget) when the others are unset
    samples = int(t.budget_epochs * train_examples) // t.eval_every_samples * t.eval_every_samples
    if samples <= 0:
        raise SpecError(f"training.budget_epochs: {t.budget_epochs} epochs of {train_examples} examples is "
                        f"less than one report interval ({t.eval_every_samples} samples)")
    check_budget(spec, samples)
    return samples


# ---- budgets in tokens (causal LMs with packed data) -------------------------------------------------

def packing_on(spec: SearchSpec) -> bool:
    """Whether the spec's texts are packed into full blocks (``data.packing``; None: on with a token budget).
    Only a causal LM's texts are packed."""
    packing = spec.data.packing
    if packing is None:
        packing = spec.training.budget_tokens is not None
    return packing and spec.task == "causal-lm"


def tokens_per_sample(spec: SearchSpec) -> int | None:
    """Tokens in every training sample when the texts are packed (``data.max_seq_length``), else None: padded
    samples hold as many tokens as their text, and ``samples_seen`` says nothing exact about tokens."""
    return spec.data.max_seq_length if packing_on(spec) else None
