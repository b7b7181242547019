"""The built-in markov language (``data.markov``): its chain, its sampling and the exact excess loss, on a
two-token chain computed by hand; the spec path's data and evaluation on it."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from cbs_ray.data.markov import FRESH_BUDGETS, MarkovChain, excess_loss_sum, markov_chain, sample_sequences
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec

# A two-token chain: after 0, P(0) = 0.9; after 1, P(1) = 0.8; the first token is 0 or 1 with 1/2 each.
TWO = MarkovChain(first_log_probs=np.log([0.5, 0.5]), next_log_probs=np.log([[0.9, 0.1], [0.2, 0.8]]))


def test_excess_loss_of_a_uniform_model_on_the_two_token_chain():
    """KL(P(·|0) ‖ uniform) = 0.9 ln 1.8 + 0.1 ln 0.2 = 0.368064; KL(P(·|1) ‖ uniform) = 0.2 ln 0.4 + 0.8 ln 1.6 =
    0.192745 (by hand); two positions after 0 and one after 1: 2·0.368064 + 0.192745 = 0.928873."""
    uniform = np.log(np.full((3, 2), 0.5))
    assert excess_loss_sum(uniform, np.array([0, 0, 1]), TWO.next_log_probs) == pytest.approx(0.928873, abs=1e-6)


def test_excess_loss_is_zero_for_the_true_chain_and_its_entropy_is_the_rest():
    """The true distribution: no excess; its cross-entropy is then the entropy, H(0.9, 0.1) = 0.325083 and
    H(0.2, 0.8) = 0.500402 nats (by hand)."""
    assert excess_loss_sum(TWO.next_log_probs[[0, 1]], np.array([0, 1]), TWO.next_log_probs) == pytest.approx(0.0, abs=1e-12)
    assert TWO.next_entropy() == pytest.approx([0.325083, 0.500402], abs=1e-6)
    # A model that is wrong after 1 only (says 0.5/0.5 there): the excess is that row's KL alone.
    model = np.log([[0.9, 0.1], [0.5, 0.5]])
    assert excess_loss_sum(model, np.array([0, 1]), TWO.next_log_probs) == pytest.approx(0.192745, abs=1e-6)


def test_sampling_follows_the_two_token_chain():
    """40 000 sequences of 3 tokens: the first token 0 half the time, 0 → 0 at 0.9, 1 → 1 at 0.8 (each within
    4 standard errors, < 0.011)."""
    seqs = sample_sequences(TWO, 40_000, 3, seed=0)
    assert seqs.shape == (40_000, 3) and seqs.dtype == np.int64 and set(np.unique(seqs)) == {0, 1}
    assert abs((seqs[:, 0] == 0).mean() - 0.5) < 0.011
    prev, nxt = seqs[:, :-1].ravel(), seqs[:, 1:].ravel()
    assert abs((nxt[prev == 0] == 0).mean() - 0.9) < 0.006
    assert abs((nxt[prev == 1] == 1).mean() - 0.8) < 0.008
    assert np.array_equal(seqs, sample_sequences(TWO, 40_000, 3, seed=0))      # deterministic in the seed
    assert not np.array_equal(seqs, sample_sequences(TWO, 40_000, 3, seed=1))


def test_the_chain_is_zipf_where_there_is_no_coupling():
    """Coupling 0: every row is the Zipf unigram rank^−a; V = 2, a = 1: (1, 1/2) normalised = (2/3, 1/3)."""
    chain = markov_chain(2, 1, 1.0, 0.0, seed=5)
    assert np.exp(chain.first_log_probs) == pytest.approx([2 / 3, 1 / 3])
    assert np.exp(chain.next_log_probs) == pytest.approx(np.array([[2 / 3, 1 / 3], [2 / 3, 1 / 3]]))
    coupled = markov_chain(2, 1, 1.0, 3.0, seed=5)
    assert np.exp(coupled.next_log_probs).sum(axis=1) == pytest.approx([1.0, 1.0])
    assert not np.allclose(coupled.next_log_probs[0], coupled.next_log_probs[1])   # the token before matters


MARKOV = ["task=causal-lm", "model.config={model_type: gpt2, n_embd: 16, n_layer: 1, n_head: 2, n_positions: 16}",
          "data.builtin_task=markov", "data.markov_vocab_size=32", "data.markov_rank=4", "data.max_seq_length=8",
          "data.builtin_eval_examples=64", "data.builtin_train_examples=16", "training.budget_samples=512", "training.eval_every_samples=128",
          "asha.grace_period_samples=128", "search.batch_sizes=[16, 32]", "search.metric=excess_loss",
          "search.mode=min"]


def test_the_spec_path_prepares_fresh_sequences_and_evaluates_the_exact_excess_loss():
    """The training set holds FRESH_BUDGETS budgets of sequences (no repeat within 2·D); the evaluation of a
    model that predicts the true chain reports excess_loss 0 (eval_loss: the drawn tokens' −log P, an estimate
    of the entropy); a uniform model's excess is ln V minus the exact entropy of the contexts."""
    from cbs_ray.data.prepare import prepare_data
    from cbs_ray.sources.builtin import evaluate
    from cbs_ray.train.config import TrialConfig
    from cbs_ray.train.sessions import LocalSession

    spec = load_spec(None, MARKOV)
    data, budget = prepare_data(spec), spec.training.budget_samples
    assert data.train_examples == FRESH_BUDGETS * 512 and data.train_ids.shape[1] == 8 and data.vocab_size == 32
    assert data.train_mask.all() and data.true_next_log_probs.shape == (32, 32)
    setup = TrialConfig.from_tune(spec, {"log2_batch": 4, "alpha": 1.0, "warmup_fraction": 0.0},
                                  budget_samples=budget, model_config=None)
    true_next = torch.tensor(data.true_next_log_probs)

    class TrueChain(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            return SimpleNamespace(logits=true_next[input_ids])

    class Uniform(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            return SimpleNamespace(logits=torch.zeros(*input_ids.shape, 32))

    exact = evaluate(TrueChain(), LocalSession(), data, setup)
    previous, following = data.eval_ids[:, :-1].ravel(), data.eval_ids[:, 1:].ravel()
    entropy = float(np.mean(-np.sum(np.exp(data.true_next_log_probs) * data.true_next_log_probs, axis=1)[previous]))
    sampled = float(np.mean(-data.true_next_log_probs[previous, following]))  # eval_loss: the tokens drawn
    assert exact["excess_loss"] == pytest.approx(0.0, abs=1e-6) and exact["eval_loss"] == pytest.approx(sampled, rel=1e-5)
    uniform = evaluate(Uniform(), LocalSession(), data, setup)
    assert uniform["eval_loss"] == pytest.approx(math.log(32), rel=1e-6)
    assert uniform["excess_loss"] == pytest.approx(math.log(32) - entropy, rel=1e-5)


@pytest.mark.parametrize("overrides, message", [
    (["task=sequence-classification"], "data.builtin_task: markov is a causal LM's language"),
    (["data.builtin_task=sentiment"], "search.metric: excess_loss needs the built-in markov language"),
    (["training.budget_samples=null", "training.budget_epochs=1"], "training.budget_epochs: the markov language"),
])
def test_markov_refusals(overrides, message):
    with pytest.raises(SpecError, match=message):
        load_spec(None, MARKOV + overrides)
