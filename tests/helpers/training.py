"""One trial's loop, in-process, and the task settings the loop's and the end-to-end tests were written for
(``from helpers.training import ...``)."""

import math
import os

import torch

from cbs_ray.spec.load import load_spec
from cbs_ray.train.checkpoint import STATE_FILE
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.loop import train_loop
from cbs_ray.train.sessions import LocalSession
from cbs_ray.tune.api import prepare

# The task and optimizer settings the loop's and the end-to-end tests were written for: the default before
# issue 17 made it easier (negation, longer sequences, a higher LR, alpha up to the linear rule, TPE choosing
# the batch size). Pinned, so each test keeps training what its assertions were measured on.
EARLIER_DEFAULT = ["data.builtin_negation=0.2", "data.max_seq_length=32", "training.base_lr=0.002",
                   "search.alpha_range=[0.5, 1.0]", "search.balance_batches=false"]


class RecordingSession(LocalSession):
    """An in-process session that stands in for Tune/Train reporting: keeps each report's metrics, its
    checkpoint directory (gone once the report returns) and the weights that checkpoint held."""

    def __init__(self):
        self.reports, self.checkpoints, self.weights = [], [], []

    def report(self, metrics, checkpoint_dir):
        self.reports.append(metrics)
        self.checkpoints.append(checkpoint_dir)
        if checkpoint_dir:
            self.weights.append(torch.load(os.path.join(checkpoint_dir, STATE_FILE), weights_only=True)["model"])

    def get_checkpoint(self):
        return None


def train_in_process(overrides, *, base, batch: int, alpha: float = 1.0, warmup: float = 0.0,
                     session_class=RecordingSession):
    """Train one configuration of the spec ``base`` + ``overrides`` with the real loop and a recording
    session; returns (session, trial config)."""
    spec = load_spec(None, list(base) + list(overrides))
    prepared = prepare(spec)
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    tune_config = {"log2_batch": batch.bit_length() - 1, "alpha": alpha, "warmup_fraction": warmup}
    cfg = TrialConfig.from_tune(spec, tune_config, budget_samples=budget, model_config=config)
    session = session_class()
    train_loop(cfg, data, session)
    return session, cfg


Capture = RecordingSession  # keeps the reports and every checkpoint's weights

ONE_STEP = EARLIER_DEFAULT + ["data.builtin_train_examples=512", "data.builtin_eval_examples=64", "training.budget_samples=64",
            "training.eval_every_samples=64", "asha.grace_period_samples=64", "search.batch_sizes=[64]",
            "search.num_trials=1", "training.grad_clip_norm=null"]


def one_step(overrides, batch=64, *, base=ONE_STEP, session_class=RecordingSession):
    """One optimizer step of 64 samples (the large-batch tests' unit); returns the session."""
    return train_in_process(overrides, base=base, batch=batch, session_class=session_class)[0]


SMALL = EARLIER_DEFAULT + ["data.builtin_train_examples=512", "data.builtin_eval_examples=128", "training.budget_samples=256",
         "training.eval_every_samples=128", "asha.grace_period_samples=128", "search.batch_sizes=[16, 32]"]


def train_small(overrides=(), batch=16, alpha=1.0, warmup=0.25):
    """The loop's tests' small run (256 samples, reports every 128); returns (reports, trial config)."""
    session, setup = train_in_process(overrides, base=SMALL, batch=batch, alpha=alpha, warmup=warmup)
    return session.reports, setup


class NonFiniteGradient(torch.autograd.Function):
    """The loss unchanged going forward, an infinite gradient coming back: an fp16 overflow that lowering
    the loss scale never mends."""

    @staticmethod
    def forward(ctx, loss):
        return loss.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * math.inf
