"""The columns of a trial's history, named once: ``Column.samples_seen`` is ``"samples_seen"``.

A history is what the analysis reads (one row per report of every trial, Tune's ``result.json`` rows read
back by ``records.storage.load_history``), and its tables are what the summary writes. Their columns are

- ``REPORTED``: ``TrialReport``'s fields, one column each (its ``evaluation`` dict is spread into its metrics);
- ``EVALUATION``: the metrics the built-in evaluation reports (a user's ``compute_metrics`` may add others;
  with ``data.holdout_examples`` the dev set's again at the full budget, prefixed ``DEV_PREFIX``);
- ``ADDED``: what reading the history adds (Tune's trial ID, the failed flag, the repeats' flag);
- ``DERIVED``: what the analysis tables compute (``analysis.tables``, ``methods.scratch.batch_table``,
  ``methods.scratch.reading``), summary.json's keys for them.

``Column`` has one attribute per name, the name itself as a plain string (so a ``Column`` name is a column
label, a dict key and a JSON key as the literal was), and this module checks at import that its attributes
are exactly ``TrialReport``'s fields plus the documented others: a field renamed or added in ``TrialReport``
without its ``Column`` fails here, not as a silent default in a reader. Names computed from the search's
metric (``f"best_{metric}"``, ``f"dev_{metric}"``) stay computed strings.

``require_columns`` is how a reader says which columns it cannot do without: a history lacking one is a
``MissingColumnError`` naming it, where a bare subscript would raise a ``KeyError`` deep inside pandas.
Optional columns (the noise scale's, the branch mode's, the dev set's: only some trials report them) are
read behind ``Column.x in history`` guards, named the same way.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import fields

from cbs_ray.records.trial_report import TrialReport

__all__ = ["ADDED", "ALL_COLUMNS", "DERIVED", "DEV_PREFIX", "EVALUATION", "OPTIONAL", "REPORTED", "Column",
           "MissingColumnError", "column_problems", "require_columns"]

DEV_PREFIX = "dev_"
"""The dev set's metrics, at the full budget with ``data.holdout_examples``: ``dev_accuracy``, ``dev_eval_loss``."""


class Column:
    """Every column name of the history and of the analysis tables, one attribute each, its value its name.
    In ``per_batch`` (the per-batch table) ``diverged`` and ``failed`` are counts of trials under the same
    names as the history's flags."""

    # ---- TrialReport's fields, in its order ----
    grad_sq = "grad_sq"
    trace_sigma = "trace_sigma"
    b_simple = "b_simple"
    b_small = "b_small"
    noise_scale_note = "noise_scale_note"
    samples_seen = "samples_seen"
    steps = "steps"
    batch_size = "batch_size"
    alpha = "alpha"
    warmup_fraction = "warmup_fraction"
    warmup_steps = "warmup_steps"
    peak_lr = "peak_lr"
    lr = "lr"
    train_loss = "train_loss"
    grad_norm = "grad_norm"
    samples_per_s = "samples_per_s"
    train_time_s = "train_time_s"
    wall_time_s = "wall_time_s"
    micro_batch = "micro_batch"
    accumulation = "accumulation"
    workers = "workers"
    first_step_at = "first_step_at"
    trial_started_at = "trial_started_at"
    reported_at = "reported_at"
    diverged = "diverged"
    resumed_from_samples = "resumed_from_samples"
    node_id = "node_id"
    role = "role"
    start_samples = "start_samples"
    seed_offset = "seed_offset"
    control = "control"
    train_loss_ema = "train_loss_ema"
    tokens_seen = "tokens_seen"

    # ---- the built-in evaluation's metrics (TrialReport.evaluation's keys) ----
    eval_loss = "eval_loss"
    perplexity = "perplexity"
    accuracy = "accuracy"
    bleu = "bleu"
    excess_loss = "excess_loss"
    ewa_eval_loss = "ewa_eval_loss"
    ewa_excess_loss = "ewa_excess_loss"
    eval_examples = "eval_examples"

    # ---- added when the history is read ----
    trial_id = "trial_id"
    failed = "failed"
    repeat = "repeat"

    # ---- computed by the analysis tables ----
    status = "status"
    restarts = "restarts"
    steps_to_target = "steps_to_target"
    target_at_first_report = "target_at_first_report"
    samples_to_target = "samples_to_target"
    projected_time_s = "projected_time_s"
    b_simple_early = "b_simple_early"
    b_simple_mean = "b_simple_mean"
    trials = "trials"
    completed = "completed"
    stopped = "stopped"
    diverged_peak_lrs = "diverged_peak_lrs"
    runs = "runs"


REPORTED: tuple[str, ...] = tuple(f.name for f in fields(TrialReport) if f.name != "evaluation")
"""``TrialReport``'s fields as columns; the optional ones (None, left out of a report) are ``OPTIONAL``."""

OPTIONAL: tuple[str, ...] = tuple(f.name for f in fields(TrialReport) if f.name in REPORTED and f.default is None)
"""The fields a report may leave out (a diverged trial's noise, throughput, clocks; branch mode's on a
from-scratch trial): a reader guards them."""

EVALUATION: dict[str, str] = {
    Column.eval_loss: "the evaluation set's mean loss (every task)",
    Column.perplexity: "exp(eval_loss), language models",
    Column.accuracy: "classification",
    Column.bleu: "translation (seq2seq)",
    Column.excess_loss: "the built-in markov language: eval_loss's cross-entropy over the language's own entropy "
                        "(an exact KL, nats)",
    Column.ewa_eval_loss: "a ladder run with ladder.reading ewa: eval_loss of the average of its iterates "
                          "(train.averaging)",
    Column.ewa_excess_loss: "the same for excess_loss",
    Column.eval_examples: "how many examples the evaluation counted (an accuracy's standard error)",
}
"""The metrics the built-in evaluation (``sources.builtin.evaluate``) reports, and what they are."""

ADDED: dict[str, str] = {
    Column.trial_id: "Tune's ID of the trial (result.json); one run of branch mode",
    Column.failed: "records.storage.load_history: the trial ended in ERROR (its workers died too often)",
    Column.repeat: "methods.scratch.report.analyze: the row is from the repeats experiment (search.repeats)",
}
"""The columns reading a history adds to the reports, and who adds them."""

DERIVED: dict[str, str] = {
    Column.status: "trial_table: completed, diverged, failed or stopped",
    Column.restarts: "trial_table: continuations from a new checkpoint (tables.restarts)",
    Column.steps_to_target: "per trial, then the fewest per batch size: optimizer steps to the target",
    Column.target_at_first_report: "the target was reached by the first report (the steps an upper bound)",
    Column.samples_to_target: "per_batch_table: steps_to_target × the batch size",
    Column.projected_time_s: "summary: the budget ÷ samples_per_s",
    Column.b_simple_early: "B_simple from each trial's first finite report (noise_scale_table)",
    Column.b_simple_mean: "B_simple over training, ratio of the means (noise_scale_table)",
    Column.trials: "per_batch_table: configurations tried at the batch size",
    Column.completed: "per_batch_table: of them, reached the budget",
    Column.stopped: "per_batch_table: of them, stopped before the budget",
    Column.diverged_peak_lrs: "per_batch_table: the diverged trials' peak LRs, lowest first",
    Column.runs: "per_batch_table: runs of the best configuration (the trial and its completed repeats)",
}
"""The columns the analysis tables compute (summary.json's keys for them), and how."""

ALL_COLUMNS: frozenset[str] = frozenset(REPORTED) | frozenset(EVALUATION) | frozenset(ADDED) | frozenset(DERIVED)


def column_problems(columns: type = Column, report: type = TrialReport) -> list[str]:
    """What is wrong with ``columns``' attributes against ``report``'s fields (nothing: []): an attribute that is
    not its own name, a field without a column, a column that is neither a field nor documented here."""
    names = {k: v for k, v in vars(columns).items() if not k.startswith("_")}
    reported = [f.name for f in fields(report) if f.name != "evaluation"]
    documented = set(reported) | set(EVALUATION) | set(ADDED) | set(DERIVED)
    problems = [f"{columns.__name__}.{k} is {v!r}, not its own name" for k, v in names.items() if v != k]
    problems += [f"{report.__name__}.{name} has no {columns.__name__}" for name in reported if name not in names]
    problems += [f"{columns.__name__}.{name} is neither a {report.__name__} field nor a documented column"
                 for name in names if name not in documented]
    groups = (reported, EVALUATION, ADDED, DERIVED)
    problems += [f"{name!r} is documented twice" for name in sorted(documented)
                 if sum(name in g for g in groups) > 1]
    return problems


def _check_columns() -> None:
    """Run at import: a ``TrialReport`` field renamed or added without its ``Column`` fails here."""
    problems = column_problems()
    if problems:
        raise TypeError("records.columns: " + "; ".join(problems))


_check_columns()


class MissingColumnError(KeyError):
    """A history lacks a column a reader cannot do without; the message names the reader and the columns.
    A ``KeyError``, as pandas' own for a missing column, with a readable message."""

    def __init__(self, where: str, missing: list[str]):
        super().__init__(where, missing)
        self.where, self.missing = where, list(missing)

    def __str__(self) -> str:
        names = ", ".join(f"{name!r}{_kind(name)}" for name in self.missing)
        return f"{self.where}: the history has no column {names}" if len(self.missing) == 1 else \
            f"{self.where}: the history has no columns {names}"


def _kind(name: str) -> str:
    if name in REPORTED:
        return f" (TrialReport.{name})"
    if name in EVALUATION:
        return " (an evaluation metric)"
    if name in ADDED:
        return " (added when the history is read)"
    return ""


def require_columns(history: Container[str], columns: Iterable[str], *, where: str) -> None:
    """Raise ``MissingColumnError`` naming every one of ``columns`` that ``history`` (a DataFrame, a row,
    anything ``in`` asks) lacks; ``where`` names the reader."""
    missing = [c for c in dict.fromkeys(columns) if c not in history]
    if missing:
        raise MissingColumnError(where, missing)
