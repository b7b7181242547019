"""Large-batch machinery on CPU: accumulation equivalence through the real loop, precision, LAMB, label
smoothing, layer-wise LR decay, gradient checkpointing."""

import math
import os

import pytest
import torch

from cbs_ray.search import prepare
from cbs_ray.spec import load_spec
from cbs_ray.train_loop import LocalSession, STATE_FILE, items_in, layer_lr_scale, make_optimizer, train_loop
from cbs_ray.trial import make_setup

ONE_STEP = ["data.builtin_train_examples=512", "data.builtin_eval_examples=64", "training.budget_samples=64",
            "training.eval_every_samples=64", "asha.grace_period_samples=64", "search.batch_sizes=[64]",
            "search.num_trials=1", "training.grad_clip_norm=null"]


class Capture(LocalSession):
    """Keeps the weights of every checkpoint and the reported metrics."""

    def __init__(self):
        self.reports, self.weights = [], []

    def report(self, metrics, checkpoint_dir):
        self.reports.append(metrics)
        if checkpoint_dir:
            self.weights.append(torch.load(os.path.join(checkpoint_dir, STATE_FILE), weights_only=True)["model"])

    def get_checkpoint(self):
        return None


def run(overrides, batch=64, *, base=ONE_STEP, session_class=Capture):
    spec = load_spec(None, list(base) + list(overrides))
    data, budget, config = prepare(spec)
    setup = make_setup(spec, {"log2_batch": batch.bit_length() - 1, "alpha": 1.0, "warmup_fraction": 0.0},
                       budget_samples=budget, model_config=config)
    session = session_class()
    train_loop(setup, data, session)
    return session


# A causal LM's micro-batches hold different numbers of target tokens (the built-in sentences are 6 to 17
# tokens, padded to 32): the step must average over all tokens, not over the micro-batches' own means.
# SGD's first step is lr × gradient, so the weights compare the gradients; Adam's first step is about
# lr × sign(gradient) and turns float noise in near-zero gradients into differences of up to 3e-6.
CAUSAL_LM = ["task=causal-lm", "search.metric=eval_loss", "search.mode=min", "training.optimizer=sgd",
             "model.config={model_type: gpt2, n_embd: 32, n_layer: 2, n_head: 2, n_positions: 64, resid_pdrop: 0.0, "
             "embd_pdrop: 0.0, attn_pdrop: 0.0}"]
TASKS = pytest.mark.parametrize("task", [[], CAUSAL_LM], ids=["classification", "causal-lm"])


@TASKS
def test_four_micro_batches_of_16_update_like_one_batch_of_64(task):
    whole = run(task + ["training.micro_batch_size=64"])
    split = run(task + ["training.micro_batch_size=16"])
    assert (whole.reports[0]["accumulation"], split.reports[0]["accumulation"]) == (1, 4)
    for name, value in whole.weights[0].items():
        assert torch.allclose(value, split.weights[0][name], atol=2e-6), name


@pytest.mark.parametrize("overrides", [
    ["training.precision=bf16"],
    ["training.precision=fp16"],
    ["training.optimizer=lamb"],
    ["training.label_smoothing=0.1"],
    ["training.layer_lr_decay=0.8"],
    ["training.gradient_checkpointing=true"],
], ids=lambda o: o[0].split("=")[0].split(".")[1] + "=" + o[0].split("=")[1])
def test_option_trains_to_finite_metrics(overrides):
    session = run(overrides + ["training.budget_samples=256", "training.eval_every_samples=128",
                               "asha.grace_period_samples=128"], batch=32)
    last = session.reports[-1]
    assert last["samples_seen"] == 256 and not last["diverged"]
    assert math.isfinite(last["eval_loss"]) and math.isfinite(last["train_loss"])


def test_items_a_step_averages_over():
    ids = torch.zeros(2, 4, dtype=torch.long)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    assert items_in((ids, mask, None), "sequence-classification") == 2   # examples
    assert items_in((ids, mask, None), "causal-lm") == 2 + 1             # tokens after the first, not padding


def test_lamb_first_step_is_the_trust_ratio_times_the_adam_direction():
    """One LAMB step on w = [3, 4] (|w| = 5) with gradient [1, -2], lr 0.1, no weight decay: Adam's first
    direction m / (sqrt(v) + eps) is sign(g) × 0.1 / sqrt(0.001) (undebiased), the trust ratio scales the
    step to lr × |w| = 0.5, so w moves by 0.5 × [1, -1] / sqrt(2). AdamW would move each weight by lr."""
    from types import SimpleNamespace

    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[3.0, 4.0]]))
    setup = SimpleNamespace(optimizer="lamb", model_config=None, layer_lr_decay=1.0, weight_decay=0.0)
    optimizer = make_optimizer(model, setup, lr=0.1)
    model.weight.grad = torch.tensor([[1.0, -2.0]])
    optimizer.step()
    moved = 0.5 / math.sqrt(2)
    assert torch.allclose(model.weight, torch.tensor([[3.0 - moved, 4.0 + moved]]), atol=1e-5)


def test_layer_lr_scale_by_name():
    # 2 encoder layers, decay 0.5: layer 1 -> 0.5, layer 0 -> 0.25, embeddings -> 0.125, head -> 1
    assert layer_lr_scale("bert.encoder.layer.1.attention.self.query.weight", 2, 0.5) == 0.5
    assert layer_lr_scale("bert.encoder.layer.0.output.dense.weight", 2, 0.5) == 0.25
    assert layer_lr_scale("bert.embeddings.word_embeddings.weight", 2, 0.5) == 0.125
    assert layer_lr_scale("classifier.weight", 2, 0.5) == 1.0
    assert layer_lr_scale("transformer.h.0.attn.c_attn.weight", 2, 0.5) == 0.25     # GPT-2 naming
    assert layer_lr_scale("transformer.wte.weight", 2, 0.5) == 0.125
    assert layer_lr_scale("bert.encoder.layer.0.output.dense.weight", 2, 1.0) == 1.0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_gloo_workers(rank: int, port: int, out: str, task: list) -> None:
    """One of two torch.distributed gloo ranks: the loop with DDP and a DistributedSampler, as Ray
    Train's prepare_model / prepare_data_loader set them up, at B=64 as 1 × 32 and as 4 × 8 per worker."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)

    class GlooCapture(Capture):
        world_size = 2

        def __init__(self):
            super().__init__()
            self.rank = rank

        def prepare_model(self, model):
            return DistributedDataParallel(model)

        def prepare_data_loader(self, loader):
            return DataLoader(loader.dataset, batch_size=loader.batch_size, drop_last=True,
                              sampler=DistributedSampler(loader.dataset, shuffle=True, seed=0))

        def all_reduce(self, tensor):
            dist.all_reduce(tensor)
            return tensor

    torch.set_num_threads(1)
    sessions = {micro: run(task + [f"training.micro_batch_size={micro}", "resources.workers_per_trial=2"],
                           session_class=GlooCapture) for micro in (32, 8)}
    if rank == 0:
        torch.save({micro: (s.reports[0]["accumulation"], s.weights[0]) for micro, s in sessions.items()}, out)
    dist.destroy_process_group()


@TASKS
def test_accumulation_on_two_gloo_workers_updates_like_one_step(tmp_path, task):
    port = _free_port()
    out = str(tmp_path / "weights.pt")
    torch.multiprocessing.spawn(_two_gloo_workers, args=(port, out, task), nprocs=2)
    results = torch.load(out, weights_only=True)
    (acc_whole, whole), (acc_split, split) = results[32], results[8]
    assert (acc_whole, acc_split) == (1, 4)
    for name, value in whole.items():
        assert torch.allclose(value, split[name], atol=2e-6), name


def _agree_on_a_micro_batch(rank: int, port: int, out: str) -> None:
    """One of two gloo ranks, each with its own probe result: TrainSession's minimum across ranks."""
    from types import SimpleNamespace

    import torch.distributed as dist

    from cbs_ray.train_loop import TrainSession

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    worker = SimpleNamespace(world_size=2, device=torch.device("cpu"))  # what a Ray Train worker's session holds
    agreed = TrainSession.all_reduce_min(worker, [64, 48][rank])
    torch.save(agreed, f"{out}.{rank}")
    dist.destroy_process_group()


def test_workers_agree_on_the_smallest_probed_micro_batch(tmp_path):
    port = _free_port()
    out = str(tmp_path / "agreed")
    torch.multiprocessing.spawn(_agree_on_a_micro_batch, args=(port, out), nprocs=2)
    assert [torch.load(f"{out}.{rank}") for rank in (0, 1)] == [48, 48]
