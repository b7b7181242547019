"""``python -m cbs_ray.search``: run or resume a critical-batch search (see ``cli.search_main``).

The Python API is ``cbs_ray.run_search`` and ``cbs_ray.resume_search`` (``tune.api``); this module is the command
line's entry point only.
"""

from __future__ import annotations

import sys

from cbs_ray.cli import search_main as main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
