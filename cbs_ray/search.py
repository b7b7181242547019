"""``python -m cbs_ray.search``: run or resume a critical-batch search (see ``cli.search_main``).

The search space lives in ``tune.search_space``, running an experiment in ``tune.api`` (and each search method's
module, ``tune.scratch``, ``tune.branch``), and the command line in ``cli``; this module re-exports the Python
API for scripts that import it from here.
"""

from __future__ import annotations

import sys

from cbs_ray.cli import search_main as main
from cbs_ray.tune.api import SearchResult, prepare, resume_search, run_search
from cbs_ray.tune.probe import probe_spec
from cbs_ray.tune.runner import DoesNotFit, SearchInterrupted, ray_session
from cbs_ray.tune.scratch import run_probe
from cbs_ray.tune.search_space import grid_points, max_concurrent, num_trials, per_batch_space, plan_lines, seed_warmup

__all__ = ["main", "run_search", "resume_search", "SearchResult", "DoesNotFit", "SearchInterrupted", "prepare",
           "probe_spec", "ray_session", "run_probe", "plan_lines", "grid_points", "num_trials", "max_concurrent",
           "per_batch_space", "seed_warmup"]

if __name__ == "__main__":
    sys.exit(main())
