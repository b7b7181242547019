"""What the two command lines share."""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["OneLineParser", "unforeseen_error"]


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
