"""What tracking costs: the default search run as a user runs it (`python -m cbs_ray.search`), once plain
and once with every tracker on (MLflow file store, TensorBoard, W&B offline) and the Optuna study in
SQLite, alternating so that drift on this shared machine hits both alike.

    python bench/tracking_overhead.py [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

TRACKED = ["tracking.mlflow.tracking_uri=file:./mlruns", "tracking.tensorboard=true",
           "tracking.wandb.mode=offline", "search.study_storage=sqlite:///cbs.db"]


def search_seconds(overrides: list[str]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "cbs_ray.search", "--output", f"{tmp}/out"]
        for override in [f"storage_path={tmp}/rr", *overrides]:
            argv += ["--set", override]
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp, env={**os.environ, "WANDB_SILENT": "true"})
        wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"search failed ({proc.returncode}): {proc.stderr[-500:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    rounds = parser.parse_args().rounds
    plain, tracked = [], []
    for _ in range(rounds):
        plain.append(search_seconds([]))
        tracked.append(search_seconds(TRACKED))
        print(f"plain {plain[-1]:.0f} s, tracked {tracked[-1]:.0f} s", flush=True)
    p, t = sum(plain) / rounds, sum(tracked) / rounds
    print(f"RESULT default search, every tracker + SQLite study ÷ plain: {t / p:.3f} ({t:.0f} s vs {p:.0f} s, "
          f"{(t - p) / 18:+.2f} s per trial over 18 trials, {rounds} round(s))")


if __name__ == "__main__":
    main()
