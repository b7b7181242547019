"""How long a ``--dry-run`` takes to print its plan, and in all, for two source trees side by side (issue 35, issue
36's target: the ladder's plan on markov_lm.yaml in ≤ 2 s).

Each run is a fresh ``python -m cbs_ray.search ... --dry-run`` process (imports are the cost: torch, transformers,
Ray), the trees alternated run by run so that the machine's load falls on both alike. Per tree: seconds from the
start to the plan's first line (median), to the end (median), and the process's CPU seconds (user + system,
median, from ``resource.getrusage``), and whether the printed plans are identical.

    python bench/dry_run_time.py --before /tmp/main_tree --after . [--runs 5] [-- --set search.method=branch]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

COMMAND = ["-m", "cbs_ray.search", "--space", "search_spaces/markov_lm.yaml", "--set", "search.method=ladder",
           "--dry-run"]


def one_run(tree: str, extra: list[str]) -> tuple[float, float, float, str]:
    """(seconds to the first line of output, seconds in all, CPU seconds, the output) of one dry-run on ``tree``."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, *COMMAND, *extra], cwd=tree, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    first = process.stdout.readline()
    to_plan = time.perf_counter() - start
    rest = process.stdout.read()
    process.wait()
    total = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if process.returncode != 0:
        raise SystemExit(f"{tree}: the dry-run exited {process.returncode}:\n{first}{rest}")
    return to_plan, total, cpu, first + rest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the source tree to compare against (a checkout of main)")
    parser.add_argument("--after", default=".", help="the source tree measured (default: this one)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("extra", nargs="*", help="more arguments of the dry-run (after --)")
    args = parser.parse_args()
    results = {"before": [], "after": []}
    for _ in range(args.runs):
        for which in ("before", "after"):
            results[which].append(one_run(getattr(args, which), args.extra))
    print(f"{' '.join(COMMAND + args.extra)}, {args.runs} runs each, alternated")
    print(f"{'tree':<8}{'to the plan (s)':>17}{'in all (s)':>12}{'CPU (s)':>10}")
    for which, runs in results.items():
        plan, total, cpu = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"{which:<8}{plan:>17.2f}{total:>12.2f}{cpu:>10.2f}")
    same = {r[3] for r in results["before"]} == {r[3] for r in results["after"]}
    print(f"the plans printed are {'identical' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
