"""A pre-training user's own causal LM, without Hugging Face: a plain ``torch.nn.Module`` (token embedding, one
residual MLP block in an ``nn.ModuleList``, which FSDP shards as a block, a linear head) whose ``forward(input_ids,
labels=None)`` returns ``{"loss", "logits"}``, the loss the mean cross-entropy of ``labels[:, 1:]`` (-100 left out)
as a Hugging Face causal LM computes it. Each position sees only its own token: a bigram model, which is what the
markov corpus (bench/write_markov_parquet.py) rewards. ``ForwardX`` is the same model with ``forward(x)``: a
forward that does not take the corpus's columns."""

import torch

VOCAB = 512
"""The markov corpus's token ids 0…511."""


class TinyLM(torch.nn.Module):
    def __init__(self, vocab: int = VOCAB, width: int = 32):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.blocks = torch.nn.ModuleList([Block(width)])
        self.head = torch.nn.Linear(width, vocab)

    def logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(input_ids)
        for block in self.blocks:
            hidden = block(hidden)
        return self.head(hidden)

    def forward(self, input_ids, labels=None):
        logits = self.logits(input_ids)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(),
                                                            ignore_index=-100)
        return out


class Block(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up, self.down = torch.nn.Linear(width, 2 * width), torch.nn.Linear(2 * width, width)

    def forward(self, hidden):
        return hidden + self.down(torch.nn.functional.gelu(self.up(hidden)))


class ForwardX(TinyLM):
    def forward(self, x):  # type: ignore[override]  # the mismatch under test
        return {"logits": self.logits(x)}


def tiny_lm() -> TinyLM:
    """A fresh ``TinyLM`` (``model_init``)."""
    return TinyLM()
