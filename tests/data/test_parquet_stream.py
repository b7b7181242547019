"""A streamed Parquet corpus (``data.source: parquet``, issue 51): the driver's checks (one line each), the global
order every trial trains in (the same samples in the same order whatever the batch, a restart included), and the
real loop trained on it; the Ray Data reader against the pyarrow one on a real local Ray (e2e)."""

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cbs_ray.data.parquet import StreamedData
from cbs_ray.sources.streamed import StreamedSource, global_order
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.tune.api import prepare
from helpers.training import train_in_process

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from write_markov_parquet import write_corpus  # noqa: E402  (the shipped script is what the tests read)

ROWS, SHARDS = 96, 3


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus")
    write_corpus(out, shards=SHARDS, rows=ROWS, length=16, eval_rows=32)
    return out


def spec_args(path) -> list[str]:
    return ["task=causal-lm", "model.config={model_type: gpt2, n_embd: 32, n_layer: 1, n_head: 2, n_positions: 16}",
            "model.vocab_size=512", "data.source=parquet", f"data.path={path}", "data.max_seq_length=16",
            "data.eval_examples=32", "search.metric=eval_loss", "search.mode=min", "search.batch_sizes=[8, 32]",
            "training.budget_samples=128", "training.eval_every_samples=64", "asha.grace_period_samples=64",
            "search.num_trials=2", "training.micro_batch_size=8"]


def test_the_driver_reads_schemas_counts_and_the_evaluation_rows_only(corpus):
    data = prepare(load_spec(None, spec_args(corpus))).data
    assert isinstance(data, StreamedData)
    assert data.train_rows == [ROWS] * SHARDS and data.train_examples == ROWS * SHARDS
    assert data.train_ids.shape == (0, 16) and data.eval_ids.shape == (32, 16)
    first_eval = pq.read_table(corpus / "zz-eval.parquet").column("input_ids")[0].as_py()
    assert data.eval_ids[0].tolist() == first_eval and data.eval_mask.all()


def _consumed(data, *, seed, workers, micro, samples, drawn=0):
    """The rows (as token tuples) the ranks took for ``samples`` samples, in the order of their steps."""
    source = StreamedSource(data, "causal-lm")
    streams = [source.micro_batches(seed=seed, rank=r, workers=workers, micro=micro, drawn=drawn, whole=32,
                                    use_ray=False) for r in range(workers)]
    taken = []
    for _ in range(samples // (micro * workers)):
        batches = [next(s) for s in streams]
        for position in range(micro):  # rank r's row i was global row i·workers + r
            taken += [tuple(b[0][position].tolist()) for b in batches]
    return taken


def test_every_batch_takes_the_same_rows_in_the_same_order_and_a_restart_continues_them(corpus):
    data = prepare(load_spec(None, spec_args(corpus))).data
    samples = 2 * SHARDS * ROWS // 32 * 32 + 64  # past two epochs: the epoch boundaries agree too
    one = _consumed(data, seed=5, workers=1, micro=32, samples=samples)
    two = _consumed(data, seed=5, workers=2, micro=4, samples=samples)
    four = _consumed(data, seed=5, workers=4, micro=2, samples=samples)
    assert one == two == four
    assert len(set(one[:SHARDS * ROWS])) == SHARDS * ROWS  # the first epoch: every row once
    assert one[:SHARDS * ROWS] != one[SHARDS * ROWS:2 * SHARDS * ROWS]  # the next epoch's shard order differs
    assert _consumed(data, seed=6, workers=1, micro=32, samples=64) != one[:64]  # another seed, another order
    resumed = _consumed(data, seed=5, workers=2, micro=4, samples=samples - 40, drawn=20)  # 20 rows a rank drawn
    assert resumed == two[40:]


def test_the_loop_trains_on_the_stream_with_two_batches_seeing_the_same_samples(corpus, monkeypatch):
    """The real loop at B=8 and B=32 over 128 samples: the same 128 rows in the same order, and an evaluation."""
    seen = {}
    original = StreamedSource.micro_batches

    def recorded(self, **kwargs):
        rows = seen.setdefault(kwargs["micro"], [])
        for batch in original(self, **kwargs):
            rows += [tuple(r.tolist()) for r in batch[0]]
            yield batch

    monkeypatch.setattr(StreamedSource, "micro_batches", recorded)
    reports = {}
    for batch, micro in ((8, 8), (32, 8)):
        overrides = spec_args(corpus) + [f"training.micro_batch_size={micro // (2 if batch == 8 else 1)}"]
        session, _ = train_in_process(overrides, base=[], batch=batch)
        reports[batch] = session.reports
    small, large = seen[4], seen[8]
    assert small[:128] == large[:128] and len(set(large[:128])) == 128
    assert [r["samples_seen"] for r in reports[8]] == [r["samples_seen"] for r in reports[32]] == [64, 128]
    assert all(np.isfinite(r["eval_loss"]) for r in reports[8] + reports[32])


def test_a_missing_folder_is_one_line_at_load(tmp_path):
    with pytest.raises(SpecError, match="data.path: no such folder"):
        load_spec(None, spec_args(tmp_path / "nowhere"))


def test_mixed_schemas_are_one_line_before_ray(tmp_path):
    pq.write_table(pa.table({"input_ids": [[1, 2, 3]]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"input_ids": [[1.5, 2.0]]}), tmp_path / "b.parquet")
    with pytest.raises(SpecError, match="mixed schemas: b.parquet has") as error:
        prepare(load_spec(None, spec_args(tmp_path)))
    assert "\n" not in str(error.value)


def test_a_missing_folder_on_the_command_line_exits_2_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "cbs_ray.search", "--dry-run",
                             *[a for arg in spec_args(tmp_path / "nowhere") for a in ("--set", arg)]],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "data.path: no such folder" in result.stderr


@pytest.mark.e2e
def test_ray_data_reads_the_same_global_order_as_pyarrow(corpus):
    """Through Ray Data (a real local Ray whose one CPU an actor holds: the read tasks must hold none) the rows come
    in the very order the pyarrow reader gives, over an epoch boundary."""
    import ray

    data = prepare(load_spec(None, spec_args(corpus))).data
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)

    @ray.remote(num_cpus=1)
    class Holder:  # holds the one CPU, as a trial's workers hold the cluster's: the read must not wait for one
        def ready(self):
            return True

    holder = Holder.remote()
    ray.get(holder.ready.remote())
    try:
        count = SHARDS * ROWS + 50
        through_ray = [tuple(r) for r, _ in zip(global_order(data, 3, 32, start=10, use_ray=True), range(count))]
    finally:
        ray.shutdown()
    plain = [tuple(r) for r, _ in zip(global_order(data, 3, 32, start=10, use_ray=False), range(count))]
    assert through_ray == plain


def test_a_text_column_is_tokenised_by_the_spec_tokenizer_as_the_rows_stream(tmp_path):
    """A ``text`` column: the evaluation rows and the streamed rows both through ``model.tokenizer``, padded and
    masked to ``max_seq_length``; without a tokenizer, one line."""
    from test_tokens import gpt2_style_tokenizer
    from transformers import AutoTokenizer

    for index, texts in enumerate([["good film"] * 40, ["bad film", "good film good"] * 20, ["film"] * 8]):
        pq.write_table(pa.table({"text": texts}), tmp_path / f"shard-{index}.parquet")
    name = gpt2_style_tokenizer(tmp_path / "tokenizer")
    args = [a for a in spec_args(tmp_path) if not a.startswith(("model.vocab_size", "data.eval_examples"))]
    args += ["data.text_column=text", "data.eval_examples=8", "search.batch_sizes=[8]", "training.budget_samples=64",
             "training.eval_every_samples=32", "asha.grace_period_samples=32", "search.num_trials=1"]
    with pytest.raises(SpecError, match="model.tokenizer: a Parquet text column"):
        prepare(load_spec(None, args))
    data = prepare(load_spec(None, args + [f"model.tokenizer={name}"])).data
    tok = AutoTokenizer.from_pretrained(name)
    film = tok("film")["input_ids"]
    assert data.eval_ids.shape == (8, 16) and data.eval_ids[0, :len(film)].tolist() == film
    assert data.eval_mask[0].sum() == len(film) and data.vocab_size == len(tok)
    ids, mask, _ = next(StreamedSource(data, "causal-lm").micro_batches(seed=0, rank=0, workers=1, micro=8, drawn=0,
                                                                        whole=8, use_ray=False))
    streamed = {tuple(row[m == 1].tolist()) for row, m in zip(ids.numpy(), mask.numpy())}
    assert streamed <= {tuple(tok(t)["input_ids"]) for t in ("good film", "bad film", "good film good")}
    assert ids.shape == (8, 16) and streamed


@pytest.mark.parametrize("files, cpus, plan", [
    (3, 1.0, (3, 2)),  # one task a shard, 2 at once per CPU held
    (10_000, 2.0, (1000, 4)),  # 10 000 shards: 1000 tasks of 10 shards, 4 at once on 2 CPUs
    (10_000, 0.0, (1000, 2)),  # a driver holds no CPU: counted as one
    (0, 1.0, (1, 2)),
])
def test_the_read_plan_bounds_the_tasks_in_flight_by_the_cpus_held(files, cpus, plan):
    from cbs_ray.sources.streamed import read_plan

    assert read_plan(files, cpus) == plan


def test_the_ray_data_read_asks_no_cpu_and_at_most_two_tasks_per_cpu_held(monkeypatch):
    """Issue 58 finding 4: the shard-reading tasks asked for no CPU and nothing else bounded them (10 000 shards
    started more than 92 worker processes on 2 cores). The map's parameters, read without starting Ray."""
    import ray.data

    from cbs_ray.sources import streamed

    asked = {}

    class Items:
        def map_batches(self, fn, **kwargs):
            asked.update(kwargs)
            return self

        def iter_batches(self, **kwargs):
            return iter([pa.table({"input_ids": [[1, 2]]})])

    def from_items(items, override_num_blocks):
        asked["blocks"] = override_num_blocks
        return Items()

    monkeypatch.setattr(ray.data, "from_items", from_items)
    monkeypatch.setattr(streamed, "_held_cpus", lambda: 2.0)
    assert list(streamed._ray_data_rows([f"s{i}.parquet" for i in range(5000)], "input_ids")) == [[[1, 2]]]
    assert asked["num_cpus"] == 0 and asked["blocks"] == 1000
    assert isinstance(asked["compute"], ray.data.TaskPoolStrategy) and asked["compute"].size == 4


def test_the_read_tasks_function_comes_from_a_module_that_imports_no_torch(monkeypatch):
    """Every read task runs in a Ray worker process started for it (an epoch's read starts them afresh), which
    imports the module of the map's function: with torch (sources.streamed's), 4 tasks of a 2-worker trial's epoch
    waited about 11 s to start on 2 cores, for a read of 0.02 s. The map's function, read without starting Ray;
    its module imported alone in a fresh interpreter."""
    import ray.data

    from cbs_ray.sources import streamed

    mapped = []

    class Items:
        def map_batches(self, fn, **kwargs):
            mapped.append(fn)
            return self

        def iter_batches(self, **kwargs):
            return iter([])

    monkeypatch.setattr(ray.data, "from_items", lambda items, override_num_blocks: Items())
    assert list(streamed._ray_data_rows(["s.parquet"], "input_ids")) == []
    (fn,) = mapped
    imported = subprocess.run([sys.executable, "-c", f"import sys, {fn.__module__}; print('torch' in sys.modules)"],
                              capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr[-2000:]
    assert imported.stdout.strip() == "False", f"{fn.__module__} imports torch"


@pytest.mark.e2e
def test_a_corrupt_training_shard_read_through_ray_data_is_one_line_naming_it(tmp_path):
    """Issue 58 finding 14: before, a RayTaskError whose ANSI colour codes and traceback hid the OSError."""
    import ray

    from cbs_ray.sources.streamed import ShardReadError, rows_in_order

    write_corpus(tmp_path, shards=2, rows=32, length=16, eval_rows=32)
    data = prepare(load_spec(None, spec_args(tmp_path))).data
    broken = sorted(tmp_path.glob("*.parquet"))[0]
    raw = bytearray(broken.read_bytes())
    raw[4:40] = b"\xff" * 36  # the first page's header; the footer intact
    broken.write_bytes(bytes(raw))
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        with pytest.raises(ShardReadError) as error:
            list(rows_in_order(data, 0, 0, 0, use_ray=True))
    finally:
        ray.shutdown()
    message = str(error.value)
    assert message.startswith(f"data.path: cannot read column input_ids of {broken}: ") and "\n" not in message
    assert "\x1b[" not in message
