"""Tokenization and packing: a pretrained model's tokenizer (``transformers.AutoTokenizer``), or for
models built from a config a word-level tokenizer trained locally on the training text with ``tokenizers``.

Packing (``data.packing``, on with ``training.budget_tokens``; causal LMs only): the texts, tokenized whole
and each ended by EOS (or [SEP]), are concatenated and cut into blocks of exactly ``max_seq_length`` tokens,
as pretraining does (``pack``). The arrays keep their shapes (the mask is all ones), so the training loop
needs no change, and every sample is the same number of tokens.
"""

from __future__ import annotations

import itertools

import numpy as np

from cbs_ray.spec.errors import SpecError

__all__ = ["pack", "token_stream", "blocks", "hub_unreachable", "load_pretrained_tokenizer"]

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


# ---- packing: a causal LM's texts as one stream of full blocks -------------------------------------

def token_stream(ids, mask=None, separator: int | None = None) -> np.ndarray:
    """The tokens of every example in order as one int64 array: an example's tokens are those its ``mask``
    keeps (all of them without a mask; rows of ragged lists or of padded arrays), followed by ``separator``
    unless they already end with it; an example without tokens adds nothing."""
    pieces = []
    for i, row in enumerate(ids):
        tokens = row if mask is None else np.asarray(row)[np.asarray(mask[i]) != 0]
        if len(tokens):
            pieces.append(tokens)
            if separator is not None and tokens[-1] != separator:
                pieces.append((separator,))
    return np.fromiter(itertools.chain.from_iterable(pieces), dtype=np.int64)


def blocks(stream: np.ndarray, block_length: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, mask) of shape [blocks, block_length]: ``stream`` cut into whole blocks, the last partial block
    dropped; the mask is all ones (no padding)."""
    count = len(stream) // block_length
    ids = np.asarray(stream[:count * block_length], dtype=np.int64).reshape(count, block_length)
    return ids, np.ones_like(ids)


def pack(ids, mask=None, *, block_length: int, separator: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Pack examples as pretraining does: concatenate their tokens (``token_stream``: each followed by the
    ``separator``, e.g. EOS, and without padding) and cut the stream into blocks of exactly ``block_length``
    tokens (``blocks``), so every sample holds the same tokens and none is padding."""
    return blocks(token_stream(ids, mask, separator), block_length)


def pack_texts(documents, texts: list[str], *, block_length: int, chunk: int = 10_000) -> tuple[np.ndarray, np.ndarray]:
    """``texts`` tokenized whole by ``documents`` (each ending in the tokenizer's EOS or [SEP]) and packed, a
    chunk of texts at a time so that only the stream, not every text's token list, is held at once. Blank
    texts (wikitext's empty lines) add nothing. SpecError when not one block fills."""
    texts = [t for t in texts if t.strip()]
    parts = [token_stream(documents(texts[i:i + chunk])) for i in range(0, len(texts), chunk)]
    stream = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if len(stream) < block_length:
        raise SpecError(f"data.max_seq_length: packed, the {len(texts)} texts hold {len(stream)} tokens, not one "
                        f"block of {block_length}")
    return blocks(stream, block_length)


# ---- tokenization ----------------------------------------------------------------------------------

def train_word_tokenizer(texts: list[str], vocab_size: int, max_len: int):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                                             show_progress=False))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    whole = Tokenizer.from_str(tok.to_str())  # for packing: neither truncated nor padded
    tok.enable_truncation(max_length=max_len)
    tok.enable_padding(pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]", length=max_len)

    def encode(batch: list[str]) -> tuple[np.ndarray, np.ndarray]:
        out = tok.encode_batch(batch)
        return (np.array([e.ids for e in out], dtype=np.int64),
                np.array([e.attention_mask for e in out], dtype=np.int64))

    def documents(batch: list[str]) -> list[list[int]]:
        return [e.ids for e in whole.encode_batch(batch)]  # [CLS] … [SEP]: the [SEP] ends each document

    return encode, documents, tok.get_vocab_size(), tok.token_to_id("[PAD]")


HUB_CONNECT_TIMEOUT_S = 3.0
"""How long the hub's host is given to answer before a tokenizer neither local nor cached is refused."""
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def hub_unreachable(endpoint: str, timeout_s: float = HUB_CONNECT_TIMEOUT_S) -> str | None:
    """Why the hub at ``endpoint`` cannot be reached, or None where it can (or cannot be told: behind a proxy the
    hub's own client is left to connect). One TCP connection, no retry: offline, ``huggingface_hub`` retries each
    file for about a minute, a line each time."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    if any(os.environ.get(name) for name in PROXY_VARIABLES):
        return None
    parsed = urlparse(endpoint)
    if not parsed.hostname:
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=timeout_s).close()
    except OSError as e:
        return f"the hub ({endpoint}) cannot be reached ({e.strerror or type(e).__name__})"
    return None


def load_pretrained_tokenizer(name: str):
    """``AutoTokenizer`` ``name``: a local folder or the hub's cache first, without the network; the hub only where
    neither holds it and the hub answers (``hub_unreachable``), so that offline it fails at once, in one line."""
    from huggingface_hub import constants
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception:
        pass  # neither a folder nor cached: the hub's
    problem = hub_unreachable(constants.ENDPOINT)
    if problem:
        raise SpecError(f"model.tokenizer: cannot load {name!r}: neither a local folder nor in the hub's cache, and "
                        f"{problem}; connect, or save the tokenizer to a folder and name the folder")
    try:
        return AutoTokenizer.from_pretrained(name)
    except Exception as e:
        raise SpecError(f"model.tokenizer: cannot load {name!r}: {str(e).splitlines()[0]}") from None


def pretrained_tokenizer(name: str, max_len: int):
    tok = load_pretrained_tokenizer(name)
    if tok.pad_token is None:  # GPT-style tokenizers have none; pad with EOS, masked out anyway
        tok.pad_token = tok.eos_token

    def encode(batch: list[str]) -> tuple[np.ndarray, np.ndarray]:
        out = tok(batch, truncation=True, padding="max_length", max_length=max_len, return_tensors="np")
        return out["input_ids"].astype(np.int64), out["attention_mask"].astype(np.int64)

    def documents(batch: list[str]) -> list[list[int]]:
        # Whole texts (a packed block spans them); GPT-2 adds no special tokens, so each text ends in EOS.
        ids = tok(batch, truncation=False, padding=False, verbose=False)["input_ids"]
        eos = tok.eos_token_id
        return [d + [eos] if d and eos is not None and d[-1] != eos else d for d in ids]

    return encode, documents, len(tok), tok.pad_token_id
