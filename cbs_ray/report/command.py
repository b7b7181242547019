"""The report command line: ``cbs-ray report`` and ``python -m cbs_ray.report EXPERIMENT_DIR [--output DIR]
[--tolerance 0.01] [--target VALUE] [--turning-point monotone|raw]``. It parses, calls
``report.methods.report_experiment`` and turns a bad input into one line and exit code 2 (1 for a failure nobody
foresaw). Ray is never started: the report reads what Tune stored."""

from __future__ import annotations

import math
import os
import sys

from cbs_ray.records.columns import MissingColumnError
from cbs_ray.records.storage import META_FILE, ReportError
from cbs_ray.spec.command_line import OneLineParser, check_output_arg, unforeseen_error
from cbs_ray.spec.errors import SpecError

__all__ = ["REPORT_DESCRIPTION", "report_main"]

REPORT_DESCRIPTION = ("The report: cbs-ray report EXPERIMENT_DIR [--output DIR] [--tolerance 0.01] "
                      "[--target VALUE]")


def report_main(argv: list[str] | None = None, prog: str = "python -m cbs_ray.report") -> int:
    parser = OneLineParser(prog=prog, description=REPORT_DESCRIPTION)
    parser.add_argument("experiment_dir", help="the Tune experiment directory a search wrote")
    parser.add_argument("--output", help="where to write the report (default: ./cbs_results/<name>, "
                                         "<name>-branch or <name>-ladder for those methods)")
    parser.add_argument("--tolerance", type=float, help="turning-point tolerance, in the experiment's unit (nats for a "
                        "loss metric, else relative; default from the spec)")
    parser.add_argument("--target", type=float, help="target metric for the tradeoff and the 20%% rule")
    parser.add_argument("--turning-point", choices=["monotone", "raw"],
                        help="read the turning point off the monotone fit or the raw bests (default from the spec)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    try:
        check_output_arg(args.output)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.tolerance is not None and not 0 <= args.tolerance < 1:
        print(f"error: --tolerance: must be in [0, 1), got {args.tolerance}", file=sys.stderr)
        return 2
    if args.target is not None and not math.isfinite(args.target):
        print(f"error: --target: must be a finite number, got {args.target}", file=sys.stderr)
        return 2
    # pandas and matplotlib (seconds): a usage error above answers before them
    from cbs_ray.report.methods import report_experiment

    try:
        report_experiment(args.experiment_dir, output_dir=args.output, tolerance=args.tolerance,
                          target=args.target, turning_fit=args.turning_point)
    except (ReportError, MissingColumnError, SpecError) as e:  # a history without a column the report needs names it
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (KeyError, TypeError, ValueError, RecursionError) as e:  # metadata of the wrong shape (ladder_batches: lots)
        if os.environ.get("CBS_RAY_DEBUG"):
            raise
        said = str(e).splitlines()[0] if str(e) else ""
        print(f"error: {args.experiment_dir}: cannot be reported: {type(e).__name__}: {said[:200]} (its "
              f"{META_FILE} or results are not what cbs-ray writes; CBS_RAY_DEBUG=1 for the traceback)",
              file=sys.stderr)
        return 2
    except Exception as e:
        return unforeseen_error(e)
    return 0
