"""What the driver hands the trials: the tokenized arrays (``PreparedData``), and the texts and pairs
the loaders return.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields

import numpy as np

__all__ = ["PreparedData", "Texts", "Pairs"]


@dataclass
class PreparedData:
    """Tokenized arrays (int64, shape [examples, max_seq_length]) plus what the model needs to know."""

    train_ids: np.ndarray
    train_mask: np.ndarray
    train_labels: np.ndarray
    eval_ids: np.ndarray
    eval_mask: np.ndarray
    eval_labels: np.ndarray
    vocab_size: int
    num_labels: int
    pad_id: int
    dev_ids: np.ndarray | None = None
    """With ``data.holdout_examples`` the eval arrays hold the held-out training sample the search selects
    on, and these the eval file/split, evaluated once at the end of each trial (``dev_*`` metrics)."""
    dev_mask: np.ndarray | None = None
    dev_labels: np.ndarray | None = None
    true_next_log_probs: np.ndarray | None = None
    """The built-in ``markov`` language only: its next-token log-probabilities after each token [V, V]
    (``data.markov``), from which the evaluation reads the exact excess loss (``excess_loss``)."""

    @property
    def train_examples(self) -> int:
        return len(self.train_ids)

    @property
    def eval_examples(self) -> int:
        return len(self.eval_ids)

    def fingerprint(self) -> str:
        """A digest of what the trials train and evaluate on: every array's dtype, shape and bytes, and the
        vocabulary, labels and padding (BLAKE2b, 16 bytes, hex). Two preparations of a spec agree on it
        exactly when the trials would see the same tokens; ``--resume`` compares it with the experiment's."""
        digest = hashlib.blake2b(digest_size=16)
        for f in fields(PreparedData):
            value = getattr(self, f.name)
            digest.update(f.name.encode())
            if isinstance(value, np.ndarray):
                array = np.ascontiguousarray(value)
                digest.update(f"{array.dtype.str}{array.shape}".encode())
                digest.update(array.tobytes())
            else:
                digest.update(repr(value).encode())
        return digest.hexdigest()


Texts = tuple[list[str], list[int]]


Pairs = tuple[list[str], list[str]]
