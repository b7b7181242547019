"""What every method's figures share: matplotlib on the Agg backend (no display; importing this module sets it
before pyplot loads: ``plt`` is pyplot on it), and ``save_figure``, which writes a figure as a PNG and closes it.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (backend first)

__all__ = ["plt", "save_figure"]


def save_figure(fig, path: Path) -> Path:
    """``fig`` laid out tight, written to ``path`` at 110 dpi and closed; returns ``path``."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
