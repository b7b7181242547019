"""Wall time of the embedded default search, exactly as a user runs it: `python -m cbs_ray.search`.

Includes interpreter start, imports, data generation and tokenization, Ray start-up and shut-down, all
trials and the summary. Results and the Tune experiment go to a temporary directory.

    python bench/default_wall_time.py
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help; no options
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "cbs_ray.search", "--set", f"storage_path={tmp}/rr",
                               "--output", f"{tmp}/out"], capture_output=True, text=True)
        wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"search failed ({proc.returncode}): {proc.stderr[-500:]}")
    critical = re.search(r"Critical batch: (≥ |≤ )?(\d+)", proc.stdout)
    print(f"RESULT default search wall time {wall:.0f} s ({wall / 60:.1f} min; target <= 3 min, issue 17), "
          f"critical batch {(critical.group(1) or '') + critical.group(2) if critical else '?'}")


if __name__ == "__main__":
    main()
