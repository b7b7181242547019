"""Peak resident memory of a streamed Parquet corpus (issue 51's target: a corpus 10× larger keeps peak RSS within
1.2×). For each corpus size a fresh process writes nothing and reads: the driver's part (``data.prepare``: schemas,
row counts, the evaluation rows), then one worker's stream of a whole epoch (``sources.streamed``: rank 0 of 2,
micro-batches of 16), and prints its peak RSS (``ru_maxrss``) after each. ``--ray`` reads through Ray Data on a
local Ray (``ray.init(num_cpus=1)``; its read tasks run in Ray's worker processes, whose memory is not this
process's: the figure is the training worker's own) — run it under ``flock /tmp/cbs-ray-ray.lock``.

    python bench/streaming_rss.py [--rows 4096] [--shards 2 20] [--ray]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(path: str, use_ray: bool) -> None:
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

        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    stream = StreamedSource(data, "causal-lm").micro_batches(seed=0, rank=0, workers=2, micro=16, drawn=0, whole=32,
                                                             use_ray=use_ray)
    rows = 0
    for _ in range(data.train_examples // 32):
        rows += len(next(stream)[0])
    print(json.dumps({"train_rows": data.train_examples, "rank0_rows": rows, "start_mib": round(began, 1),
                      "driver_mib": round(driver, 1), "worker_mib": round(peak_mib(), 1)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--shards", type=int, nargs=2, default=[2, 20])
    parser.add_argument("--ray", action="store_true")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.measure, args.ray)
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from write_markov_parquet import write_corpus

    results = []
    with tempfile.TemporaryDirectory() as folder:
        for shards in args.shards:
            corpus = Path(folder) / f"corpus{shards}"
            write_corpus(corpus, shards=shards, rows=args.rows, length=64, eval_rows=512)
            line = subprocess.run([sys.executable, __file__, "--measure", str(corpus)] + (["--ray"] if args.ray else []),
                                  capture_output=True, text=True, check=True).stdout.strip().splitlines()
            line = next(text for text in reversed(line) if text.startswith("{"))  # Ray writes its own lines too
            results.append(json.loads(line))
            print(f"{shards} shards × {args.rows} rows: {line}", flush=True)
    small, large = results
    print(f"{'Ray Data' if args.ray else 'pyarrow'}: corpus {large['train_rows'] / small['train_rows']:.0f}× larger; "
          f"peak RSS driver {large['driver_mib'] / small['driver_mib']:.3f}×, "
          f"worker {large['worker_mib'] / small['worker_mib']:.3f}×")


if __name__ == "__main__":
    main()
