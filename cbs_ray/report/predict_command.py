"""``cbs-ray predict RUNGS.csv --budget-samples D [--json]``: the ladder's predictor (``maths.prediction``) on
measurements a user already has, without training.

RUNGS.csv is one of two forms (a header row, one of these column sets exactly):

* ``samples,batch_size,steps``: at each rung (``samples``, the data seen by the reference run), the optimizer steps
  each batch size needed to reach that rung's target loss; B_crit at the rung is read as the ladder reads it,
  S(B) = S_min + E_min/B (McCandlish et al. 2018; ``maths.tradeoff.fit_tradeoff``, with its bootstrap 95 % interval),
  at least 3 batch sizes a rung;
* ``samples,b_crit,b_crit_low,b_crit_high``: B_crit at each rung with a 95 % interval (the ends may be empty: the
  rung's noise is then read from the rungs' scatter).

Prints the prediction, its 90 % interval, its source (rungs | prior | combined) and the exponent; ``--json``: an
object with ``b_crit``, ``interval_90``, ``source``, ``exponent`` and the rest of ``maths.prediction.Prediction``. A bad
CSV or argument: one line and exit 2; no rung to anchor at (a refusal): its reason and exit 1.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

from cbs_ray.records.columns import Column
from cbs_ray.spec.command_line import OneLineParser

__all__ = ["STEPS_COLUMNS", "B_CRIT_COLUMNS", "BadRungs", "predict_main", "read_rungs"]

STEPS_COLUMNS = ("samples", Column.batch_size, Column.steps)
B_CRIT_COLUMNS = ("samples", "b_crit", "b_crit_low", "b_crit_high")
MAX_ROWS = 100_000


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


def _rows(path: Path) -> tuple[tuple, list[tuple[int, dict]]]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = tuple((c or "").strip() for c in (reader.fieldnames or ()))
            rows: list[tuple[int, dict]] = []
            for line, row in enumerate(reader, start=2):
                if None in row:
                    raise BadRungs(f"line {line}: more values than the header's {len(header)} columns")
                if len(rows) >= MAX_ROWS:
                    raise BadRungs(f"more than {MAX_ROWS} rows")
                rows.append((line, {k.strip(): v for k, v in row.items() if k is not None}))
    except FileNotFoundError:
        raise BadRungs(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadRungs(f"{path}: is a folder, not a CSV file") from None
    except UnicodeDecodeError:
        raise BadRungs(f"{path}: not a UTF-8 text file") from None
    except csv.Error as e:
        raise BadRungs(f"{path}: not a readable CSV ({e})") from None
    except OSError as e:
        raise BadRungs(f"{path}: cannot be read ({e.strerror or e})") from None
    return header, rows


def read_rungs(path: Path, *, bootstrap: int = 1000) -> tuple[list, list[str]]:
    """(``maths.prediction.RungPoint`` list, notes on rungs that could not be read) from RUNGS.csv; ``BadRungs``."""
    from cbs_ray.maths.prediction import RungPoint

    header, rows = _rows(path)
    if not header:
        raise BadRungs(f"{path}: empty (a header row {','.join(STEPS_COLUMNS)} or {','.join(B_CRIT_COLUMNS)} first)")
    if set(header) not in (set(STEPS_COLUMNS), set(B_CRIT_COLUMNS)) or len(header) != len(set(header)):
        raise BadRungs(f"{path}: columns {','.join(header)[:120]}; expected {','.join(STEPS_COLUMNS)} or "
                       f"{','.join(B_CRIT_COLUMNS)}")
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
        return rungs, []
    return _rungs_from_steps(rows, bootstrap)


def _rungs_from_steps(rows: list, bootstrap: int) -> tuple[list, list[str]]:
    from cbs_ray.maths.prediction import RungPoint
    from cbs_ray.maths.tradeoff import fit_tradeoff

    by_rung: dict = {}
    for line, row in rows:
        d, b = _number(row["samples"], "samples", line), _number(row[Column.batch_size], Column.batch_size, line)
        steps = _number(row[Column.steps], Column.steps, line)
        if b != int(b):
            raise BadRungs(f"line {line}: batch_size {b:g} is not a whole number")
        if int(b) in by_rung.setdefault(d, {}):
            raise BadRungs(f"line {line}: samples {d:g}, batch_size {int(b)} appears twice")
        by_rung[d][int(b)] = steps
    rungs, notes = [], []
    for d, steps in sorted(by_rung.items()):
        batches = sorted(steps)
        fit = fit_tradeoff(batches, [steps[b] for b in batches], bootstrap=bootstrap, seed=0)
        if fit.b_crit is None or not math.isfinite(fit.b_crit) or fit.b_crit <= 0:
            notes.append(f"rung at {d:g} samples: no B_crit ({fit.reason})")
            continue
        lo, hi = fit.ci if fit.ci else (None, None)
        rungs.append(RungPoint.from_interval(d, fit.b_crit, lo, hi))
    return rungs, notes


def _lines(prediction, notes: list[str], rungs: list) -> list[str]:
    from cbs_ray.maths.ladder import recommend_batch

    p = prediction
    prior = p.prior
    lines = [f"rungs: {len(rungs)} read" + (f"; {len(notes)} without a B_crit" if notes else ""), *notes]
    if p.b_crit is None:
        return [*lines, f"prediction: none — {p.refusal}"]
    lo, hi = p.interval_90
    rungs_part = (f"the rungs' {p.rungs_exponent:.3g} ± {p.rungs_exponent_se:.2g} ({p.form}), "
                  if p.rungs_exponent is not None else "no fit from the rungs (fewer than 3), ")
    return [*lines,
            f"B_crit at {p.budget_samples:g} samples: {p.b_crit:.4g} (90 % [{lo:.4g}, {hi:.4g}]); source: {p.source}",
            f"exponent: {p.exponent:.3g} ± {p.exponent_sd:.2g}, from {rungs_part}and the prior {prior.mean:.3g} ± "
            f"{prior.sd:.2g} for the {prior.definition} definition (rungs' share {p.rung_share:.0%})",
            f"anchored at the rung at {p.anchor_samples:g} samples (B_crit {p.anchor_b_crit:.4g}); recommended batch "
            f"{recommend_batch(lo)} (the largest power of two at or below the interval's lower end)"]


def predict_main(argv: list[str] | None = None, prog: str = "cbs-ray predict") -> int:
    parser = OneLineParser(prog=prog, description="Predict B_crit at a budget from rungs you measured: cbs-ray "
                                                  "predict RUNGS.csv --budget-samples D [--json]")
    parser.add_argument("rungs", help=f"CSV with columns {','.join(STEPS_COLUMNS)} or {','.join(B_CRIT_COLUMNS)}")
    parser.add_argument("--budget-samples", required=True, type=float, help="the full run's samples D")
    parser.add_argument("--definition", default="mccandlish", choices=("mccandlish", "overhead_20pct", "b_opt"),
                        help="the critical batch's definition the rungs measure: the prior and the borrowed exponents "
                             "are that definition's (default mccandlish: E_min/S_min, as the ladder reads it)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    if not (math.isfinite(args.budget_samples) and args.budget_samples > 0):
        print(f"error: --budget-samples must be a finite positive number, got {args.budget_samples:g}", file=sys.stderr)
        return 2
    try:
        rungs, notes = read_rungs(Path(args.rungs))
    except BadRungs as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from cbs_ray.maths.prediction import predict_b_crit

    prediction = predict_b_crit(rungs, args.budget_samples, definition=args.definition)
    if args.json:
        print(json.dumps({**prediction.to_dict(), "notes": notes}, allow_nan=False, default=float))
    else:
        print("\n".join(_lines(prediction, notes, rungs)))
    return 0 if prediction.b_crit is not None else 1
