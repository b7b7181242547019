"""Encoder-decoder (seq2seq) training on the spec path: T5 or any ``AutoModelForSeq2SeqLM`` learns to write
``data.target_column`` from ``data.text_column`` (``task: seq2seq``).

``Seq2SeqSource`` answers the loop's questions (train_loop.BuiltinSource's interface) for the arrays of
``data.Seq2SeqData``: sources as the encoder's ids and mask, targets as labels with -100 at padding (the
model shifts them right into its decoder inputs). A step's loss is summed over target tokens and its
items are its target tokens, counted over all micro-batches and workers, so gradient accumulation gives
exactly the mean over the effective batch's tokens that one step of B computes, whatever the targets'
lengths.

Evaluation: the mean token loss (``eval_loss``, ``perplexity``) and, with ``search.metric: bleu``, corpus
BLEU of generated targets (greedy, or ``generation.num_beams``) against the reference texts, through
``sacrebleu``. BLEU is not a mean of per-example scores: each worker computes sacrebleu's sufficient
statistics of its shard (hypothesis and reference lengths, n-gram matches and totals for n = 1..4), the
sums are all-reduced, and the corpus BLEU is computed from the sums, which is what sacrebleu gives on the
whole eval set at once (``bleu_statistics``, ``bleu_from_statistics``: pure, Ray-free).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from cbs_ray.sources.amp import autocast_dtype
from cbs_ray.sources.builtin import BuiltinSource
from cbs_ray.sources.protocol import Position, TrialSettings, counted, lockstep_forwards

__all__ = ["Seq2SeqSource", "summed_target_loss", "target_tokens", "bleu_statistics", "bleu_from_statistics",
           "evaluate_seq2seq", "BLEU_STATISTICS"]

BLEU_ORDER = 4
BLEU_STATISTICS = 2 + 2 * BLEU_ORDER
"""The length of ``bleu_statistics``' vector: [hypothesis length, reference length, matches of order
1..4, totals of order 1..4]."""


def bleu_statistics(hypotheses: list[str], references: list[str]) -> list[float]:
    """sacrebleu's sufficient statistics of a corpus (one reference per hypothesis), summed over its
    sentences: [hypothesis length, reference length, n-gram matches for n = 1..4, n-gram totals for
    n = 1..4]. Statistics of disjoint shards add up to those of their union."""
    if not hypotheses:
        return [0.0] * BLEU_STATISTICS
    from sacrebleu.metrics import BLEU

    score = BLEU().corpus_score(hypotheses, [references])
    return [float(score.sys_len), float(score.ref_len), *map(float, score.counts), *map(float, score.totals)]


def bleu_from_statistics(stats: list[float]) -> float:
    """Corpus BLEU (0..100, sacrebleu's default exponential smoothing) from ``bleu_statistics``' vector,
    e.g. summed over workers."""
    from sacrebleu.metrics import BLEU

    values = [int(round(x)) for x in stats]
    hyp_len, ref_len = values[:2]
    matches, totals = values[2:2 + BLEU_ORDER], values[2 + BLEU_ORDER:]
    return float(BLEU.compute_bleu(matches, totals, hyp_len, ref_len, smooth_method="exp").score)


def target_tokens(labels: torch.Tensor) -> int:
    """A micro-batch's items: its target tokens (labels other than -100)."""
    return int((labels != -100).sum())


def summed_target_loss(model, inputs: dict, label_smoothing: float = 0.0) -> torch.Tensor:
    """The (label-smoothed) cross-entropy summed over the batch's target tokens (-100 labels skipped). The
    model makes its decoder inputs from ``inputs["labels"]``."""
    logits = model(**inputs).logits.float()
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), inputs["labels"].flatten(), ignore_index=-100,
                                             reduction="sum", label_smoothing=label_smoothing)


def _inputs(batch, device) -> dict:
    ids, mask, labels = (t.to(device, non_blocking=True) for t in batch)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def is_sharded(model) -> bool:
    """Whether ``model`` is sharded by FSDP2's ``fully_shard`` (its forwards are collectives)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return False
    return isinstance(model, FSDPModule)


def _generator(model):
    """The HF model inside DDP's and torch.compile's wrappers: what has ``generate``."""
    while not hasattr(model, "generate"):
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if inner is None:
            raise TypeError(f"{type(model).__name__} cannot generate (search.metric: bleu needs a seq2seq model)")
        model = inner
    return model


class Seq2SeqSource(BuiltinSource):
    """The spec path's seq2seq model and data (``data.Seq2SeqData``): items are target tokens."""

    def __init__(self, data, task: str):
        super().__init__(data, task)
        self.items_vary = True  # target tokens differ from micro-batch to micro-batch

    def items_in(self, batch) -> int:
        return target_tokens(batch[2])

    def inputs(self, batch, device) -> dict:
        return _inputs(batch, device)

    def summed_loss(self, forward, inputs: dict, cfg: TrialSettings, items: int) -> torch.Tensor:
        return summed_target_loss(forward, inputs, cfg.spec.training.label_smoothing)

    def evaluate(self, model, session, cfg: TrialSettings, **kwargs) -> dict:
        return evaluate_seq2seq(model, session, self.data, cfg, **kwargs)


@torch.no_grad()
def evaluate_seq2seq(model, session, data, cfg: TrialSettings, *, on_dev: bool = False,
                     batch_size: Optional[int] = None, position: Optional[Position] = None,
                     limit: Optional[int] = None) -> dict:
    """eval_loss (mean over target tokens) and perplexity over the whole eval set (``on_dev``: the dev set; ``limit``:
    its first ``limit`` examples), each rank over its exact shard rank::world_size; with ``search.metric: bleu`` also
    ``bleu``, from the shards' BLEU statistics summed over the ranks. One all-reduce carries both."""
    model.eval()
    shard = slice(session.rank, limit, session.world_size)
    arrays = (data.dev_ids, data.dev_mask, data.dev_labels) if on_dev else (data.eval_ids, data.eval_mask,
                                                                             data.eval_labels)
    references = (data.dev_references if on_dev else data.eval_references)[shard]
    ids, mask, labels = (torch.tensor(a[shard]) for a in arrays)
    size = batch_size or cfg.spec.training.eval_batch_size
    amp_dtype = autocast_dtype(cfg.spec.training.precision, session.device)  # the model is evaluated as it trains
    with_bleu = cfg.metric == "bleu"
    generation = cfg.spec.generation
    sums = torch.zeros(2, dtype=torch.float64)  # loss summed over target tokens, target tokens
    hypotheses: list[str] = []
    sharded = session.world_size > 1 and is_sharded(model)

    def forwards(batch: dict) -> tuple[torch.Tensor, list[str]]:
        with torch.autocast(session.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = summed_target_loss(model, batch)
            if not with_bleu:
                return loss, []
            # Under FSDP every decoder step is a collective: synced_gpus keeps a rank that has finished its
            # sequences stepping (on padding) until every rank has (Hugging Face's rule for sharded models).
            generated = _generator(model).generate(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], do_sample=False,
                max_new_tokens=generation.max_new_tokens or cfg.spec.data.max_target_length,
                num_beams=generation.num_beams, eos_token_id=data.eos_id, pad_token_id=data.pad_id,
                synced_gpus=sharded)
        return loss, data.decode(generated[:, 1:].tolist())  # the first column is the decoder's start token

    for start in counted(range(0, len(ids), size), position):
        batch = _inputs((ids[start:start + size], mask[start:start + size], labels[start:start + size]),
                        session.device)
        loss, decoded = forwards(batch)
        hypotheses += decoded
        sums += torch.tensor([float(loss), float(target_tokens(batch["labels"]))], dtype=torch.float64)
    everything = len(arrays[0]) if limit is None else min(limit, len(arrays[0]))
    spares = lockstep_forwards(everything, session.world_size, size, len(ids)) if sharded else 0
    for _ in range(spares):  # FSDP's collectives: as many forwards (and generations) as rank 0, discarded
        forwards(_inputs(tuple(torch.tensor(a[:1]) for a in arrays), session.device))
    stats = torch.tensor(bleu_statistics(hypotheses, references) if with_bleu else [], dtype=torch.float64)
    total = session.all_reduce(torch.cat([sums, stats]).to(session.device)).cpu()
    eval_loss = float(total[0] / total[1])
    model.train()
    metrics = {"eval_loss": eval_loss, "perplexity": math.exp(min(eval_loss, 700.0))}
    if with_bleu:
        metrics["bleu"] = bleu_from_statistics(total[2:].tolist())
    return metrics
