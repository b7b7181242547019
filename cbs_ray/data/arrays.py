"""What the driver hands the trials: the tokenized arrays (``PreparedData``), and the texts and pairs
the loaders return.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PreparedData"]


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

    @property
    def train_examples(self) -> int:
        return len(self.train_ids)

    @property
    def eval_examples(self) -> int:
        return len(self.eval_ids)


Texts = tuple[list[str], list[int]]


Pairs = tuple[list[str], list[str]]
