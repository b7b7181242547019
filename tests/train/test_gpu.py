"""The trial loop on a CUDA GPU (``pytest -m gpu``): the real micro-batch probe, bf16 and fp16 training,
and accumulation equivalence on the device. Excluded by default; runs without Ray (in-process session)."""

import pytest
import torch

from cbs_ray.train.memory_planner import ProbeCache
from helpers.training import EARLIER_DEFAULT, Capture
from helpers.training import one_step as run_loop

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SMALL = EARLIER_DEFAULT + ["data.builtin_train_examples=2048", "data.builtin_eval_examples=256", "training.budget_samples=1024",
         "training.eval_every_samples=512", "asha.grace_period_samples=512", "search.num_trials=1",
         "resources.use_gpu=true", "training.dataloader_workers=0"]


class CudaCapture(Capture):
    """Keeps reports and checkpointed weights, on the GPU."""

    device = torch.device("cuda")


def run(overrides, batch):
    return run_loop([f"search.batch_sizes=[{batch}]"] + list(overrides), batch, base=SMALL, session_class=CudaCapture)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_trial_trains_on_the_gpu_with_amp(precision, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # a fresh probe cache
    session = run([f"training.precision={precision}", "training.probe_micro_batch=true",
                   "training.micro_batch_size=null"], batch=256)
    last = session.reports[-1]
    assert not last["diverged"]
    assert last["samples_seen"] == 1024
    assert last["micro_batch"] * last["accumulation"] == 256
    assert 0.0 <= last["accuracy"] <= 1.0
    cached = ProbeCache(tmp_path / ".cache" / "cbs_ray" / "micro_batch.json")._load()
    (entry,) = cached.values()  # the probe ran on the device and was cached, up to the search's largest batch
    assert entry["limit"] == 256 and last["micro_batch"] == entry["micro_batch"]


def test_accumulation_matches_one_large_step_on_the_gpu():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    one_step = ["training.budget_samples=64", "training.eval_every_samples=64", "asha.grace_period_samples=64",
                "training.grad_clip_norm=null", "training.precision=fp32"]
    whole = run(one_step + ["training.micro_batch_size=64"], batch=64)
    split = run(one_step + ["training.micro_batch_size=16"], batch=64)
    assert (whole.reports[0]["accumulation"], split.reports[0]["accumulation"]) == (1, 4)
    for name, value in whole.weights[0].items():
        assert torch.allclose(value, split.weights[0][name], atol=1e-5), name


def test_a_compiled_bf16_trial_trains_on_the_gpu():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    session = run(["training.precision=bf16", "training.compile=true", "training.micro_batch_size=128"], batch=256)
    last = session.reports[-1]
    assert counters["stats"]["unique_graphs"] >= 1 and not last["diverged"]
    assert last["samples_seen"] == 1024 and (last["micro_batch"], last["accumulation"]) == (128, 2)
    torch._dynamo.reset()


def test_a_probed_trial_trains_like_one_given_the_plan_on_the_gpu(tmp_path, monkeypatch):
    """The probe's optimizer steps and random batches on the device are undone (weights, CUDA RNG)."""
    monkeypatch.setenv("HOME", str(tmp_path))  # a fresh probe cache: this trial really probes
    probed = run(["training.precision=fp32", "training.probe_micro_batch=true", "training.micro_batch_size=null"],
                 batch=256)
    micro = probed.reports[-1]["micro_batch"]
    by_hand = run(["training.precision=fp32", f"training.micro_batch_size={micro}"], batch=256)
    for a, b in zip(probed.reports, by_hand.reports):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
        assert a["eval_loss"] == pytest.approx(b["eval_loss"], rel=1e-4)
