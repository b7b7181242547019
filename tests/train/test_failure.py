"""Issue 28: an error that repeats at the same point is not retried, and every error says where it happened
(``train.failure``), on the loop in-process with the plain example's objects (no Ray)."""

import re

import pytest
import torch

from cbs_ray.sources.protocol import Position
from cbs_ray.sources.user_objects import user_objects
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.failure import REPEATED, FailureLog
from cbs_ray.train.loop import train_loop
from cbs_ray.tune.api import prepare
from helpers.examples import load_example
from helpers.training import RecordingSession

plain = load_example("plain_torch")
SMALL = ["search.batch_sizes=[32]", "search.num_trials=1", "training.budget_samples=256",
         "training.eval_every_samples=128", "asha.grace_period_samples=128", "training.eval_batch_size=32"]


class LongRow(torch.utils.data.Dataset):
    """The eval set with one bad row (index 40: the second eval batch of 32), which the model cannot take
    (as a row longer than a GPT-2's n_positions): IndexError every time it is read, after the first batch."""

    def __init__(self, size: int):
        self.blobs = plain.Blobs(size, seed=2)

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, i):
        if i == 40:
            raise IndexError("index out of range in self")
        return self.blobs[i]


class Counting:
    """A model_init that counts the models it builds (one per attempt that gets past its start)."""

    def __init__(self):
        self.built = 0

    def __call__(self):
        self.built += 1
        return plain.MLP()


def attempt(objects, failure_dir: str):
    """One attempt of the trial (a retry is a new attempt with the same trial directory)."""
    spec = plain.search_spec(SMALL)
    prepared = prepare(spec, user_objects(**objects))
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    cfg = TrialConfig.from_tune(spec, {"log2_batch": 5, "alpha": 0.5, "warmup_fraction": 0.0}, budget_samples=budget,
                                model_config=config, failure_dir=failure_dir)
    train_loop(cfg, data, RecordingSession())


def test_an_eval_error_says_where_and_is_not_retried_once_it_repeats_there(tmp_path):
    model_init = Counting()
    objects = {**plain.objects(256, 64), "model_init": model_init, "eval_dataset": LongRow(64)}
    where = "in evaluation (batch index 1), at 128 samples"
    with pytest.raises(IndexError) as first:  # its own type, the place before its message
        attempt(objects, str(tmp_path))
    assert str(first.value) == f"{where}: index out of range in self"
    # The retry fails at the same point with the same error: it says so, and that it is not retried.
    with pytest.raises(IndexError) as second:
        attempt(objects, str(tmp_path))
    assert str(second.value) == f"{REPEATED}: {where}: index out of range in self"
    # A retry started after that ends at its first line: no model built, nothing trained again.
    built = model_init.built
    with pytest.raises(RuntimeError) as third:
        attempt(objects, str(tmp_path))
    assert str(third.value) == f"{REPEATED}: {where}: IndexError: index out of range in self"
    assert model_init.built == built + 1  # the driver's check's model only: the attempt built none
    # Outside Tune (no trial directory) the error is only located, never taken for a repeat.
    for _ in range(2):
        with pytest.raises(IndexError, match=f"^{re.escape(where)}: index out of range in self$"):
            attempt(objects, "")


def test_every_error_says_where_keeping_its_type():
    log = FailureLog(None)  # no trial directory: nothing recorded
    error = log.failed(ValueError("bad\nmore"), Position(phase="training", batch=7, samples=96))
    assert type(error) is ValueError and str(error) == "in training (batch index 7), at 96 samples: bad\nmore"
    # Before training the place adds nothing (the micro-batch probe's message stays as the search reads it).
    memory = MemoryError("not even a micro-batch of 1 fits")
    assert log.failed(memory, Position()) is memory and str(memory) == "not even a micro-batch of 1 fits"
    # An error whose message is not its first argument is named inside a RuntimeError.
    key = log.failed(KeyError("x"), Position(phase="evaluation", batch=0, samples=128))
    assert type(key) is RuntimeError and str(key) == "in evaluation (batch index 0), at 128 samples: KeyError: 'x'"


def test_the_record_tells_a_repeat_from_an_error_elsewhere(tmp_path):
    here = Position(phase="training", batch=7, samples=96)
    FailureLog(str(tmp_path)).failed(ValueError("bad"), here)
    # Another batch, or another error at the same batch: an error at another point, so retried.
    elsewhere = FailureLog(str(tmp_path)).failed(ValueError("bad"), Position(phase="training", batch=8, samples=96))
    assert not str(elsewhere).startswith(REPEATED)
    FailureLog(str(tmp_path)).end_if_repeated()  # nothing repeated yet: the attempt runs
    other = FailureLog(str(tmp_path)).failed(KeyError("x"), Position(phase="training", batch=8, samples=96))
    assert not str(other).startswith(REPEATED)
    again = FailureLog(str(tmp_path)).failed(KeyError("x"), Position(phase="training", batch=8, samples=96))
    assert str(again) == f"{REPEATED}: in training (batch index 8), at 96 samples: KeyError: 'x'"
    # A set-up error that repeats says so too.
    setup = FailureLog(str(tmp_path / "b")).failed(ValueError("no model"), Position())
    assert str(setup) == "no model"
    assert str(FailureLog(str(tmp_path / "b")).failed(ValueError("no model"), Position())) == f"{REPEATED}: no model"
    with pytest.raises(RuntimeError, match=f"^{REPEATED}: in training"):
        FailureLog(str(tmp_path)).end_if_repeated()
    # Each rank keeps its own record.
    FailureLog(str(tmp_path), rank=1).end_if_repeated()
