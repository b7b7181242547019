"""Averages of the iterates (Polyak averaging's kin), read beside a constant-LR run's raw weights: at a constant LR
the raw iterate sits on an LR-noise floor that hides how far the run has got (on the markov language's scoping runs
B_crit read 225 raw against 154 averaged at 24.6 k samples; docs/benchmarks-archive.md#issue-36), and Zhang et
al. 2025 read their constant-LR runs through such an average.

Polynomial-decay averaging (Shamir & Zhang 2013, "Stochastic Gradient Descent for Non-smooth Optimization"):
θ̄_t = (1 − w_t) θ̄_{t−1} + w_t θ_t with w_t = (η + 1) / (t + η), t = 1, 2, …: an average over roughly the last
1/(η + 1) of the run whatever its length, so the reading at D and at 4·D weigh the same share of their runs
(η = 0 is the plain running mean). Pure; ``train.averaging`` applies it to a model.
"""

from __future__ import annotations

__all__ = ["POLYNOMIAL_DECAY_ETA", "polynomial_decay_weight"]

POLYNOMIAL_DECAY_ETA = 8.0
"""η of the ladder's average: w_t = 9 / (t + 8), about the last ninth of the steps (Shamir & Zhang's η = 3 weighs
more of the early, far-from-converged iterates)."""


def polynomial_decay_weight(t: int, eta: float = POLYNOMIAL_DECAY_ETA) -> float:
    """w_t = (η + 1) / (t + η), the weight of the t-th iterate (t ≥ 1; w_1 = 1: the average starts at the first)."""
    if t < 1:
        raise ValueError(f"t counts iterates from 1, got {t}")
    return (eta + 1.0) / (t + eta)
