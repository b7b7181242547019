"""The built-in ``markov`` language (``data.builtin_task: markov``, ``task: causal-lm``): sequences from a Zipfian,
low-rank Markov chain whose next-token distribution is known exactly, so that a model's loss can be read as the
**exact excess loss** over the language's own entropy (a KL divergence, with no estimate of the entropy in it).

Token ``j`` (0-based) has Zipf rank ``j + 1``. After token ``i`` the next token's logits are

    −a · ln(rank_j) + s · ⟨U_i, W_j⟩ / √r

(``a`` the Zipf exponent, ``s`` the coupling, U and W ∈ R^{V×r} standard normal from the language's seed, r the
rank); the first token of a sequence is drawn from the Zipf unigram p_j ∝ rank_j^−a. Pure numpy: the chain
(``markov_chain``), sampling (``sample_sequences``) and the exact loss (``excess_loss_sum``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["FRESH_BUDGETS", "MarkovChain", "markov_data", "excess_loss_sum", "log_softmax", "markov_chain", "sample_sequences"]


FRESH_BUDGETS = 4
"""The built-in language's training set holds at least this many budgets of sequences (``markov_data``): no run
draws a sequence twice before it has trained on this many budgets (a ladder's validation runs stop by 4·D)."""


@dataclass(frozen=True)
class MarkovChain:
    """A first-order chain over ``vocab_size`` tokens: ``first_log_probs`` [V] (the first token's distribution)
    and ``next_log_probs`` [V, V] (row i: the next token's log-probabilities after token i)."""

    first_log_probs: np.ndarray
    next_log_probs: np.ndarray

    @property
    def vocab_size(self) -> int:
        return len(self.first_log_probs)

    def next_entropy(self) -> np.ndarray:
        """The entropy (nats) of the next token after each token [V]."""
        p = np.exp(self.next_log_probs)
        return -np.sum(p * self.next_log_probs, axis=1)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log softmax over the last axis, in float64."""
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def markov_chain(vocab_size: int, rank: int, zipf_exponent: float, coupling: float, seed: int) -> MarkovChain:
    """The chain of the built-in language: deterministic in its five parameters (``seed`` draws U and W)."""
    if vocab_size < 2 or rank < 1:
        raise ValueError(f"needs vocab_size >= 2 and rank >= 1, got {vocab_size} and {rank}")
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((vocab_size, rank))
    w = rng.standard_normal((vocab_size, rank))
    zipf = -zipf_exponent * np.log(np.arange(1, vocab_size + 1, dtype=np.float64))
    logits = zipf[None, :] + coupling * (u @ w.T) / math.sqrt(rank)
    return MarkovChain(first_log_probs=log_softmax(zipf), next_log_probs=log_softmax(logits))


def sample_sequences(chain: MarkovChain, count: int, length: int, seed) -> np.ndarray:
    """``count`` sequences of ``length`` tokens (int64 [count, length]), deterministic in ``seed`` (what ``numpy.random.default_rng`` takes): the first token
    from ``chain.first_log_probs``, each next one from the row of the token before it. Every row's CDF is laid end
    to end (row i shifted by i), so one ``searchsorted`` draws a whole column."""
    rng = np.random.default_rng(seed)
    vocab = chain.vocab_size
    sequences = np.empty((count, length), dtype=np.int64)
    if count == 0 or length == 0:
        return sequences
    first = np.cumsum(np.exp(chain.first_log_probs))
    sequences[:, 0] = np.searchsorted(first / first[-1], rng.random(count), side="right").clip(max=vocab - 1)
    cdf = np.cumsum(np.exp(chain.next_log_probs), axis=1)
    cdf /= cdf[:, -1:]
    stacked = (cdf + np.arange(vocab)[:, None]).ravel()
    for t in range(1, length):
        previous = sequences[:, t - 1]
        at = np.searchsorted(stacked, previous + rng.random(count), side="right") - previous * vocab
        sequences[:, t] = np.clip(at, 0, vocab - 1)
    return sequences


def excess_loss_sum(model_log_probs: np.ndarray, previous_tokens: np.ndarray, next_log_probs: np.ndarray) -> float:
    """Σ over positions of the model's cross-entropy against the true next-token distribution minus that
    distribution's entropy: Σ_t KL(P(· | x_{t−1}) ‖ Q_t), in nats. ``model_log_probs`` [N, V] is the model's
    log-probabilities of the next token at N positions, ``previous_tokens`` [N] the token before each,
    ``next_log_probs`` the chain's [V, V] (``MarkovChain.next_log_probs``). Divide by N for the mean excess loss
    (0 for the true chain, > 0 otherwise)."""
    true_log_probs = np.asarray(next_log_probs, dtype=np.float64)[np.asarray(previous_tokens)]
    q = np.asarray(model_log_probs, dtype=np.float64)
    return float(np.sum(np.exp(true_log_probs) * (true_log_probs - q)))


def markov_data(*, vocab_size: int, rank: int, zipf_exponent: float, coupling: float, seed: int, length: int,
                train_examples: int, eval_examples: int):
    """The chain and its (training, evaluation) sequences, int64 [examples, length]: the training set drawn with
    seed (``seed``, 1), the evaluation set with (``seed``, 2), so a language's sets are the same in every run."""
    chain = markov_chain(vocab_size, rank, zipf_exponent, coupling, seed)
    return (chain, sample_sequences(chain, train_examples, length, seed=[seed, 1]),
            sample_sequences(chain, eval_examples, length, seed=[seed, 2]))
