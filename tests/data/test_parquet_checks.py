"""The driver's checks of a Parquet corpus's shards (``data.parquet_checks``, issue 58 findings 7, 8, 13, 14): rows
without tokens, ids that are not integers, ids outside the vocabulary in any shard and columns of the wrong shape
are one line naming the shard and the column, before Ray (exit 2 on the command line); the ids are read from the
footers' statistics where they are, and from the column where they are not."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cbs_ray.cli import main
from cbs_ray.data import parquet_checks
from cbs_ray.data.parquet_checks import column_type_problem, leaf_statistics
from cbs_ray.sources.streamed import rows_in_order
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.tune.api import prepare

VOCAB = 64


def spec_args(path, *extra) -> list[str]:
    return ["task=causal-lm", "model.config={model_type: gpt2, n_embd: 16, n_layer: 1, n_head: 2, n_positions: 8}",
            f"model.vocab_size={VOCAB}", "data.source=parquet", f"data.path={path}", "data.max_seq_length=8",
            "data.eval_examples=4", "search.metric=eval_loss", "search.mode=min", "search.batch_sizes=[4]",
            "training.budget_samples=8", "training.eval_every_samples=8", "asha.grace_period_samples=8",
            "search.num_trials=1", "training.micro_batch_size=4", *extra]


GOOD = [[1, 2, 3, 4]] * 8


def write(folder, *, bad, kind=None, where="a", statistics=True, column="input_ids"):
    """Shards a.parquet, b.parquet (training) and z.parquet (evaluation), all of type ``kind``; ``bad``'s rows in
    the shard ``where``, good rows elsewhere."""
    for name in ("a", "b", "z"):
        rows = bad if name == where else GOOD
        pq.write_table(pa.table({column: pa.array(rows, kind)}), folder / f"{name}.parquet",
                       write_statistics=statistics)
    return folder


def refusal(folder) -> str:
    with pytest.raises(SpecError) as error:
        prepare(load_spec(None, spec_args(folder)))
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("rows, says", [
    (GOOD[:4] + [[]] + GOOD[:3], "a.parquet: row 4 of column input_ids holds no tokens"),
    ([None] + GOOD[:7], "a.parquet: row 0 of column input_ids holds no tokens"),
    (GOOD[:2] + [[1, None, 3]], "a.parquet: row 2 of column input_ids holds a null token id"),
    (GOOD[:2] + [[3, -1]], "a.parquet: column input_ids holds a negative token id (-1)"),
    (GOOD[:2] + [[3, VOCAB]], f"a.parquet: column input_ids holds token id {VOCAB}, not below the vocabulary's"),
])
@pytest.mark.parametrize("statistics", [True, False])
def test_bad_rows_of_a_training_shard_are_one_line_naming_it(tmp_path, rows, says, statistics):
    # Before: the pre-Ray check read only the evaluation rows' largest id; these trained at loss 0 or failed every
    # trial a minute in with "IndexError: index out of range".
    assert says in refusal(write(tmp_path, bad=rows, statistics=statistics))


@pytest.mark.parametrize("rows, kind, says", [
    ([[1.7, 2.0]] * 8, pa.list_(pa.float64()), "column input_ids is list<element: double>, not a list of integer"),
    ([[float("nan"), 2.0]] * 8, pa.list_(pa.float32()), "not a list of integer token ids"),
    ([["12", "3"]] * 8, pa.list_(pa.string()), "column input_ids is list<element: string>, not a list of integer"),
    ([[True, False]] * 8, pa.list_(pa.bool_()), "not a list of integer token ids"),
    ([[[1, 2], [3]]] * 8, pa.list_(pa.list_(pa.int64())), "not a list of integer token ids"),
    ([5] * 8, pa.int64(), "column input_ids is int64, not a list of token ids"),
    ([b"\x01\x02"] * 8, pa.binary(), "column input_ids is binary, not a list of token ids"),
    ([{"ids": 1}] * 8, pa.struct([("ids", pa.int64())]), "not a list of token ids"),
])
def test_a_column_of_the_wrong_type_is_one_line_naming_a_shard_and_the_column(tmp_path, rows, kind, says):
    # Before: floats were cut (1.7 -> 1), strings parsed ("12" -> 12), booleans taken as 0/1 without a word; nested
    # lists, binary, structs and plain integers exited 1 with a raw ValueError/TypeError/IndexError.
    for name in ("a", "b", "z"):
        pq.write_table(pa.table({"input_ids": pa.array(rows, kind)}), tmp_path / f"{name}.parquet")
    message = refusal(tmp_path)
    assert message.startswith("data.path: a.parquet") and says in message


def test_uint64_ids_inside_the_vocabulary_are_taken_and_outside_it_refused(tmp_path):
    kind = pa.list_(pa.uint64())
    data = prepare(load_spec(None, spec_args(write(tmp_path, bad=GOOD, kind=kind)))).data
    assert data.eval_ids[0, :4].tolist() == [1, 2, 3, 4]
    write(tmp_path, bad=[[1, 2 ** 63 + 5]], kind=kind, where="b")
    assert f"b.parquet: column input_ids holds token id {2 ** 63 + 5}" in refusal(tmp_path)


def test_a_clean_corpus_is_checked_from_its_footers_without_reading_a_column(tmp_path, monkeypatch):
    write(tmp_path, bad=GOOD)

    def read(*args, **kwargs):
        raise AssertionError("a column was read")

    monkeypatch.setattr(pq, "read_table", read)
    assert prepare(load_spec(None, spec_args(tmp_path))).data.train_rows == [8, 8]


def test_leaf_statistics_are_the_ids_range_and_nulls_over_every_row_group(tmp_path):
    table = pa.table({"input_ids": [[5, 9], [2, 7], [], [3, 40]]})
    pq.write_table(table, tmp_path / "s.parquet", row_group_size=2)
    assert pq.read_metadata(tmp_path / "s.parquet").num_row_groups == 2
    assert leaf_statistics(pq.read_metadata(tmp_path / "s.parquet"), "input_ids") == (2, 40, 1)
    pq.write_table(table, tmp_path / "n.parquet", write_statistics=False)
    assert leaf_statistics(pq.read_metadata(tmp_path / "n.parquet"), "input_ids") is None


def test_column_types_allowed_and_refused():
    assert column_type_problem(pa.list_(pa.int32()), "input_ids", ids=True) is None
    assert column_type_problem(pa.large_list(pa.uint16()), "input_ids", ids=True) is None
    assert column_type_problem(pa.list_(pa.int64(), 4), "input_ids", ids=True) is None
    assert column_type_problem(pa.string(), "text", ids=False) is None
    assert column_type_problem(pa.large_string(), "text", ids=False) is None
    assert column_type_problem(pa.int64(), "text", ids=False) == "column text is int64, not text (string)"
    assert column_type_problem(pa.binary(), "text", ids=False) == "column text is binary, not text (string)"


def test_an_empty_text_in_a_training_shard_is_one_line(tmp_path):
    for name, texts in (("a", ["good film"] * 4), ("b", ["good", "", "film", "x"]), ("z", ["film"] * 4)):
        pq.write_table(pa.table({"text": texts}), tmp_path / f"{name}.parquet")
    with pytest.raises(SpecError, match="b.parquet: row 1 of column text is empty or null"):
        prepare(load_spec(None, spec_args(tmp_path, "data.text_column=text", "model.tokenizer=gpt2")))


def _corrupt_first_page(path):
    """Bytes of the first page header overwritten (the footer, and its statistics, intact)."""
    raw = bytearray(path.read_bytes())
    raw[4:40] = b"\xff" * 36
    path.write_bytes(bytes(raw))


def test_a_corrupt_page_of_the_evaluation_shard_is_one_line_and_exit_2(tmp_path, capsys):
    # Before: "Couldn't deserialize thrift", a raw OSError, exit 1.
    write(tmp_path, bad=GOOD)
    _corrupt_first_page(tmp_path / "z.parquet")
    assert main(["search", "--dry-run", *[a for arg in spec_args(tmp_path) for a in ("--set", arg)]]) == 2
    err = capsys.readouterr().err
    assert "cannot read column input_ids of z.parquet" in err and len(err.strip().splitlines()) == 1, err[:800]


def test_a_corrupt_page_of_a_training_shard_is_one_line_where_it_is_read(tmp_path):
    # Its footer's statistics pass the driver's check; where the loop reads it, the error names the shard and the
    # column in one line (before: a RayTaskError whose colour codes hid the OSError).
    write(tmp_path, bad=GOOD)
    _corrupt_first_page(tmp_path / "a.parquet")
    data = prepare(load_spec(None, spec_args(tmp_path))).data
    with pytest.raises(ValueError) as error:
        list(rows_in_order(data, 0, 0, 0, use_ray=False))  # an epoch reads every training shard
    assert "cannot read column input_ids of" in str(error.value) and "a.parquet" in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("bad, says", [
    ([[1, 2]] * 2 + [[]], "row 2 of column input_ids holds no tokens"),
    ([[1.5, 2.0]] * 3, "not a list of integer token ids"),
    ([[1, 2]] * 2 + [[1, VOCAB + 5]], f"holds token id {VOCAB + 5}"),
])
def test_bad_shards_on_the_command_line_exit_2_in_one_line(tmp_path, capsys, bad, says):
    kind = pa.list_(pa.float64()) if isinstance(bad[0][0], float) else None
    for name in ("a", "b", "z"):
        pq.write_table(pa.table({"input_ids": pa.array(bad if name == "b" or kind else GOOD, kind)}),
                       tmp_path / f"{name}.parquet")
    assert main(["search", "--dry-run", *[a for arg in spec_args(tmp_path) for a in ("--set", arg)]]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err[:800]


def test_first_line_skips_blank_lines():
    assert parquet_checks.first_line(OSError("\n\n  Couldn't deserialize thrift\nmore")) == \
        "Couldn't deserialize thrift"
    assert parquet_checks.first_line(ValueError("")) == "ValueError"
