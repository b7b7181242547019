"""The objects path's plan (issue 47, a held-out pre-training user: own GPT, packed blocks, a token budget through
``run_search``): the plan states the budget in the user's own sequence length, not the spec's default
``data.max_seq_length``; and ``run_search(..., dry_run=True)`` returns that plan without starting Ray."""

import pytest
import torch

from cbs_ray.spec.load import load_spec
from cbs_ray.tune.api import run_search

BLOCK = 32  # the user's packed blocks; the spec's default data.max_seq_length is 16


class Blocks(torch.utils.data.Dataset):
    def __init__(self, size: int, seed: int):
        self.ids = torch.randint(0, 50, (size, BLOCK), generator=torch.Generator().manual_seed(seed))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=BLOCK, n_embd=16, n_layer=1, n_head=2))


@pytest.fixture
def no_ray(monkeypatch):
    import ray

    from cbs_ray.tune import driver

    def refuse(*_, **__):
        raise AssertionError("Ray would start")

    monkeypatch.setattr(driver, "ray_session", refuse)
    yield
    assert not ray.is_initialized()


def test_a_dry_run_on_objects_returns_the_plan_in_the_users_own_sequence_length(tmp_path, no_ray):
    spec = load_spec(None, ["name=own-gpt", "task=causal-lm", "search.metric=eval_loss", "search.mode=min",
                            "search.batch_sizes=[16, 32]", "search.num_trials=2", "training.budget_samples=null",
                            "training.budget_tokens=262144", "training.eval_every_samples=1024",
                            "asha.grace_period_samples=1024", f"storage_path={tmp_path / 'ray'}"])
    lines = run_search(spec, model_init=tiny_gpt2, train_dataset=Blocks(64, 1), eval_dataset=Blocks(16, 2),
                       output_dir=str(tmp_path / "out"), dry_run=True)
    assert isinstance(lines, list) and lines[0].startswith("own-gpt: 2 batch sizes")
    budget = next(line for line in lines if "budget: 262144 tokens" in line)
    assert "8192 samples of 32 tokens" in budget  # was "16384 samples of 16 tokens", the spec's default length
    assert "8192 samples each" in lines[0]  # what the trials train
    assert not (tmp_path / "ray").exists() and not (tmp_path / "out").exists()  # nothing written
