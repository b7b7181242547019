"""Reading a file cbs-ray wrote, trusting nothing about what now stands at its path: only a regular file
of bounded size is read, opened without waiting (``O_NONBLOCK``: a FIFO planted in its place never blocks the
reader) and checked on the open descriptor (``fstat``), so nothing can be swapped in between the check and the read."""

from __future__ import annotations

import os
import stat

__all__ = ["read_regular_file"]


def read_regular_file(path: str | os.PathLike[str], max_bytes: int, *, what: str = "the file",
                      follow_symlinks: bool = True) -> bytes:
    """The bytes of the regular file at ``path``: ``OSError`` where it cannot be opened (with ``follow_symlinks``
    False, a symbolic link is not followed and cannot be), ``ValueError`` where it is not a regular file (a FIFO, a
    device, a directory) or holds more than ``max_bytes`` (``what`` names it in that line)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    with os.fdopen(os.open(path, flags), "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > max_bytes:
            raise ValueError(f"{info.st_size} bytes, over the {max_bytes} {what} can be")
        return f.read(max_bytes + 1)
