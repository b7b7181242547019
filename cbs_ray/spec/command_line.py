"""What the command lines share (``cli``'s search and schema, ``report.command``'s report): argparse that
reports a usage error in one line, the ``--output`` check, and the one line for a failure nobody foresaw. The
edge where a bad argument becomes one line and a non-zero exit, below both faces so that each imports it."""

from __future__ import annotations

import argparse
import os
import sys

from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.paths import expand_user

__all__ = ["MAX_PATH_CHARS", "OneLineParser", "check_output_arg", "unforeseen_error"]

MAX_PATH_CHARS = 4096
"""Linux's PATH_MAX: a longer ``--output`` cannot be a folder."""


def check_output_arg(output: str | None) -> None:
    """``--output`` can name a folder at all (no NUL, no name over 255 bytes, no path over PATH_MAX, no unknown
    ``~user``): a ``SpecError`` before anything starts, instead of an ``OSError``, ``ValueError`` or
    ``RuntimeError`` from deep inside."""
    if output is None:
        return
    if "\x00" in output:
        raise SpecError("--output: contains a NUL character")
    expand_user(output, "--output")
    too_long = len(output.encode()) > MAX_PATH_CHARS or any(len(part.encode()) > 255 for part in output.split("/"))
    if too_long:
        raise SpecError(f"--output: {output[:60]!r}... is longer than a path can be ({MAX_PATH_CHARS} bytes, "
                        "255 a folder name)")


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (exit code 2) instead of the whole usage."""

    def error(self, message):
        self.exit(2, f"error: {message} (see --help)\n")


def unforeseen_error(e: Exception) -> int:
    """A failure neither command line foresaw: one line and exit code 1, the traceback on request
    (CBS_RAY_DEBUG=1 re-raises it). Call inside the ``except`` block."""
    if os.environ.get("CBS_RAY_DEBUG"):
        raise e
    print(f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} "
          "(set CBS_RAY_DEBUG=1 for the traceback)", file=sys.stderr)
    return 1
