"""BERT-base on one GPU: the micro-batch probe for real, then samples/s and MFU at the planned micro-batch,
eager and compiled, and the cost of gradient accumulation on the device.

For a session that is lent a GPU (a few minutes): BERT-base built from its config (no download), bf16
autocast, sequence length 128, fused AdamW, clip 1.0. FLOPs per token follow PaLM's MFU definition:
6 · non-embedding parameters + 12 · layers · seq · hidden (attention scores and values), fwd + bwd; the
common 6 · all-parameters figure is printed beside it. The peak is the device's dense bf16 rate (H200/H100
SXM datasheet: 989 TFLOP/s; pass --peak-tflops for others). The accumulation runs also give the MFU at a
half and a quarter of the planned micro-batch (the optimizer step is then amortized over the same batch).

Each compiled shape is compiled static (``dynamic=False``): a second micro-batch size otherwise makes
dynamo recompile with a dynamic batch dimension, whose kernels are slower, and the accumulation
comparison would measure that instead of accumulation.

    python bench/gpu_bert_base.py [--seq 128] [--steps 30] [--peak-tflops 989] [--no-compile]
        [--micro N (skip the probe)] [--dropout P (BERT's own: 0.1)] [--compile-mode MODE]
    python bench/gpu_bert_base.py --smoke    # every code path on the CPU with a tiny BERT, in seconds
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import AutoModelForSequenceClassification, BertConfig

from cbs_ray.spec.schema import TINY_BERT
from cbs_ray.train.memory_planner import cuda_fits, plan_micro_batch

TINY = {**{key: value for key, value in TINY_BERT.items() if key != "model_type"}, "vocab_size": 1000}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    parser.add_argument("--max-micro", type=int, default=4096)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--micro", type=int, help="train at this micro-batch; skip the probe")
    parser.add_argument("--dropout", type=float, default=0.1, help="hidden and attention dropout")
    parser.add_argument("--no-accumulation", action="store_true", help="skip the accumulation-overhead runs")
    parser.add_argument("--compile-mode", default=None, help="torch.compile mode, e.g. max-autotune-no-cudagraphs")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one step of 1 x micro and of 4 x micro/4 (eager): the operators that grow")
    parser.add_argument("--smoke", action="store_true",
                        help="check the script itself on a CPU: tiny BERT, seq 32, micro 16, 2 steps (figures meaningless)")
    args = parser.parse_args()
    if args.smoke:
        args.seq, args.steps, args.micro = 32, 2, args.micro or 16
    else:
        assert torch.cuda.is_available(), "needs a CUDA GPU (or --smoke)"
        torch.backends.cuda.matmul.allow_tf32 = True
    device = torch.device("cpu" if args.smoke else "cuda")
    # problem_type set up front: the model would set it at its first forward, and compiling would recompile.
    config = BertConfig(**{**(TINY if args.smoke else {}), "num_labels": 2,
                           "problem_type": "single_label_classification", "hidden_dropout_prob": args.dropout,
                           "attention_probs_dropout_prob": args.dropout})
    model = AutoModelForSequenceClassification.from_config(config).to(device)
    params = sum(p.numel() for p in model.parameters())
    embedding = sum(p.numel() for n, p in model.named_parameters() if "embeddings" in n)
    flops_per_token = palm_flops_per_token(model, args.seq)

    def optimizer():
        return torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize()

    tried = []
    if not args.micro:
        fits = cuda_fits(model, optimizer, seq_len=args.seq, vocab_size=config.vocab_size,
                         task="sequence-classification", dtype=torch.bfloat16)

        def counted(m: int) -> bool:
            tried.append((m, fits(m)))
            return tried[-1][1]

    start = time.perf_counter()
    micro = args.micro or plan_micro_batch(counted, upper=args.max_micro)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    print(f"probe: tried {tried} -> micro-batch {micro} planned in {time.perf_counter() - start:.1f} s "
          f"({name}, {params / 1e6:.1f}M parameters, {embedding / 1e6:.1f}M in embeddings, "
          f"dropout {args.dropout})", flush=True)
    assert args.micro or any(not ok for _, ok in tried), "the probe never hit out-of-memory: raise --max-micro"
    if device.type == "cuda":
        torch.cuda.empty_cache()

    def training_step(step_model, batch: int, accumulation: int):
        """One optimizer step of ``batch`` samples as ``accumulation`` micro-steps, as a callable."""
        opt = optimizer()
        micro_batch = batch // accumulation
        ids = torch.randint(0, config.vocab_size, (micro_batch, args.seq), device=device)
        labels = torch.randint(0, 2, (micro_batch,), device=device)
        mask = torch.ones_like(ids)

        def step():
            for _ in range(accumulation):
                with torch.autocast(device.type, dtype=torch.bfloat16):
                    loss = step_model(input_ids=ids, attention_mask=mask, labels=labels).loss / accumulation
                loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step

    def timed(step_model, batch: int, accumulation: int) -> float:
        """samples/s of optimizer steps of ``batch`` samples as ``accumulation`` micro-steps."""
        step = training_step(step_model, batch, accumulation)
        for _ in range(3):  # warm-up, compilation included
            step()
        synchronize()
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        synchronize()
        return args.steps * batch / (time.perf_counter() - start)

    def mfu(samples_per_s: float, per_token: float) -> float:
        return per_token * samples_per_s * args.seq / (args.peak_tflops * 1e12)

    variants = [("eager", model)]
    if not args.no_compile:
        variants.append((f"torch.compile({args.compile_mode or 'default'})",
                         torch.compile(model, mode=args.compile_mode, dynamic=False)))
    for label, step_model in variants:
        rate = timed(step_model, micro, 1)
        print(f"RESULT BERT-base bf16 seq {args.seq} micro {micro} {label}: {rate:.0f} samples/s, "
              f"MFU {mfu(rate, flops_per_token):.1%} (PaLM definition; target >= 45 %), "
              f"{mfu(rate, 6 * params):.1%} (6 x all parameters)", flush=True)
    if args.profile:  # before the accumulation runs, whose compiled shapes take longest
        profile(training_step, model, micro, device)
    for label, step_model in variants if not args.no_accumulation else []:
        for accumulation in (2, 4):
            whole, split = timed(step_model, micro, 1), timed(step_model, micro, accumulation)
            print(f"RESULT accumulation {label} B={micro} as {accumulation} x {micro // accumulation} / 1 x {micro}: "
                  f"{split / whole:.3f} (overhead {1 - split / whole:.1%}; target <= 5 %); "
                  f"MFU at micro {micro // accumulation}: {mfu(split, flops_per_token):.1%}", flush=True)


def palm_flops_per_token(model, seq: int) -> int:
    """Training FLOPs per token, PaLM's MFU definition (Chowdhery et al. 2022, appendix B): 6 × the
    non-embedding parameters + 12 × layers × sequence × hidden for the attention scores and values."""
    config = model.config
    embedding = sum(p.numel() for n, p in model.named_parameters() if "embeddings" in n)
    non_embedding = sum(p.numel() for p in model.parameters()) - embedding
    return 6 * non_embedding + 12 * config.num_hidden_layers * seq * config.hidden_size


def profile(training_step, model, micro: int, device) -> None:
    """Operator time of one step as 1 x micro and as 4 x micro/4, side by side, the largest differences
    first: where accumulation's extra time goes."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    per_op = []
    for accumulation in (1, 4):
        step = training_step(model, micro, accumulation)
        step()  # warm-up
        with profiler(activities=activities) as prof:
            step()
            if device.type == "cuda":
                torch.cuda.synchronize()
        field = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
        # On CUDA the kernels' own rows only: an operator's row also carries its kernels' device time, so
        # summing both would count the device's time twice.
        per_op.append({e.key: (getattr(e, field), e.count) for e in prof.key_averages()
                       if device.type != "cuda" or e.device_type != DeviceType.CPU})
    whole, split = per_op
    rows = sorted(set(whole) | set(split), key=lambda k: split.get(k, (0, 0))[0] - whole.get(k, (0, 0))[0],
                  reverse=True)
    total = [sum(t for t, _ in ops.values()) / 1e3 for ops in per_op]
    print(f"PROFILE one step of {micro} samples: 1 x {micro} {total[0]:.1f} ms, 4 x {micro // 4} {total[1]:.1f} ms "
          f"({'device, per kernel' if device.type == 'cuda' else 'CPU, per operator'} self time); "
          f"what grows most:")
    for key in rows[:15]:
        (t1, n1), (t4, n4) = whole.get(key, (0, 0)), split.get(key, (0, 0))
        print(f"PROFILE   {key[:60]:60s} {t1 / 1e3:8.2f} ms ({n1:5d} calls) -> {t4 / 1e3:8.2f} ms ({n4:5d} calls)")


if __name__ == "__main__":
    main()
