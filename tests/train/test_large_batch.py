"""Large-batch machinery on CPU: accumulation equivalence through the real loop (classification and causal
LM, one worker and two gloo workers), the noise probe's two norms by hand, precision, LAMB, label
smoothing, layer-wise LR decay, gradient checkpointing."""

import math
import os

import pytest
import torch

from cbs_ray.sources.builtin import items_in
from cbs_ray.spec.load import load_spec
from cbs_ray.train.checkpoint import STATE_FILE
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.loop import train_loop
from cbs_ray.train.optimizer import layer_lr_scale, make_optimizer
from cbs_ray.tune.api import prepare
from helpers.gloo import GlooCapture
from helpers.gloo import free_port as _free_port
from helpers.gloo import join_gloo as _join_gloo
from helpers.training import ONE_STEP, Capture
from helpers.training import NonFiniteGradient as _NonFiniteGradient
from helpers.training import one_step as run

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
    assert items_in((ids, mask, None), "sequence-classification") == 2  # examples
    assert items_in((ids, mask, None), "causal-lm") == 2 + 1            # tokens after the first, not padding


def test_lamb_first_step_is_the_trust_ratio_times_the_adam_direction():
    """One LAMB step on w = [3, 4] (|w| = 5) with gradient [1, -2], lr 0.1, no weight decay: Adam's first
    direction m / (sqrt(v) + eps) is sign(g) × 0.1 / sqrt(0.001) (undebiased), the trust ratio scales the
    step to lr × |w| = 0.5, so w moves by 0.5 × [1, -1] / sqrt(2). AdamW would move each weight by lr."""
    from cbs_ray.spec.schema import TrainingSpec

    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[3.0, 4.0]]))
    training = TrainingSpec(optimizer="lamb", layer_lr_decay=1.0, weight_decay=0.0)
    optimizer = make_optimizer(model, training, lr=0.1)
    model.weight.grad = torch.tensor([[1.0, -2.0]])
    optimizer.step()
    moved = 0.5 / math.sqrt(2)
    assert torch.allclose(model.weight, torch.tensor([[3.0 - moved, 4.0 + moved]]), atol=1e-5)


@pytest.mark.parametrize("optimizer", ["adamw", "lamb"])
def test_adam_betas_come_from_the_spec(optimizer):
    """training.adam_beta1/adam_beta2 reach AdamW and LAMB; the defaults are 0.9/0.999."""
    from cbs_ray.spec.schema import TrainingSpec

    model = torch.nn.Linear(2, 1, bias=False)
    training = TrainingSpec(optimizer=optimizer, adam_beta1=0.8, adam_beta2=0.99)
    optimizer_ = make_optimizer(model, training, lr=0.1)
    assert all(group["betas"] == (0.8, 0.99) for group in optimizer_.param_groups)
    assert make_optimizer(model, TrainingSpec(optimizer=optimizer), lr=0.1).param_groups[0]["betas"] == (0.9, 0.999)


def test_layer_lr_scale_by_name():
   # 2 encoder layers, decay 0.5: layer 1 -> 0.5, layer 0 -> 0.25, embeddings -> 0.125, head -> 1
    assert layer_lr_scale("bert.encoder.layer.1.attention.self.query.weight", 2, 0.5) == 0.5
    assert layer_lr_scale("bert.encoder.layer.0.output.dense.weight", 2, 0.5) == 0.25
    assert layer_lr_scale("bert.embeddings.word_embeddings.weight", 2, 0.5) == 0.125
    assert layer_lr_scale("classifier.weight", 2, 0.5) == 1.0
    assert layer_lr_scale("transformer.h.0.attn.c_attn.weight", 2, 0.5) == 0.25    # GPT-2 naming
    assert layer_lr_scale("transformer.wte.weight", 2, 0.5) == 0.125
    assert layer_lr_scale("bert.encoder.layer.0.output.dense.weight", 2, 1.0) == 1.0


def _two_gloo_workers(rank: int, port: int, out: str, task: list) -> None:
    """One of two torch.distributed gloo ranks: the loop at B=64 as 1 × 32 and as 4 × 8 per worker."""
    import torch.distributed as dist

    _join_gloo(rank, port)
    sessions = {micro: run(task + [f"training.micro_batch_size={micro}", "resources.workers_per_trial=2"],
                           session_class=GlooCapture) for micro in (32, 8)}
    if rank == 0:
        torch.save({micro: (s.reports[0]["accumulation"], s.weights[0]) for micro, s in sessions.items()}, out)
    dist.destroy_process_group()


@pytest.mark.multiproc
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

    from cbs_ray.train.sessions import TrainSession

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    worker = SimpleNamespace(world_size=2, device=torch.device("cpu")) # what a Ray Train worker's session holds
    agreed = TrainSession.all_reduce_min(worker, [64, 48][rank])
    torch.save(agreed, f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.mark.multiproc
def test_workers_agree_on_the_smallest_probed_micro_batch(tmp_path):
    port = _free_port()
    out = str(tmp_path / "agreed")
    torch.multiprocessing.spawn(_agree_on_a_micro_batch, args=(port, out), nprocs=2)
    assert [torch.load(f"{out}.{rank}") for rank in (0, 1)] == [48, 48]


def _squared_norm_of_mean_gradient(model, setup, ids, mask, labels) -> float:
    """|gradient of the mean loss over these examples|², by hand: a causal LM's mean is over its target
    tokens (each token after the first that is not padding)."""
    from cbs_ray.sources.builtin import _inputs, summed_loss

    model.zero_grad()
    items = len(ids) if setup.task != "causal-lm" else int(mask[:, 1:].sum())
    (summed_loss(model, _inputs((ids, mask, labels), setup.task, "cpu"), setup) / items).backward()
    return sum(float(p.grad.pow(2).sum()) for p in model.parameters() if p.grad is not None)


@TASKS
def test_noise_probe_reads_the_first_micro_batch_and_the_whole_step(task, monkeypatch):
    """One step of B=64 as 4 × 16: the probe's small-batch norm is |gradient of the first micro-batch's
    mean loss|² and its large-batch norm |gradient of the step's mean loss|², both recomputed here by hand
    from the same initial weights and the same first 64 shuffled examples (a causal LM's means are over
    tokens, so the first micro-batch's share of the step is not 1/4)."""
    from cbs_ray.maths.noise_scale import NoiseScaleMeter
    from cbs_ray.sources.model import build_model

    seen = []
    monkeypatch.setattr(NoiseScaleMeter, "add", lambda self, small, big: seen.append((small, big)))
    spec = load_spec(None, ONE_STEP + task + ["training.micro_batch_size=16"])
    prepared = prepare(spec)
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    setup = TrialConfig.from_tune(spec, {"log2_batch": 6, "alpha": 1.0, "warmup_fraction": 0.0},
                                  budget_samples=budget, model_config=config)
    train_loop(setup, data, Capture())

    torch.manual_seed(setup.seed)
    model = build_model(setup.model, setup.task, setup.model_config)
    dataset = torch.utils.data.TensorDataset(*(torch.tensor(a) for a in (data.train_ids, data.train_mask,
                                                                         data.train_labels)))
    sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=setup.seed)
    loader = torch.utils.data.DataLoader(dataset, batch_size=64, drop_last=True, sampler=sampler)
    ids, mask, labels = next(iter(loader)) # the loop's 4 micro-batches of 16 are these 64, in order

    (small, big), = seen
    first, whole = (tuple(t[:rows] for t in (ids, mask, labels)) for rows in (16, 64))
    assert small == pytest.approx(_squared_norm_of_mean_gradient(model, setup, *first), rel=1e-4)
    assert big == pytest.approx(_squared_norm_of_mean_gradient(model, setup, *whole), rel=1e-4)
    assert small > 1.2 * big # a quarter of the batch is noisier: the test tells the two apart


def _noise_probe_on_two_gloo_workers(rank: int, port: int, out: str, task: list) -> None:
    """One of two gloo ranks, one step of B=64 as 1 × 32 per worker: what the DDP hook hands the noise
    meter, and the same two norms by hand (this rank's 32 examples, and all 64, from the samplers)."""
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    from cbs_ray.maths.noise_scale import NoiseScaleMeter
    from cbs_ray.sources.model import build_model

    _join_gloo(rank, port)
    seen = []
    NoiseScaleMeter.add = lambda self, small, big: seen.append((small, big))
   # Seed 7: the data order must be the trial's own, not the seed-0 order Ray's sampler would give.
    spec = load_spec(None, ONE_STEP + task + ["training.micro_batch_size=32", "resources.workers_per_trial=2",
                                              "search.seed=7"])
    prepared = prepare(spec)
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    setup = TrialConfig.from_tune(spec, {"log2_batch": 6, "alpha": 1.0, "warmup_fraction": 0.0},
                                  budget_samples=budget, model_config=config)
    session = GlooCapture()
    train_loop(setup, data, session)
    assert session.loader.sampler.seed == 7

    torch.manual_seed(setup.seed)
    model = build_model(setup.model, setup.task, setup.model_config)
    dataset = torch.utils.data.TensorDataset(*(torch.tensor(a) for a in (data.train_ids, data.train_mask,
                                                                         data.train_labels)))
    shards = [next(iter(DataLoader(dataset, batch_size=32, drop_last=True, sampler=DistributedSampler(
        dataset, num_replicas=2, rank=r, shuffle=True, seed=7, drop_last=True)))) for r in (0, 1)]
    both = [torch.cat(parts) for parts in zip(*shards)]

    torch.save({"seen": seen, "small": _squared_norm_of_mean_gradient(model, setup, *shards[rank]),
                "big": _squared_norm_of_mean_gradient(model, setup, *both)}, f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.mark.multiproc
@TASKS
def test_noise_probe_on_two_gloo_workers_reads_each_workers_gradient_and_the_all_reduced_one(tmp_path, task):
    """The DDP communication hook's small-batch norm is this worker's own mean gradient (a causal LM's
    over its tokens, not the step's share of them) and the large-batch norm the all-reduced mean."""
    out = str(tmp_path / "norms")
    torch.multiprocessing.spawn(_noise_probe_on_two_gloo_workers, args=(_free_port(), out, task), nprocs=2)
    for rank in (0, 1):
        found = torch.load(f"{out}.{rank}", weights_only=True)
        (small, big), = found["seen"]
        assert small == pytest.approx(found["small"], rel=1e-4), rank
        assert big == pytest.approx(found["big"], rel=1e-4), rank


class LoaderCapture(Capture):
    def prepare_data_loader(self, loader):
        self.loader = loader
        return loader


@pytest.mark.parametrize("overrides,expected", [
    ([], (0, False, False)), # a CPU: no workers, nothing pinned
    (["training.dataloader_workers=1"], (1, False, True)), # workers persist when there are any
    (["training.dataloader_workers=1", "training.persistent_workers=false", "training.pin_memory=true"], (1, True, False)),
])
@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true") # no GPU here to pin for
def test_data_loader_settings_reach_the_loader(overrides, expected):
    session = run(overrides, session_class=LoaderCapture)
    loader = session.loader
    assert (loader.num_workers, loader.pin_memory, loader.persistent_workers) == expected
    assert session.reports[-1]["samples_seen"] == 64


def test_a_gpu_trial_prepares_batches_in_two_workers_unless_told_otherwise():
    from cbs_ray.spec.schema import TrainingSpec, dataloader_workers

    assert dataloader_workers(TrainingSpec(), use_gpu=True) == 2
    assert dataloader_workers(TrainingSpec(), use_gpu=False) == 0
    assert dataloader_workers(TrainingSpec(dataloader_workers=0), use_gpu=True) == 0


class StateCapture(Capture):
    def report(self, metrics, checkpoint_dir):
        super().report(metrics, checkpoint_dir)
        self.state = torch.load(os.path.join(checkpoint_dir, STATE_FILE), weights_only=True)


def test_an_fp16_checkpoint_keeps_the_loss_scale_and_an_fp32_one_has_none():
    fp16 = run(["training.precision=fp16"], session_class=StateCapture).state["scaler"]
    assert fp16["scale"] == 2.0 ** 16 and fp16["_growth_tracker"] == 1 # one step taken at the initial scale
    assert run([], session_class=StateCapture).state["scaler"] == {}


def test_an_fp16_gradient_that_stays_non_finite_ends_as_diverged_after_the_scale_falls_below_one(monkeypatch):
    import cbs_ray.sources.builtin as loop  # the built-in source's summed loss

    real = loop.summed_loss
    calls = []

    def overflowing(*args):
        calls.append(1)
        return _NonFiniteGradient.apply(real(*args))

    monkeypatch.setattr(loop, "summed_loss", overflowing)
    session = run(["training.precision=fp16", "training.micro_batch_size=16"])
    (report,) = session.reports
    assert report["diverged"] and report["samples_seen"] == 0
   # Skipped steps at scales 2^16 … 2^0 (17), then the 18th non-finite gradient, at 0.5, ends the trial.
    assert len(calls) == 18 * 4


def _one_rank_overflows_once(rank: int, port: int, out: str) -> None:
    """Two gloo ranks in fp16; rank 1's loss is infinite on its first micro-batch only."""
    import torch.distributed as dist

    import cbs_ray.sources.builtin as loop  # the built-in source's summed loss

    _join_gloo(rank, port)
    real, calls = loop.summed_loss, []

    def first_infinite(*args):
        calls.append(1)
        loss = real(*args)
        return loss * math.inf if rank == 1 and len(calls) == 1 else loss

    loop.summed_loss = first_infinite
    session = run(["training.precision=fp16", "training.micro_batch_size=32", "resources.workers_per_trial=2"],
                  session_class=GlooCapture)
    torch.save([(r["samples_seen"], r["diverged"]) for r in session.reports], f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.mark.multiproc
def test_an_fp16_overflow_on_one_rank_is_skipped_by_every_rank(tmp_path):
    """The skip is decided on the all-reduced gradient, not on a rank's own loss: both ranks skip the
    step together and finish the trial (deciding on rank 1's own loss, it alone would stop as diverged
    and leave rank 0 waiting in the next all-reduce)."""
    out = str(tmp_path / "reports")
    torch.multiprocessing.spawn(_one_rank_overflows_once, args=(_free_port(), out), nprocs=2)
    assert [torch.load(f"{out}.{rank}") for rank in (0, 1)] == [[(64, False)], [(64, False)]]
