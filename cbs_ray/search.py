"""``python -m cbs_ray.search``: run or resume a critical-batch search (see ``cli.search_main``).

The search space lives in ``tune.search_space``, running an experiment in ``tune.api`` (and each search method's
module, ``tune.scratch``, ``tune.branch``), and the command line in ``cli``; this module re-exports the Python
API for scripts that import it from here.
"""

from __future__ import annotations

import importlib
import sys

from cbs_ray.cli import search_main as main

__all__ = ["main", "run_search", "resume_search", "SearchResult", "DoesNotFit", "SearchInterrupted", "prepare",
           "probe_spec", "ray_session", "run_probe", "plan_lines", "grid_points", "num_trials", "max_concurrent",
           "per_batch_space", "seed_warmup"]

_HOMES = {"run_search": "api", "resume_search": "api", "SearchResult": "api", "prepare": "api",
          "probe_spec": "probe", "DoesNotFit": "runner", "SearchInterrupted": "runner", "ray_session": "runner",
          "run_probe": "scratch", "plan_lines": "search_space", "grid_points": "search_space",
          "num_trials": "search_space", "max_concurrent": "search_space", "per_batch_space": "search_space",
          "seed_warmup": "search_space"}
"""Where each re-exported name lives in ``cbs_ray.tune``."""


def __getattr__(name):
    # The API imports Ray and torch (seconds): ``python -m cbs_ray.search --help`` or a usage error answers
    # without them, and the re-exports load on first use.
    if name in _HOMES:
        return getattr(importlib.import_module(f"cbs_ray.tune.{_HOMES[name]}"), name)
    raise AttributeError(name)


if __name__ == "__main__":
    sys.exit(main())
