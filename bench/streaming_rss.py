"""Peak resident memory of a streamed Parquet corpus (issue 51's target: a corpus 10× larger keeps peak RSS within
1.2×). For each corpus size a fresh process writes nothing and reads: the driver's part (``data.prepare``: schemas,
row counts, the evaluation rows), then one worker's stream of a whole epoch (``sources.streamed``: rank 0 of 2,
micro-batches of 16), and prints its peak RSS (``ru_maxrss``) after each. ``--ray`` reads through Ray Data on a
local Ray (``ray.init(num_cpus=1)``; its read tasks run in Ray's worker processes, whose memory is not this
process's: the figure is the training worker's own) — run it under ``flock /tmp/cbs-ray-ray.lock``.

With ``--ray`` it also watches Ray's object store while the epoch streams (issue 51's "no object in the object
store larger than one shard"): a thread lists the store's objects (``ray.util.state.list_objects``, through the
dashboard this run starts on 127.0.0.1) every ``--poll-s`` seconds and keeps the largest object and the largest
total seen; one training shard's Arrow size (uncompressed, read from its footer) is printed beside them.

    python bench/streaming_rss.py [--rows 4096] [--shards 2 20] [--ray] [--poll-s 0.2]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
from pathlib import Path


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class ObjectStoreWatch:
    """A thread that lists Ray's object store every ``poll_s`` seconds until ``stop()``: the largest object and the
    largest total of one listing, in bytes, and how many listings it took."""

    def __init__(self, poll_s: float):
        self.poll_s, self.largest, self.total, self.polls, self.errors = poll_s, 0, 0, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from ray.util.state import list_objects

        while not self._stop.is_set():
            try:
                sizes = [o.object_size or 0 for o in list_objects(limit=10000, raise_on_missing_output=False)]
            except Exception:  # the state API can miss a listing under load: counted, not fatal
                self.errors += 1
            else:
                self.polls += 1
                self.largest, self.total = max([self.largest, *sizes]), max(self.total, sum(sizes))
            self._stop.wait(self.poll_s)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        return {"store_largest_object_kib": round(self.largest / 1024, 1),
                "store_largest_total_kib": round(self.total / 1024, 1), "store_polls": self.polls,
                "store_missed_polls": self.errors}


def shard_kib(path: str) -> float:
    """One training shard's size as Arrow holds it in memory (the table read whole: ``nbytes``), in KiB: what a
    block of a whole shard would take in the object store (the footer's sizes are of the encoded pages)."""
    import pyarrow.parquet as pq

    return round(pq.read_table(sorted(Path(path).glob("*.parquet"))[0]).nbytes / 1024, 1)


def measure(path: str, use_ray: bool, poll_s: float = 0.2) -> None:
    """In this process: the driver's part, then rank 0's epoch; prints one JSON line."""
    import torch

    from cbs_ray.data.prepare import prepare_data
    from cbs_ray.sources.streamed import StreamedSource
    from cbs_ray.spec.load import load_spec

    torch.set_num_threads(1)
    spec = load_spec(None, ["task=causal-lm", "model.config={model_type: gpt2, n_embd: 32, n_layer: 1, n_head: 2, "
                            "n_positions: 64}", "model.vocab_size=512", "data.source=parquet", f"data.path={path}",
                            "data.max_seq_length=64", "data.eval_examples=512", "search.metric=eval_loss",
                            "search.mode=min", "search.batch_sizes=[32]", "training.budget_samples=1024",
                            "training.eval_every_samples=1024", "asha.grace_period_samples=1024",
                            "search.num_trials=1"])
    began = peak_mib()
    data = prepare_data(spec)
    driver = peak_mib()
    if use_ray:
        import ray

        ray.init(num_cpus=1, include_dashboard=True, dashboard_host="127.0.0.1", log_to_driver=False)
    watch = ObjectStoreWatch(poll_s) if use_ray else None
    stream = StreamedSource(data, "causal-lm").micro_batches(seed=0, rank=0, workers=2, micro=16, drawn=0, whole=32,
                                                             use_ray=use_ray)
    rows = 0
    for _ in range(data.train_examples // 32):
        rows += len(next(stream)[0])
    store = {**watch.stop(), "shard_kib": shard_kib(path)} if watch else {}
    print(json.dumps({"train_rows": data.train_examples, "rank0_rows": rows, "start_mib": round(began, 1),
                      "driver_mib": round(driver, 1), "worker_mib": round(peak_mib(), 1), **store}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--shards", type=int, nargs=2, default=[2, 20])
    parser.add_argument("--ray", action="store_true")
    parser.add_argument("--poll-s", type=float, default=0.2, help="--ray: seconds between object store listings")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.measure, args.ray, args.poll_s)
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from write_markov_parquet import write_corpus

    results = []
    with tempfile.TemporaryDirectory() as folder:
        for shards in args.shards:
            corpus = Path(folder) / f"corpus{shards}"
            write_corpus(corpus, shards=shards, rows=args.rows, length=64, eval_rows=512)
            line = subprocess.run([sys.executable, __file__, "--measure", str(corpus), "--poll-s", str(args.poll_s)]
                                  + (["--ray"] if args.ray else []),
                                  capture_output=True, text=True, check=True).stdout.strip().splitlines()
            line = next(text for text in reversed(line) if text.startswith("{"))  # Ray writes its own lines too
            results.append(json.loads(line))
            print(f"{shards} shards × {args.rows} rows: {line}", flush=True)
    small, large = results
    print(f"{'Ray Data' if args.ray else 'pyarrow'}: corpus {large['train_rows'] / small['train_rows']:.0f}× larger; "
          f"peak RSS driver {large['driver_mib'] / small['driver_mib']:.3f}×, "
          f"worker {large['worker_mib'] / small['worker_mib']:.3f}×")
    if args.ray:
        print(f"object store: largest object {max(r['store_largest_object_kib'] for r in results)} KiB, largest total "
              f"{max(r['store_largest_total_kib'] for r in results)} KiB, one shard {large['shard_kib']} KiB "
              f"({sum(r['store_polls'] for r in results)} listings, {sum(r['store_missed_polls'] for r in results)} "
              f"missed)")


if __name__ == "__main__":
    main()
