"""BERT-base on one GPU: the micro-batch probe for real, then samples/s and MFU at the planned micro-batch.

For a session that is lent a GPU (a few minutes): BERT-base built from its config (no download), bf16
autocast, sequence length 128, AdamW. MFU = 6 · parameters · tokens/s ÷ the device's peak dense bf16
FLOP/s (pass --peak-tflops for devices other than the H200's 989).

    python bench/gpu_bert_base.py [--seq 128] [--steps 30] [--peak-tflops 989]
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import AutoModelForSequenceClassification, BertConfig

from cbs_ray.memory_planner import cuda_fits, plan_micro_batch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    parser.add_argument("--max-micro", type=int, default=4096)
    args = parser.parse_args()
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    device = torch.device("cuda")
    model = AutoModelForSequenceClassification.from_config(BertConfig(num_labels=2)).to(device)
    params = sum(p.numel() for p in model.parameters())

    def optimizer():
        return torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    start = time.perf_counter()
    micro = plan_micro_batch(cuda_fits(model, optimizer, seq_len=args.seq, vocab_size=30522,
                                       task="sequence-classification", dtype=torch.bfloat16),
                             per_worker=args.max_micro)
    print(f"probe: micro-batch {micro} planned in {time.perf_counter() - start:.1f} s "
          f"({torch.cuda.get_device_name()}, {params / 1e6:.0f}M parameters)")
    opt = optimizer()
    ids = torch.randint(0, 30522, (micro, args.seq), device=device)
    labels = torch.randint(0, 2, (micro,), device=device)
    mask = torch.ones_like(ids)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    samples_per_s = args.steps * micro / elapsed
    mfu = 6 * params * samples_per_s * args.seq / (args.peak_tflops * 1e12)
    print(f"RESULT BERT-base bf16 seq {args.seq} micro {micro}: {samples_per_s:.0f} samples/s, "
          f"MFU {mfu:.1%} (target >= 45 %)")


if __name__ == "__main__":
    main()
