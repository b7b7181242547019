"""seq2seq under FSDP (``task: seq2seq`` with ``training.parallelism: fsdp``, issue 51): an encoder-decoder's blocks
(T5's and Bart's by ``_no_split_modules``, a plain model's encoder and decoder layer lists), and on two gloo ranks a
T5 from a config trained under FSDP as under DDP: every step's loss within 1e-4 relative, and the evaluation
(BLEU's generation synced across ranks, the ranks' shards of unequal size) the same."""

import json

import pytest
import torch

from cbs_ray.sources.blocks import transformer_blocks
from cbs_ray.spec.load import load_spec
from helpers.gloo import GlooCapture, free_port, join_gloo, train_recording_losses

TINY_T5 = {"model_type": "t5", "d_model": 32, "d_ff": 64, "num_layers": 2, "num_decoder_layers": 2,
           "num_heads": 2, "d_kv": 16, "dropout_rate": 0.0}
SEQ2SEQ = ["task=seq2seq", "data.builtin_task=translation", "search.metric=bleu", "search.mode=max",
           "model.config=" + json.dumps(TINY_T5), "data.builtin_train_examples=256", "data.builtin_eval_examples=41",
           "search.batch_sizes=[16]", "search.num_trials=1", "training.budget_samples=160",
           "training.eval_every_samples=80", "asha.grace_period_samples=80", "resources.workers_per_trial=2",
           "training.micro_batch_size=4", "training.grad_clip_norm=0.5", "training.eval_batch_size=4",
           "search.seed=11"]
"""10 steps of B=16 (2 micro-batches of 4 a rank), clipped; 41 evaluation pairs: rank 0 holds 21, rank 1 20, in
batches of 4 (6 and 5: rank 1 runs a spare one), and BLEU's greedy generation runs on every batch."""


def test_an_encoder_decoders_blocks():
    from transformers import BartConfig, BartForConditionalGeneration, T5Config, T5ForConditionalGeneration

    t5 = T5ForConditionalGeneration(T5Config(**{k: v for k, v in TINY_T5.items() if k != "model_type"},
                                             vocab_size=32))
    assert [type(b).__name__ for b in transformer_blocks(t5)] == ["T5Block"] * 4  # 2 encoder, 2 decoder
    bart = BartForConditionalGeneration(BartConfig(vocab_size=32, d_model=16, encoder_layers=2, decoder_layers=1,
                                                   encoder_attention_heads=2, decoder_attention_heads=2,
                                                   encoder_ffn_dim=16, decoder_ffn_dim=16, max_position_embeddings=32))
    assert [type(b).__name__ for b in transformer_blocks(bart)] == ["BartEncoderLayer"] * 2 + ["BartDecoderLayer"]


def test_a_plain_encoder_decoders_blocks_are_both_layer_lists():
    class EncoderDecoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = torch.nn.ModuleList([torch.nn.TransformerEncoderLayer(8, 2) for _ in range(2)])
            self.decoder = torch.nn.ModuleList([torch.nn.TransformerDecoderLayer(8, 2) for _ in range(3)])

    model = EncoderDecoder()
    assert transformer_blocks(model) == list(model.encoder) + list(model.decoder)


def test_seq2seq_under_fsdp_is_a_valid_spec():
    assert load_spec(None, SEQ2SEQ + ["training.parallelism=fsdp"]).training.parallelism == "fsdp"


def _run(parallelism: str):
    session = GlooCapture()
    losses = train_recording_losses(SEQ2SEQ + [f"training.parallelism={parallelism}"], session, warmup_fraction=0.1)
    return {"losses": losses, "reports": session.reports}


def _ddp_and_fsdp(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    join_gloo(rank, port)
    torch.save({name: _run(name) for name in ("ddp", "fsdp")}, f"{out}/found-{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.multiproc
@pytest.mark.slow  # ≈ 35 s on 2 cores: plain pytest keeps within its 10 min; CI's slow step runs it
def test_a_t5_trains_under_fsdp_as_under_ddp(tmp_path):
    torch.multiprocessing.spawn(_ddp_and_fsdp, args=(free_port(), str(tmp_path)), nprocs=2)
    for rank in (0, 1):
        found = torch.load(f"{tmp_path}/found-{rank}.pt", weights_only=False)
        ddp, fsdp = found["ddp"], found["fsdp"]
        assert len(ddp["losses"]) == len(fsdp["losses"]) == 10
        print(f"rank {rank}: largest relative loss difference "
              f"{max(abs(f / d - 1) for f, d in zip(fsdp['losses'], ddp['losses'])):.2e}; "
              f"eval_loss {[r['eval_loss'] for r in fsdp['reports']]} (fsdp) "
              f"{[r['eval_loss'] for r in ddp['reports']]} (ddp); bleu {[r['bleu'] for r in fsdp['reports']]}")
        assert fsdp["losses"] == pytest.approx(ddp["losses"], rel=1e-4)
        assert fsdp["losses"][-1] < fsdp["losses"][0]  # it trained: not two still runs compared
        assert len(ddp["reports"]) == len(fsdp["reports"]) == 2
        for f_report, d_report in zip(fsdp["reports"], ddp["reports"]):
            assert f_report["eval_loss"] == pytest.approx(d_report["eval_loss"], rel=1e-4)
            assert f_report["bleu"] == pytest.approx(d_report["bleu"], abs=1e-6)
