"""The run both sides of the noise-scale check train (issue 39): a tiny GPT-2 from its config on sequences of a
small Markov language (``cbs_ray.data.markov``: a noisy language with an entropy floor, so the gradient noise is
that of real next-token prediction, not of a pattern learnt to zero loss), batch 32, AdamW with the square-root
rule's LR, linear warmup and decay, clipping at 1.0. cbs-ray's own trial trains it with 2 gloo workers; HF
Trainer with ``NoiseScaleCallback`` trains it under ``torchrun --nproc-per-node 2`` (4 per micro-batch, 4
micro-batches a step). Shared by ``test_noise_scale_callback_against_trial_e2e.py`` and its torchrun script."""

from __future__ import annotations

VOCAB, RANK, LENGTH = 64, 8, 16
TRAIN_ITEMS, EVAL_ITEMS = 4096, 256
BATCH, MICRO, WORLD = 32, 4, 2
BUDGET_SAMPLES, EVERY_SAMPLES = 4096, 512  # 128 optimizer steps; a report (cbs-ray) or a log (HF) every 16
BASE_LR, BASE_BATCH, ALPHA, WARMUP_FRACTION = 0.003, 16, 0.5, 0.1
PEAK_LR = BASE_LR * (BATCH / BASE_BATCH) ** ALPHA
STEPS = BUDGET_SAMPLES // BATCH


def sequences(count: int, seed: int):
    from cbs_ray.data.markov import markov_chain, sample_sequences

    return sample_sequences(markov_chain(VOCAB, RANK, 1.0, 3.0, seed=1234), count, LENGTH, seed=seed)


def gpt2():
    """A fresh 2-layer, 32-wide GPT-2 from its config (random weights, nothing downloaded)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=32, n_layer=2, n_head=2,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))


def collate(items: list[dict]) -> dict:
    """Equal-length token rows: stacked, the labels the inputs (the model shifts them)."""
    import torch

    ids = torch.stack([torch.as_tensor(item["input_ids"]) for item in items])
    return {"input_ids": ids, "labels": ids.clone()}


def datasets_pair():
    import datasets

    return (datasets.Dataset.from_dict({"input_ids": sequences(TRAIN_ITEMS, seed=1).tolist()}),
            datasets.Dataset.from_dict({"input_ids": sequences(EVAL_ITEMS, seed=2).tolist()}))


def ratio_of_means(grad_sq: list[float], trace_sigma: list[float]) -> float:
    """B_simple over training as cbs-ray's report reads a trial's (``analysis.tables``): ``maths.noise_scale.b_simple``
    of the mean |G|² and the mean tr Σ over the readings."""
    from cbs_ray.maths.noise_scale import b_simple

    return b_simple(sum(grad_sq) / len(grad_sq), sum(trace_sigma) / len(trace_sigma))
