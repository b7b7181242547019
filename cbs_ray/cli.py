"""What the two command lines share."""

from __future__ import annotations

import argparse

__all__ = ["OneLineParser"]


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (exit code 2) instead of the whole usage."""

    def error(self, message):
        self.exit(2, f"error: {message} (see --help)\n")
