import os

import torch

from cbs_ray.train.checkpoint import STATE_FILE
from cbs_ray.tune.api import prepare
from cbs_ray.train.sessions import LocalSession
from cbs_ray.spec.load import load_spec
from cbs_ray.train.loop import train_loop
from cbs_ray.train.config import TrialConfig

# Tests never reach a model hub: an unknown model name must fail at once, not after retries.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# The task and optimizer settings the loop's and the end-to-end tests were written for: the default before
# issue 17 made it easier (negation, longer sequences, a higher LR, alpha up to the linear rule, TPE choosing
# the batch size). Pinned, so each test keeps training what its assertions were measured on.
EARLIER_DEFAULT = ["data.builtin_negation=0.2", "data.max_seq_length=32", "training.base_lr=0.002",
                   "search.alpha_range=[0.5, 1.0]", "search.balance_batches=false"]

OPT_IN_MARKERS = ("slow", "gpu", "cluster")
"""Run only when a -m expression names them (pytest -m slow, pytest -m gpu, pytest -m cluster; .ci/run runs
the cluster tier as its own step): excluded from plain
``pytest`` and from the quick tier ``pytest -m "not e2e and not multiproc"`` alike, which a -m in
addopts could not do (the command line's -m replaces it)."""


def pytest_collection_modifyitems(config, items):
    expression = config.getoption("markexpr") or ""
    opted_out = [m for m in OPT_IN_MARKERS if m not in expression]
    deselected = [item for item in items if any(item.get_closest_marker(m) for m in opted_out)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item not in deselected]


# ---- one trial's loop, in-process (imported by the loop's tests: ``from conftest import ...``) --------

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
    data, budget, config = prepare(spec)
    tune_config = {"log2_batch": batch.bit_length() - 1, "alpha": alpha, "warmup_fraction": warmup}
    cfg = TrialConfig.from_tune(spec, tune_config, budget_samples=budget, model_config=config)
    session = session_class()
    train_loop(cfg, data, session)
    return session, cfg
