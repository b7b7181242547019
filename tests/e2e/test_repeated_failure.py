"""Issue 28 on a real local Ray: an eval row the model cannot take, after the first eval batch, failed every
trial ``max_failures`` + 1 times, each attempt training up to it again, and the search ended with the bare
``IndexError``. Now the retry that fails at the same point says so and the trial ends there: two attempts
build a model, the one Tune still starts builds none, and the error names the place (the loop's own test is
tests/train/test_failure.py)."""

import sys
from pathlib import Path

import pytest
import torch

from cbs_ray.records.storage import ReportError
from cbs_ray.tune.api import run_search
from helpers.examples import load_example

# ≈ 30 s on 2 cores (every attempt of a failing trial): CI runs it in its `pytest -m slow` step (issue 25).
pytestmark = pytest.mark.slow

plain = load_example("plain_torch")


class LongRow(torch.utils.data.Dataset):
    """The eval set with a bad row (index 40: the second eval batch of 32): IndexError whenever it is read."""

    def __init__(self, size: int):
        self.blobs = plain.Blobs(size, seed=2)

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, i):
        if i == 40:
            raise IndexError("index out of range in self")
        return self.blobs[i]


class Logged:
    """A model_init that writes a line to ``path`` for every model it builds, in whichever process."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self):
        with open(self.path, "a") as f:
            f.write("built\n")
        return plain.MLP()


@pytest.fixture(scope="module", autouse=True)
def by_value():
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers need not import this file


def test_an_error_that_repeats_at_the_same_point_ends_the_trial_saying_where(tmp_path: Path, shared_ray):
    built = tmp_path / "built.txt"
    spec = plain.search_spec(["search.batch_sizes=[32]", "search.num_trials=1", "training.budget_samples=1024",
                              "training.eval_every_samples=512", "asha.grace_period_samples=512",
                              "training.eval_batch_size=32", "resources.max_failures=2",
                              f"storage_path={tmp_path / 'rr'}", f"output_dir={tmp_path / 'out'}"])
    objects = {**plain.objects(train_examples=1024, eval_examples=64), "model_init": Logged(str(built)),
               "eval_dataset": LongRow(64)}
    with pytest.raises(ReportError) as error:
        run_search(spec, verbose=0, **objects)
    assert str(error.value).endswith(
        "no trial has reported a result yet; 1 of 1 trials failed, the first with: RuntimeError: the same error at "
        "the same point as the attempt before, so it is not retried: in evaluation (batch index 1), at 512 samples: "
        "IndexError: index out of range in self"), str(error.value)
    # The driver's check, then two attempts; the third attempt Tune starts (max_failures=2) builds nothing.
    assert built.read_text().count("built") == 3
