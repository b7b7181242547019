"""The built-in ``python_source`` corpus (``data.builtin_task: python_source``, ``task: causal-lm``): the Python
standard library's own sources, a real corpus that every Python installation carries, so a pre-training testbed
needs no download.

**What is read.** Every ``.py`` file under ``sysconfig.get_paths()["stdlib"]``, except ``site-packages`` (what
the user installed, not the standard library) and test suites (any folder named ``test``, ``tests`` or
``idle_test``: generated and repetitive code); about 12 MB on CPython 3.11. The text differs between Python
versions and builds, so figures on it are comparable only on one interpreter (``corpus_digest`` names the corpus).

**Tokens.** Bytes: token ``b`` is byte value ``b`` (0–255), so no tokenizer is trained and the vocabulary is 256;
a file ends with ``DOCUMENT_END`` (byte 0, which no source file holds). The files, in the order of their relative
paths, are laid end to end and cut into blocks of ``max_seq_length`` tokens, as pre-training packs its corpus;
the last partial block is dropped.

**The split is by file, deterministic**: a file is held out for evaluation when the first byte of the BLAKE2b
digest of its relative path (with ``/``) is below ``EVAL_SHARE_OF_256`` (about 5 % of the files), whatever the
interpreter, so a file never sits on both sides and a function's body cannot leak from training into evaluation.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["DOCUMENT_END", "EVAL_SHARE_OF_256", "EXCLUDED_FOLDERS", "VOCAB_SIZE", "PythonSourceCorpus",
           "corpus_blocks", "held_out", "python_source_corpus", "stdlib_sources"]

VOCAB_SIZE = 256
DOCUMENT_END = 0
EVAL_SHARE_OF_256 = 13
"""A file is an evaluation file when its path digest's first byte is below this: 13/256 ≈ 5 % of the files."""
EXCLUDED_FOLDERS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})


def stdlib_sources(root: str | os.PathLike | None = None) -> list[tuple[str, Path]]:
    """(relative path with ``/``, absolute path) of every ``.py`` file under ``root`` (default: the running
    interpreter's standard library), sorted by relative path, skipping ``EXCLUDED_FOLDERS`` and symbolic links."""
    base = Path(root if root is not None else sysconfig.get_paths()["stdlib"])
    found = []
    for folder, subfolders, files in os.walk(base):
        subfolders[:] = sorted(d for d in subfolders if d not in EXCLUDED_FOLDERS)
        for name in files:
            path = Path(folder, name)
            if name.endswith(".py") and not path.is_symlink() and path.is_file():
                found.append((path.relative_to(base).as_posix(), path))
    return sorted(found)


def held_out(relative_path: str) -> bool:
    """Whether a file belongs to the evaluation side: the first byte of BLAKE2b(its relative path) <
    ``EVAL_SHARE_OF_256``. Depends on the path alone, not on the interpreter or the other files."""
    return hashlib.blake2b(relative_path.encode(), digest_size=8).digest()[0] < EVAL_SHARE_OF_256


def corpus_blocks(documents: Iterable[bytes], block_length: int) -> np.ndarray:
    """The documents as one byte stream, each followed by ``DOCUMENT_END``, cut into full blocks of
    ``block_length`` tokens (int64 [blocks, block_length]); the last partial block is dropped."""
    stream = np.frombuffer(b"".join(d + bytes([DOCUMENT_END]) for d in documents), dtype=np.uint8)
    blocks = len(stream) // block_length
    return stream[:blocks * block_length].astype(np.int64).reshape(blocks, block_length)


@dataclass(frozen=True)
class PythonSourceCorpus:
    """The corpus cut into blocks: ``train`` and ``evaluation`` (int64 [blocks, length]), the files on each side,
    and ``digest`` (BLAKE2b of every file's relative path and bytes, hex: which interpreter's corpus this is)."""

    train: np.ndarray
    evaluation: np.ndarray
    train_files: int
    eval_files: int
    digest: str


def python_source_corpus(block_length: int, root: str | os.PathLike | None = None) -> PythonSourceCorpus:
    """Read the standard library's sources (``stdlib_sources``), split them by file (``held_out``) and cut each
    side into blocks (``corpus_blocks``)."""
    train_docs: list[bytes] = []
    eval_docs: list[bytes] = []
    digest = hashlib.blake2b(digest_size=16)
    for relative, path in stdlib_sources(root):
        text = path.read_bytes().replace(bytes([DOCUMENT_END]), b" ")  # a stray NUL is not a document's end
        digest.update(relative.encode() + b"\0" + text)
        (eval_docs if held_out(relative) else train_docs).append(text)
    return PythonSourceCorpus(corpus_blocks(train_docs, block_length), corpus_blocks(eval_docs, block_length),
                              len(train_docs), len(eval_docs), digest.hexdigest())
