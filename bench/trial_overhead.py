"""Fixed overhead of a trial: from the moment a trial can start to its first optimizer step.

Two trial kinds, each in its own 3-trial Tune experiment on one local Ray instance, trials one at a time
(max_concurrent_trials=1), the two kinds alternated across repeats so both see the same machine load:

* 1 worker: a single CPU worker runs the loop in-process inside the Tune trial;
* 2 workers: the trial launches a Ray Train TorchTrainer with 2 gloo workers.

cold: the first trial of an experiment, clock started when Tuner.fit() is called (Tune's own experiment
start-up is charged to it). warm: every later trial, clock started at the previous trial's last report
(the moment its resources free up), i.e. the per-trial cost inside a running search.

    python bench/trial_overhead.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import ray

from cbs_ray.methods.scratch.search import fit_experiment
from cbs_ray.records.storage import load_history
from cbs_ray.spec.load import load_spec
from cbs_ray.tune.api import prepare
from cbs_ray.tune.driver import ExperimentLauncher
from cbs_ray.tune.prepare import Prepared

SHAPE = ["search.batch_sizes=[16, 32, 64]", "search.num_trials=3", "training.budget_samples=2048",
         "training.eval_every_samples=2048", "asha.grace_period_samples=2048",
         "resources.max_concurrent_trials=1"]


def experiment(workers: int, storage: str) -> tuple[float, list[float]]:
    spec = load_spec(None, SHAPE + [f"resources.workers_per_trial={workers}", f"storage_path={storage}"])
    prepared = prepare(spec)
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    started = time.time()
    launcher = ExperimentLauncher(spec, Prepared(data, budget, config), verbose=0)
    history = load_history(fit_experiment(spec, launcher)).sort_values("first_step_at")
    first, ended = history["first_step_at"].tolist(), history["reported_at"].tolist()
    return first[0] - started, [first[i] - ended[i - 1] for i in range(1, len(first))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    t0 = time.time()
    ray.init(include_dashboard=True, dashboard_host="127.0.0.1", logging_level="WARNING")
    print(f"ray.init: {time.time() - t0:.1f} s")
    cold, warm = {1: [], 2: []}, {1: [], 2: []}
    with tempfile.TemporaryDirectory() as storage:
        try:
            for _ in range(args.repeats):
                for workers in (1, 2):
                    c, w = experiment(workers, storage)
                    cold[workers].append(c)
                    warm[workers] += w
                    print(f"workers={workers}: cold {c:.1f} s, warm {', '.join(f'{x:.1f}' for x in w)} s",
                          flush=True)
        finally:
            ray.shutdown()
    for workers, target in ((1, 3.0), (2, 15.0)):
        print(f"RESULT workers={workers}: warm median {statistics.median(warm[workers]):.1f} s "
              f"(min {min(warm[workers]):.1f}, max {max(warm[workers]):.1f}, n={len(warm[workers])}); "
              f"cold median {statistics.median(cold[workers]):.1f} s (n={len(cold[workers])}); "
              f"target <= {target:.0f} s")


if __name__ == "__main__":
    main()
