"""What a big in-memory dataset costs through the Python API's objects path (issue 16), side by side with
the spec path on the very same arrays and model.

The data: ~200 MB of random token ids (int64 ids and attention mask, [examples, 16]) and labels, held by
the driver. The spec path trains on them as a ``data.PreparedData``; the objects path as a map-style
torch ``Dataset`` over the same numpy arrays (``train_dataset``), with ``model_init`` building the same
2-layer, 64-wide BERT the spec path builds from its config. Both go through ``fit_experiment`` (the search
``run_search`` runs), which puts the data in Ray's object store once (``trial.DataRef``); every trial
and every Ray Train worker fetches it from there (zero-copy: numpy arrays, mapped from shared memory).

Each (path, trial kind) is one Tune experiment of ``--trials`` trials, one at a time, on one local Ray
instance: in-process (1 CPU worker) and 2 gloo workers under a TorchTrainer; ``--rounds`` of them, the
two paths taking turns to go first. Per trial, from its
reports: overhead = (last report − ``trial_started_at``) − ``train_time_s`` (everything that is not an
optimizer step: fetching the data, building the model and loader, starting the Train workers,
evaluation, checkpoints), and start-up = ``first_step_at`` − ``trial_started_at``. The driver's RSS
(psutil, sampled every 50 ms) is read at the first trial's start and the last trial's end.

Targets: per-trial overhead within 1 s of the spec path's; the driver's RSS does not grow by the
dataset's size for each trial (here: less than a tenth of it per trial).

    python bench/objects_overhead.py [--trials 3] [--rounds 2] [--megabytes 200] [--workers 1,2]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import tempfile
import threading
import time

import numpy as np
import psutil  # Ray's own copy (ray/thirdparty_files), on the path once ray is imported
import ray
import torch

from cbs_ray.methods.scratch.search import fit_experiment
from cbs_ray.records.storage import load_history
from cbs_ray.sources.model import build_model
from cbs_ray.sources.user_objects import user_objects
from cbs_ray.spec.load import load_spec
from cbs_ray.tune.api import prepare
from cbs_ray.tune.driver import ExperimentLauncher
from cbs_ray.tune.prepare import Prepared

SHAPE = ["search.batch_sizes=[32, 64]", "training.budget_samples=2048", "training.eval_every_samples=1024",
         "asha.grace_period_samples=2048", "resources.max_concurrent_trials=1",
         "search.metric=eval_loss", "search.mode=min"]  # eval_loss: the objects path needs no compute_metrics
EVAL_EXAMPLES = 512
BYTES_PER_EXAMPLE = 16 * 8 * 2 + 8  # int64 ids and mask of 16 tokens, an int64 label


class TokenIds(torch.utils.data.Dataset):
    """Rows of numpy arrays as the items HF's default collator stacks (what a pipeline's tokenized
    dataset in torch format gives)."""

    def __init__(self, ids: np.ndarray, mask: np.ndarray, labels: np.ndarray):
        self.ids, self.mask, self.labels = ids, mask, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": torch.tensor(self.ids[i]), "attention_mask": torch.tensor(self.mask[i]),
                "labels": torch.tensor(self.labels[i])}


class RssSampler(threading.Thread):
    """The driver's resident set size every ``period`` seconds, with the time it was read."""

    def __init__(self, period: float = 0.05):
        super().__init__(daemon=True)
        self.period, self.samples, self.stopped = period, [], threading.Event()

    def run(self) -> None:
        me = psutil.Process()
        while not self.stopped.is_set():
            self.samples.append((time.time(), me.memory_info().rss))
            time.sleep(self.period)

    def at(self, t: float) -> int:
        """The last reading taken at or before ``t``."""
        return [rss for when, rss in self.samples if when <= t][-1]


def big_data(spec, megabytes: int):
    """The built-in task's data and model config (a small eval set), with its training arrays replaced by
    ``megabytes`` of random token ids: (PreparedData, the model config)."""
    made = prepare(spec)
    prepared, config = made.data, made.model_config
    examples = megabytes * 2**20 // BYTES_PER_EXAMPLE
    rng = np.random.default_rng(0)
    ids = rng.integers(0, prepared.vocab_size, size=(examples, spec.data.max_seq_length), dtype=np.int64)
    labels = rng.integers(0, prepared.num_labels, size=examples, dtype=np.int64)
    return dataclasses.replace(prepared, train_ids=ids, train_mask=np.ones_like(ids), train_labels=labels), config


def experiment(path: str, workers: int, data, config, args, storage: str, rss: RssSampler) -> dict:
    kind = [f"resources.workers_per_trial={workers}", f"search.num_trials={args.trials}", f"storage_path={storage}"]
    if path == "spec":
        spec = load_spec(None, SHAPE + kind + [f"data.builtin_eval_examples={EVAL_EXAMPLES}"])
        prepared = prepare(spec)
        trains_on = Prepared(data, prepared.budget_samples, config)
    else:
        spec = load_spec(None, SHAPE + kind)
        model = {"name": spec.model.name, "config": spec.model.config}
        objects = user_objects(
            model_init=functools.partial(build_model, model, spec.task, config),
            train_dataset=TokenIds(data.train_ids, data.train_mask, data.train_labels),
            eval_dataset=TokenIds(data.eval_ids, data.eval_mask, data.eval_labels))
        trains_on = prepare(spec, objects)
    before = psutil.Process().memory_info().rss
    history = load_history(fit_experiment(spec, ExperimentLauncher(spec, trains_on, verbose=0)))
    trials = history.groupby("trial_id").agg(started=("trial_started_at", "min"), first=("first_step_at", "min"),
                                             ended=("reported_at", "max"), train=("train_time_s", "max"))
    trials = trials.sort_values("started")
    first, last = trials.iloc[0], trials.iloc[-1]
    store = ray.cluster_resources()["object_store_memory"] - ray.available_resources().get("object_store_memory", 0)
    return {"overhead": list(trials["ended"] - trials["started"] - trials["train"]),
            "startup": list(trials["first"] - trials["started"]),
            "put_mb": (rss.at(first["started"]) - before) / 2**20,
            "growth_mb": (rss.at(last["ended"]) - rss.at(first["started"])) / 2**20 / len(trials),
            "store_mb": store / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--workers", default="1,2", help="trial kinds: workers per trial, comma-separated")
    args = parser.parse_args()
    kinds = [int(w) for w in args.workers.split(",")]
    t0 = time.time()
    # With the dashboard, as a search runs: Ray Train's placement-group cleaner asks its state API.
    ray.init(include_dashboard=True, dashboard_host="127.0.0.1", logging_level="WARNING")
    print(f"ray.init: {time.time() - t0:.1f} s", flush=True)
    rss = RssSampler()
    rss.start()
    results = {}
    with tempfile.TemporaryDirectory() as storage:
        try:
            data, config = big_data(load_spec(None, SHAPE + [f"data.builtin_eval_examples={EVAL_EXAMPLES}"]),
                                    args.megabytes)
            size_mb = sum(a.nbytes for a in (data.train_ids, data.train_mask, data.train_labels)) / 2**20
            start = time.perf_counter()
            stored = ray.put(data)  # what a 2-worker trial paid per trial when its Train run carried the data
            put_s = time.perf_counter() - start
            del stored
            print(f"training data: {len(data.train_ids)} examples, {size_mb:.0f} MB; one ray.put of it: "
                  f"{put_s:.2f} s", flush=True)
            for round_ in range(args.rounds):
                for workers in kinds:
                    # The two paths alternate which goes first, so that drift on the shared box hits both alike.
                    for path in ("spec", "objects") if round_ % 2 == 0 else ("objects", "spec"):
                        r = experiment(path, workers, data, config, args, storage, rss)
                        results.setdefault((path, workers), []).append(r)
                        overhead, startup = (", ".join(f"{x:.2f}" for x in r[key]) for key in ("overhead", "startup"))
                        print(f"{path} path, workers={workers}: overhead {overhead} s; start-up {startup} s; driver "
                              f"RSS +{r['put_mb']:.0f} MB before the first trial, {r['growth_mb']:+.1f} MB per trial; "
                              f"object store holds {r['store_mb']:.0f} MB", flush=True)
        finally:
            rss.stopped.set()
            ray.shutdown()
    for workers in kinds:
        pooled = {path: {key: [x for r in results[path, workers] for x in r[key]] for key in ("overhead", "startup")}
                  for path in ("spec", "objects")}
        growth = {path: max(r["growth_mb"] for r in results[path, workers]) for path in ("spec", "objects")}
        spec_o, obj_o = statistics.median(pooled["spec"]["overhead"]), statistics.median(pooled["objects"]["overhead"])
        met = abs(obj_o - spec_o) <= 1.0 and max(growth.values()) < size_mb / 10
        print(f"RESULT workers={workers}: per-trial overhead, median of {len(pooled['spec']['overhead'])}: objects "
              f"{obj_o:.2f} s vs spec {spec_o:.2f} s ({obj_o - spec_o:+.2f} s, ratio {obj_o / spec_o:.2f}); start-up "
              f"objects {statistics.median(pooled['objects']['startup']):.2f} s vs spec "
              f"{statistics.median(pooled['spec']['startup']):.2f} s; driver RSS per trial, largest of "
              f"{args.rounds}: objects {growth['objects']:+.1f} MB, spec {growth['spec']:+.1f} MB "
              f"(dataset {size_mb:.0f} MB); target (within 1 s, < {size_mb / 10:.0f} MB per trial) "
              f"{'met' if met else 'NOT met'}")
    print(f"RESULT one ray.put of the {size_mb:.0f} MB: {put_s:.2f} s (the copy every 2-worker trial made when its "
          f"TorchTrainer's train_loop_config held the data; now none)")


if __name__ == "__main__":
    main()
