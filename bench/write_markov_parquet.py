"""Write a Parquet corpus of the built-in markov language (``cbs_ray.data.markov``), offline: ``--shards`` training
shards of ``--rows`` sequences each, then one evaluation shard (the last in name order, which ``data.source:
parquet`` holds out), every row an ``input_ids`` list of ``--length`` tokens. The language is the spec's default
(vocabulary 512, rank 16, Zipf 1, coupling 3, seed 1234); each shard draws its own sequences (seed [language seed,
100 + shard]), so a corpus written with more shards holds the smaller one's shards as its first ones.

    python bench/write_markov_parquet.py --out /tmp/markov_corpus [--shards 8] [--rows 4096] [--length 64]
    python -m cbs_ray.search --space search_spaces/gpt2_fsdp_stream.yaml --set data.path=/tmp/markov_corpus
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cbs_ray.data.markov import markov_chain, sample_sequences

LANGUAGE = {"vocab_size": 512, "rank": 16, "zipf_exponent": 1.0, "coupling": 3.0, "seed": 1234}
"""The ``data.markov_*`` defaults of the spec."""


def write_corpus(out: Path, *, shards: int, rows: int, length: int, eval_rows: int = 1024) -> list[Path]:
    """The shards' paths, written: ``train-00000.parquet`` … and ``zz-eval.parquet`` (last in name order)."""
    out.mkdir(parents=True, exist_ok=True)
    chain = markov_chain(**LANGUAGE)
    written = []
    for index in range(shards + 1):
        is_eval = index == shards
        sequences = sample_sequences(chain, eval_rows if is_eval else rows, length,
                                     seed=[LANGUAGE["seed"], 2] if is_eval else [LANGUAGE["seed"], 100 + index])
        path = out / ("zz-eval.parquet" if is_eval else f"train-{index:05d}.parquet")
        table = pa.table({"input_ids": pa.array(list(sequences.astype(np.int32)), type=pa.list_(pa.int32()))})
        pq.write_table(table, path, row_group_size=1024)
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--eval-rows", type=int, default=1024)
    args = parser.parse_args()
    paths = write_corpus(args.out, shards=args.shards, rows=args.rows, length=args.length, eval_rows=args.eval_rows)
    print(f"wrote {len(paths) - 1} training shards of {args.rows} rows and {paths[-1].name} "
          f"({args.eval_rows} rows), {args.length} tokens a row, to {args.out}")


if __name__ == "__main__":
    main()
