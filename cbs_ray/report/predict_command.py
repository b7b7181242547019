"""``cbs-ray predict RUNGS.csv --budget-samples D [--json]`` (or ``--budget-tokens T --tokens-per-sample S``): the
ladder's predictor (``maths.prediction``) on measurements a user already has, without training.

RUNGS.csv is one of two forms (a header row, one of these column sets exactly; a UTF-8 byte-order mark is allowed):

* ``samples,batch_size,steps``: at each rung (``samples``, the data seen by the reference run), the optimizer steps
  each batch size needed to reach that rung's target loss; B_crit at the rung is read as the ladder reads it,
  S(B) = S_min + E_min/B (McCandlish et al. 2018; ``maths.tradeoff.fit_tradeoff``, its bootstrap 95 % interval drawn
  for all rungs at once by ``maths.tradeoff.bootstrap_b_crit_intervals``), at least 3 batch sizes a rung; the batch
  grid is the smallest and the largest batch in the file;
* ``samples,b_crit,b_crit_low,b_crit_high``: B_crit at each rung with a 95 % interval (the ends may be empty: the
  rung's noise is then read from the rungs' scatter); ``--batch-grid SMALLEST LARGEST`` names the grid they were read
  on, if known.

Rungs whose B_crit lies outside the batch grid, or before twice ``--warmup-samples`` (the warm-up transient), are shown
and left out. Prints the prediction, its 90 % interval, its source (rungs | prior | combined), the exponent, the
literature band and any warning; ``--json``: an object with ``b_crit``, ``interval_90``, ``source``, ``exponent``,
``literature_band``, ``warnings``, ``left_out`` and the rest of ``maths.prediction.Prediction``. Only a regular file
of at most ``MAX_BYTES`` is read (never a FIFO or a device). A bad CSV or argument: one line and exit 2; no rung to
anchor at, or an answer out of the floats' range (a refusal): its reason and exit 1.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from pathlib import Path

from cbs_ray.records.bounded_file import read_regular_file
from cbs_ray.records.columns import Column
from cbs_ray.spec.command_line import OneLineParser

__all__ = ["STEPS_COLUMNS", "B_CRIT_COLUMNS", "BadRungs", "budget_from_arguments", "predict_main", "read_rungs"]

STEPS_COLUMNS = ("samples", Column.batch_size, Column.steps)
B_CRIT_COLUMNS = ("samples", "b_crit", "b_crit_low", "b_crit_high")
MAX_ROWS = 100_000
MAX_BYTES = 32 * 1024 * 1024  # 100 000 rows of three long numbers fit many times over
SHOWN = 20  # notes and rungs left out printed one a line; --json holds them all


class BadRungs(ValueError):
    """A RUNGS.csv that cannot be read: its message is the one line printed."""


def _optional(text: str, column: str, line: int) -> float | None:
    """An empty cell is None; else as ``_number``."""
    return None if (text or "").strip() == "" else _number(text, column, line)


def _number(text: str, column: str, line: int) -> float:
    text = (text or "").strip()
    try:
        value = float(text)
    except ValueError:
        raise BadRungs(f"line {line}: {column} {text[:40]!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise BadRungs(f"line {line}: {column} must be a finite positive number, got {text[:40]!r}")
    return value


def _text(path: Path) -> str:
    """The file's text: a regular file of at most ``MAX_BYTES``, UTF-8 with or without a byte-order mark."""
    try:
        data = read_regular_file(path, MAX_BYTES, what="a rungs CSV")
    except FileNotFoundError:
        raise BadRungs(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadRungs(f"{path}: is a folder, not a CSV file") from None
    except OSError as e:
        raise BadRungs(f"{path}: cannot be read ({e.strerror or e})") from None
    except ValueError as e:
        if path.is_dir():
            raise BadRungs(f"{path}: is a folder, not a CSV file") from None
        raise BadRungs(f"{path}: {e} (a rungs CSV is a regular file)") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise BadRungs(f"{path}: not a UTF-8 text file") from None


def _rows(path: Path) -> tuple[tuple, list[tuple[int, dict]]]:
    try:
        reader = csv.DictReader(io.StringIO(_text(path), newline=""))
        header = tuple((c or "").strip() for c in (reader.fieldnames or ()))
        rows: list[tuple[int, dict]] = []
        for line, row in enumerate(reader, start=2):
            if None in row:
                raise BadRungs(f"line {line}: more values than the header's {len(header)} columns")
            if len(rows) >= MAX_ROWS:
                raise BadRungs(f"more than {MAX_ROWS} rows")
            rows.append((line, {k.strip(): v for k, v in row.items() if k is not None}))
    except csv.Error as e:
        raise BadRungs(f"{path}: not a readable CSV ({e})") from None
    return header, rows


def read_rungs(path: Path, *, bootstrap: int = 1000) -> tuple[list, list[str], tuple[float, float] | None]:
    """(``maths.prediction.RungPoint`` list, notes on rungs that could not be read, the batch grid the steps form
    names: its smallest and largest batch, else None) from RUNGS.csv; ``BadRungs``."""
    from cbs_ray.maths.prediction import RungPoint

    header, rows = _rows(path)
    if not header:
        raise BadRungs(f"{path}: empty (a header row {','.join(STEPS_COLUMNS)} or {','.join(B_CRIT_COLUMNS)} first)")
    if set(header) not in (set(STEPS_COLUMNS), set(B_CRIT_COLUMNS)) or len(header) != len(set(header)):
        shown = [c[:40] for c in header[:8]]  # repr: a stray byte or space shows
        raise BadRungs(f"{path}: columns {shown!r}; expected {list(STEPS_COLUMNS)!r} or {list(B_CRIT_COLUMNS)!r}")
    if not rows:
        raise BadRungs(f"{path}: a header and no rows")
    if set(header) == set(B_CRIT_COLUMNS):
        rungs, seen = [], set()
        for line, row in rows:
            d, b = _number(row["samples"], "samples", line), _number(row["b_crit"], "b_crit", line)
            lo = _optional(row["b_crit_low"], "b_crit_low", line)
            hi = _optional(row["b_crit_high"], "b_crit_high", line)
            if d in seen:
                raise BadRungs(f"line {line}: samples {d:g} appears twice")
            if lo is not None and hi is not None and not lo <= b <= hi:
                raise BadRungs(f"line {line}: b_crit {b:g} lies outside [b_crit_low, b_crit_high] = [{lo:g}, {hi:g}]")
            seen.add(d)
            rungs.append(RungPoint.from_interval(d, b, lo, hi))
        return rungs, [], None
    return _rungs_from_steps(rows, bootstrap)


def _rungs_from_steps(rows: list, bootstrap: int) -> tuple[list, list[str], tuple[float, float]]:
    """The rungs of the steps form: B_crit at each with its interval (``maths.tradeoff.fit_tradeoffs``: all rungs at
    once, linear in the rows), or why none."""
    from cbs_ray.maths.prediction import RungPoint
    from cbs_ray.maths.tradeoff import fit_tradeoffs

    by_rung: dict = {}
    for line, row in rows:
        d, b = _number(row["samples"], "samples", line), _number(row[Column.batch_size], Column.batch_size, line)
        steps = _number(row[Column.steps], Column.steps, line)
        if b != int(b):
            raise BadRungs(f"line {line}: batch_size {b:g} is not a whole number")
        if int(b) in by_rung.setdefault(d, {}):
            raise BadRungs(f"line {line}: samples {d:g}, batch_size {int(b)} appears twice")
        by_rung[d][int(b)] = steps
    ordered = sorted(by_rung.items())
    fits = fit_tradeoffs([(sorted(steps), [steps[b] for b in sorted(steps)]) for _, steps in ordered],
                         bootstrap=bootstrap, seed=0)
    rungs, notes = [], []
    for (d, _), fit in zip(ordered, fits):
        if fit.b_crit is None or not math.isfinite(fit.b_crit) or fit.b_crit <= 0:
            notes.append(f"rung at {d:g} samples: no B_crit ({fit.reason})")
            continue
        rungs.append(RungPoint.from_interval(d, fit.b_crit, *(fit.ci or (None, None))))
    grid = (float(min(b for _, s in by_rung.items() for b in s)), float(max(b for _, s in by_rung.items() for b in s)))
    return rungs, notes, grid


def _lines(prediction, notes: list[str], rungs: list) -> list[str]:
    from cbs_ray.maths.ladder import recommend_batch

    p = prediction
    prior = p.prior
    lines = [f"rungs: {len(rungs)} read, {p.rungs_used} in use" + (f"; {len(notes)} without a B_crit" if notes else ""),
             *notes[:SHOWN], *(f"  left out: rung at {r.samples:g} samples (B_crit {r.b_crit:.3g}): {r.reason}"
                               for r in p.left_out[:SHOWN])]
    hidden = max(len(notes) - SHOWN, 0) + max(len(p.left_out) - SHOWN, 0)
    if hidden:
        lines.append(f"  … and {hidden} more (--json lists them all)")
    warnings = [f"warning: {w}" for w in p.warnings]
    if p.b_crit is None:
        return [*lines, *warnings, f"prediction: none — {p.refusal}"]
    lo, hi = p.interval_90
    band_lo, band_hi = p.literature_band
    low_g, high_g = _band_exponents(prior.definition)
    rungs_part = (f"the rungs' {p.rungs_exponent:.3g} ± {p.rungs_exponent_se:.2g}, "
                  if p.rungs_exponent is not None else "no fit from the rungs (fewer than 3 in use), ")
    return [*lines,
            f"B_crit at {p.budget_samples:g} samples: {p.b_crit:.4g} (90 % [{lo:.4g}, {hi:.4g}]); source: {p.source}",
            f"literature band: [{band_lo:.4g}, {band_hi:.4g}] (the same anchor carried with {low_g:.3g} … "
            f"{high_g:.3g}, the literature's exponents for the {prior.definition} definition)",
            f"exponent: {p.exponent:.3g} ± {p.exponent_sd:.2g}, from {rungs_part}and the prior {prior.mean:.3g} ± "
            f"{prior.sd:.2g} for the {prior.definition} definition (rungs' share {p.rung_share:.0%})",
            f"anchored at the rungs' centroid: {p.anchor_samples:.4g} samples, B_crit {p.anchor_b_crit:.4g}; "
            f"recommended batch {recommend_batch(lo)} (the largest power of two at or below the interval's lower end)",
            *warnings]


def _band_exponents(definition: str) -> tuple[float, float]:
    from cbs_ray.maths.prediction import literature_range

    return literature_range(definition)


def budget_from_arguments(budget_samples: float | None, budget_tokens: float | None,
                          tokens_per_sample: float | None) -> float:
    """The budget in samples from ``--budget-samples D``, or ``--budget-tokens T --tokens-per-sample S`` (T / S);
    ``BadRungs`` (its one line) where neither form, both, or half the tokens form is given, or a value is not a finite
    positive number."""
    tokens = budget_tokens is not None or tokens_per_sample is not None
    if budget_samples is not None and tokens:
        raise BadRungs("give the budget once: --budget-samples D, or --budget-tokens T with --tokens-per-sample S")
    if budget_samples is None and not tokens:
        raise BadRungs("the budget is required: --budget-samples D, or --budget-tokens T with --tokens-per-sample S")
    if tokens and (budget_tokens is None or tokens_per_sample is None):
        given, missing = (("--budget-tokens", "--tokens-per-sample") if tokens_per_sample is None
                          else ("--tokens-per-sample", "--budget-tokens"))
        raise BadRungs(f"{given} needs {missing} too (the budget in samples is T / S)")
    for name, value in (("--budget-samples", budget_samples), ("--budget-tokens", budget_tokens),
                        ("--tokens-per-sample", tokens_per_sample)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise BadRungs(f"{name} must be a finite positive number, got {value:g}")
    if budget_samples is not None:
        return budget_samples
    assert budget_tokens is not None and tokens_per_sample is not None
    samples = budget_tokens / tokens_per_sample
    if not (math.isfinite(samples) and samples > 0):
        raise BadRungs(f"--budget-tokens / --tokens-per-sample is not a finite positive number of samples "
                       f"({budget_tokens:g} / {tokens_per_sample:g})")
    return samples


def predict_main(argv: list[str] | None = None, prog: str = "cbs-ray predict") -> int:
    parser = OneLineParser(prog=prog, description="Predict B_crit at a budget from rungs you measured: cbs-ray "
                                                  "predict RUNGS.csv --budget-samples D [--json], or --budget-tokens "
                                                  "T --tokens-per-sample S in place of --budget-samples")
    parser.add_argument("rungs", help=f"CSV with columns {','.join(STEPS_COLUMNS)} or {','.join(B_CRIT_COLUMNS)}")
    parser.add_argument("--budget-samples", type=float, help="the full run's samples D")
    parser.add_argument("--budget-tokens", type=float, help="the full run's tokens T (with --tokens-per-sample S: "
                                                            "D = T / S samples)")
    parser.add_argument("--tokens-per-sample", type=float, help="tokens in a sample S (with --budget-tokens)")
    parser.add_argument("--batch-grid", type=float, nargs=2, metavar=("SMALLEST", "LARGEST"),
                        help="the smallest and the largest batch the rungs were read on: a B_crit outside is left out "
                             "(default: the steps form's own batches; none for the b_crit form)")
    parser.add_argument("--warmup-samples", type=float, default=0.0,
                        help="the warmup's samples: rungs before twice it (the warm-up transient) are left out "
                             "(default 0)")
    parser.add_argument("--definition", default="mccandlish", choices=("mccandlish", "overhead_20pct", "b_opt"),
                        help="the critical batch's definition the rungs measure: the prior, the literature band and "
                             "the borrowed exponents are that definition's (default mccandlish: E_min/S_min, as the "
                             "ladder reads it)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    try:
        budget = budget_from_arguments(args.budget_samples, args.budget_tokens, args.tokens_per_sample)
        if not (math.isfinite(args.warmup_samples) and args.warmup_samples >= 0):
            raise BadRungs(f"--warmup-samples must be a finite number ≥ 0, got {args.warmup_samples:g}")
        if args.batch_grid and not (all(math.isfinite(v) and v > 0 for v in args.batch_grid)
                                    and args.batch_grid[0] <= args.batch_grid[1]):
            raise BadRungs(f"--batch-grid must be two finite positive numbers, the smaller first, got "
                           f"{args.batch_grid[0]:g} {args.batch_grid[1]:g}")
        rungs, notes, grid = read_rungs(Path(args.rungs))
    except BadRungs as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from cbs_ray.maths.prediction import predict_b_crit

    prediction = predict_b_crit(rungs, budget, definition=args.definition,
                                batch_grid=tuple(args.batch_grid) if args.batch_grid else grid,
                                rungs_from=2 * args.warmup_samples)
    if args.json:
        print(json.dumps({**prediction.to_dict(), "notes": notes}, allow_nan=False))
    else:
        print("\n".join(_lines(prediction, notes, rungs)))
    return 0 if prediction.b_crit is not None else 1
