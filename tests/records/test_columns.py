"""records.columns: the history's column names, defined once beside TrialReport, and the readers using them."""

import ast
import dataclasses
from pathlib import Path

import pandas as pd
import pytest

import cbs_ray
from cbs_ray.records.columns import (
    ADDED,
    ALL_COLUMNS,
    DERIVED,
    EVALUATION,
    OPTIONAL,
    REPORTED,
    Column,
    MissingColumnError,
    column_problems,
    require_columns,
)
from cbs_ray.records.trial_report import TrialReport

PACKAGE = Path(cbs_ray.__file__).parent
# The readings and reports: analysis/, report/, and each method's own (cbs_ray/methods/<name>/, all but its Ray half).
# The methods' driver-side modules, which write Tune configs and plans (branch's runs.py: the keys of its runs'
# points), and their training hooks (hooks.py: what a run writes into its reports and checkpoints), not readers of
# the history
RAY_HALVES = {"search.py", "bisection_search.py", "per_batch_asha.py", "gate.py", "trunk_watch.py", "runs.py",
              "hooks.py"}
SETTINGS = {"settings.py"}  # a method's spec section and its resolution, which writes the metadata's keys
READERS = sorted([*(PACKAGE / "analysis").glob("*.py"), *(PACKAGE / "report").glob("*.py"),
                  *(p for p in (PACKAGE / "methods").glob("*/*.py")
                    if p.name not in RAY_HALVES | SETTINGS | {"__init__.py"})])

# Literals that spell a column's name but are not a column of the history or of the analysis tables.
NOT_COLUMNS = {
    ("scratch/summary.py", "batch_size"): "Importance.to_dict: ImportanceReading's fields as summary.json keys",
    ("scratch/summary.py", "trials"): "Importance.to_dict: ImportanceReading's fields as summary.json keys",
    ("scratch/page.py", "trials"): "the 'What mattered' table: ImportanceReading.trials",
    ("branch/report.py", "role"): "methods.branch.report.failed_roles: a failed trial's Tune config key (its point),"
                                     " not a column",
}
# Where a literal in code names a column (pandas' and dicts' ways to pick one); *_COLUMNS are lists of them.
PICKING_METHODS = {"get", "sort_values", "groupby", "set_index", "dropna", "drop_duplicates", "merge", "drop", "pop"}
PICKING_KEYWORDS = {"subset", "on", "left_on", "right_on", "by", "columns"}


def _report(**changes) -> TrialReport:
    values = dict(evaluation={"accuracy": 0.8, "eval_loss": 0.4, "eval_examples": 64}, samples_seen=1024, steps=64,
                  batch_size=16, alpha=0.5, warmup_fraction=0.1, peak_lr=1e-3, lr=5e-4, train_loss=0.5, grad_norm=1.0,
                  wall_time_s=3.0, micro_batch=16, accumulation=1, workers=1, diverged=False)
    return TrialReport(**{**values, **changes})


def test_column_has_one_attribute_per_trial_report_field_and_per_documented_column():
    names = {k: v for k, v in vars(Column).items() if not k.startswith("_")}
    assert all(k == v and type(v) is str for k, v in names.items())  # plain strings: labels, keys, JSON as before
    assert set(names) == ALL_COLUMNS
    assert REPORTED == tuple(f.name for f in dataclasses.fields(TrialReport)[1:])  # all but the evaluation dict
    assert set(OPTIONAL) < set(REPORTED) and Column.role in OPTIONAL and Column.samples_seen not in OPTIONAL
    for documented in (EVALUATION, ADDED, DERIVED):  # every name beyond the fields says what it is
        assert all(isinstance(text, str) and text for text in documented.values())
    assert column_problems() == []


def test_a_field_renamed_without_its_column_is_a_problem():
    # TrialReport with samples_seen renamed: the column names no field any more, the field has no column.
    renamed = dataclasses.make_dataclass("Renamed", [("samples" if f.name == "samples_seen" else f.name, f.type)
                                                     for f in dataclasses.fields(TrialReport)])
    assert column_problems(Column, renamed) == [
        "Renamed.samples has no Column",
        "Column.samples_seen is neither a Renamed field nor a documented column"]

    class Misspelt:
        steps = "step"

    assert "Misspelt.steps is 'step', not its own name" in column_problems(Misspelt, TrialReport)


def test_what_a_trial_reports_is_named_by_columns():
    full = _report(grad_sq=1.0, trace_sigma=2.0, b_simple=2.0, b_small=4, noise_scale_note="", warmup_steps=6,
                   samples_per_s=100.0, train_time_s=2.0, first_step_at=1.0, trial_started_at=0.5, reported_at=3.5,
                   resumed_from_samples=0, node_id="n1", role="trunk", start_samples=0, tokens_seen=65536,
                   seed_offset=0, control="small", train_loss_ema=3.5)
    assert set(full.to_dict()) <= ALL_COLUMNS
    assert set(full.to_dict()) - set(full.evaluation) == set(REPORTED)
    # A diverged report leaves the optional fields out: those are the ones a reader must guard.
    assert set(REPORTED) - set(_report(diverged=True).to_dict()) == set(OPTIONAL)


def test_require_columns_names_what_is_missing():
    history = pd.DataFrame({Column.trial_id: ["a"], Column.batch_size: [16]})
    require_columns(history, [Column.trial_id, Column.batch_size], where="here")  # present: nothing
    with pytest.raises(MissingColumnError) as e:
        require_columns(history, [Column.trial_id, Column.samples_seen], where="trial_table")
    assert str(e.value) == "trial_table: the history has no column 'samples_seen' (TrialReport.samples_seen)"
    assert isinstance(e.value, KeyError) and e.value.missing == [Column.samples_seen]
    with pytest.raises(MissingColumnError, match=r"no columns 'accuracy' \(an evaluation metric\), 'bleu_x'$"):
        require_columns(history, ["accuracy", "bleu_x"], where="x")
    with pytest.raises(MissingColumnError, match=r"no column 'failed' \(added when the history is read\)"):
        require_columns({"trial_id": "a"}, [Column.failed], where="a row")  # a row: a dict or a Series


def _literals(node) -> list[ast.Constant]:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [e for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return [node] if isinstance(node, ast.Constant) and isinstance(node.value, str) else []


def _column_literals(tree: ast.AST):
    """The string literals in a place that picks a column: a subscript, ``"x" in frame``, a dict key, the
    first argument or a column keyword of a pandas/dict method, an element of a ``*_COLUMNS`` list."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            yield from _literals(node.slice)
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            yield from _literals(node.left)
        elif isinstance(node, ast.Dict):
            yield from (c for key in node.keys if key is not None for c in _literals(key))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PICKING_METHODS:
            yield from (c for a in node.args[:1] for c in _literals(a))
            yield from (c for kw in node.keywords if kw.arg in PICKING_KEYWORDS for c in _literals(kw.value))
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id.endswith("COLUMNS")
                                                  for t in node.targets):
            yield from _literals(node.value)


def _key(path: Path) -> str:
    """A reader's name in NOT_COLUMNS: its file name, with its method's folder for a method's module."""
    return f"{path.parent.name}/{path.name}" if path.parent.parent.name == "methods" else path.name


@pytest.mark.parametrize("path", READERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_readers_name_columns_through_column_only(path):
    """Every ``Column.x`` a reader uses is a TrialReport field or a documented column (so a typo in a branch
    no test runs fails here), and no reader spells a column's name as a literal where it picks a column."""
    tree = ast.parse(path.read_text())
    used = {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Column"}
    assert used <= ALL_COLUMNS, f"{path.name}: not columns: {sorted(used - ALL_COLUMNS)}"
    spelt = sorted({(c.lineno, c.value) for c in _column_literals(tree)
                    if c.value in ALL_COLUMNS and (_key(path), c.value) not in NOT_COLUMNS})
    assert not spelt, f"{path.name}: column names as literals (use Column): {spelt}"


def test_the_readers_use_columns_at_all():  # the scan above looks at the right files
    assert {p.name for p in READERS} >= {"tables.py", "critical_batch.py", "reading_points.py", "plots.py", "headline.py"}
    assert "Column." in (PACKAGE / "analysis" / "tables.py").read_text()
