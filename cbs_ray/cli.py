"""The command lines: ``cbs-ray search`` (also ``python -m cbs_ray.search``: run or resume a search),
``cbs-ray report`` (also ``python -m cbs_ray.report``: rebuild a report from an experiment directory) and
``cbs-ray schema`` (the spec's JSON Schema). They parse, call the Python API, and turn a bad input into one
line and a non-zero exit: 2 for a bad spec or argument, 1 for a run that has nothing to report, 130 for
Ctrl-C. The report command is ``report.command.report_main``, the one ``python -m cbs_ray.report`` runs; the
parsing both faces share is ``spec.command_line``'s."""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from cbs_ray.records.names import resume_command
from cbs_ray.records.storage import ReportError
from cbs_ray.report.command import report_main
from cbs_ray.spec.command_line import OneLineParser, check_output_arg, unforeseen_error
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec

__all__ = ["OneLineParser", "unforeseen_error", "main", "search_main", "report_main", "schema_main", "predict_main",
           "plan_main", "parse_search_args"]

SEARCH_DESCRIPTION = "Run a critical-batch search: cbs-ray search [--space FILE] [--set key=value ...]"


# ---- python -m cbs_ray.search ----------------------------------------------------------------------

def parse_search_args(argv: list[str] | None = None, prog: str = "python -m cbs_ray.search") -> argparse.Namespace:
    parser = OneLineParser(prog=prog, description=SEARCH_DESCRIPTION)
    parser.add_argument("--space", help="search-space YAML (default: the embedded tiny CPU default)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a spec field, e.g. --set training.budget_samples=16384")
    parser.add_argument("--output", help="directory for the report (default ./cbs_results/<name>, "
                                         "./cbs_results/<name>-branch or -ladder for those methods)")
    parser.add_argument("--address", help="Ray cluster address (e.g. auto); default: start Ray locally")
    parser.add_argument("--dry-run", action="store_true", help="validate and print the plan; start nothing")
    parser.add_argument("--estimate-time", action=argparse.BooleanOptionalAction, default=None,
                        help="with --dry-run (on by default): time a few training steps of the model at each "
                             "micro-batch here and estimate the search's wall time (under a second on the tiny "
                             "spaces); --no-estimate-time leaves it out")
    parser.add_argument("--resume", metavar="EXPERIMENT_DIR",
                        help="continue a killed search from its experiment directory (printed when it started); "
                             "the spec is the experiment's own")
    parser.add_argument("--probe", action="store_true",
                        help="one short run at a single batch size: print the gradient noise scale B_simple "
                             "and a batch-size grid centred on it (use it with search.batch_sizes=auto)")
    parser.add_argument("--validate-schedule", action="store_true",
                        help="branch mode (search.method=branch): train the recommended batch-size schedule "
                             "against fixed batches (small, large, iso-steps) on branch.validation_seeds seeds and "
                             "read the fixed-batch frontier (sets branch.validate_schedule)")
    parser.add_argument("--validate-prediction", action="store_true",
                        help="the ladder (search.method=ladder): also train every batch to the full budget and "
                             "compare the predicted critical batch with the one measured there (sets ladder.validate)")
    parser.add_argument("--verbose", action="store_true",
                        help="Tune's own progress tables and every worker's log lines instead of the progress display")
    return parser.parse_args(argv)


def search_main(argv: list[str] | None = None, prog: str = "python -m cbs_ray.search") -> int:
    try:
        args = parse_search_args(argv, prog)
    except SystemExit as e:  # argparse already printed its one-line usage error
        return 2 if e.code else 0
    try:
        check_output_arg(args.output)
        if args.dry_run and args.probe:  # --dry-run ignored --probe without a word
            raise SpecError("--probe: trains one short run, and --dry-run starts nothing; drop one of them")
        if args.estimate_time and not args.dry_run:
            raise SpecError("--estimate-time: applies to --dry-run (the search itself reports its time)")
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # A search imports Ray and torch (seconds): --help, a usage error and a --dry-run's plan answer before them
    # (the API imports each method's module when it is asked for, and a --dry-run needs no Ray).
    from cbs_ray.tune import api
    from cbs_ray.tune.prepare import check_before_ray, output_dir_for

    try:
        if args.resume:
            clashes = [flag for flag, given in (("--space", args.space), ("--set", args.overrides),
                                                ("--dry-run", args.dry_run), ("--probe", args.probe),
                                                ("--validate-schedule", args.validate_schedule),
                                                ("--validate-prediction", args.validate_prediction)) if given]
            if clashes:
                raise SpecError(f"--resume: continues the experiment's own spec; drop {', '.join(clashes)}")
            api.resume_search(args.resume, address=args.address, output_dir=args.output, verbose=args.verbose)
            return 0
        spec = load_spec(args.space, args.overrides + (["branch.validate_schedule=true"]
                                                        if args.validate_schedule else [])
                         + (["ladder.validate=true"] if args.validate_prediction else []))
        if args.dry_run:  # every check the run makes before Ray, then the method's plan
            check_before_ray(spec, output_dir_for(spec, args.output), dry_run=True)
            for line in api.dry_run_lines(spec, estimate_time=args.estimate_time is not False):  # as soon as known
                print(line, flush=True)
            return 0
        if args.probe:  # the probe alone, in the driver's Ray session
            grid = api.probe_search(spec, address=args.address, verbose=args.verbose)
            print(f"use it: --set 'search.batch_sizes={grid}', or search.batch_sizes: auto in the spec")
            return 0
        api.run_search(spec, address=args.address, output_dir=args.output, verbose=args.verbose)
        return 0
    except SpecError as e:  # placement.NeverPlaced too: resources no node of the cluster can ever hold
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        from cbs_ray.tune.runner import DoesNotFit

        if isinstance(e, (DoesNotFit, ReportError)):  # ran, but nothing to report (every trial failed, say why)
            print(f"error: {e}", file=sys.stderr)
            return 1
        return unforeseen_error(e)
    except KeyboardInterrupt as e:  # runner.SearchInterrupted names its experiment; a Ctrl-C elsewhere does not
        path = getattr(e, "experiment_path", None)
        again = resume_command(path) if path else "cbs-ray search --resume EXPERIMENT_DIR"
        print(f"interrupted: finished trials and checkpoints are kept; continue with: {again}", file=sys.stderr)
        return 130


# ---- cbs-ray schema --------------------------------------------------------------------------------

def schema_main(argv: list[str] | None = None, prog: str = "cbs-ray schema") -> int:
    parser = OneLineParser(prog=prog, description="Print the search spec's JSON Schema (for editors that "
                                                  "validate YAML): cbs-ray schema > cbs-spec.schema.json")
    try:
        parser.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    from cbs_ray.spec.json_schema import spec_json_schema  # pydantic loads only for this command

    try:
        print(json.dumps(spec_json_schema(), indent=2), flush=True)
    except BrokenPipeError:  # cbs-ray schema | head: the reader had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError as e:  # cbs-ray schema > /dev/full: one line, and nothing left to flush at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"error: cannot write the schema to standard output ({e.strerror or e})", file=sys.stderr)
        return 2
    return 0


# ---- cbs-ray ---------------------------------------------------------------------------------------

def predict_main(argv: list[str] | None = None, prog: str = "cbs-ray predict") -> int:
    """``cbs-ray predict RUNGS.csv --budget-samples D``: ``report.predict_command`` (imported when asked for)."""
    from cbs_ray.report.predict_command import predict_main as predict

    return predict(argv, prog)


def plan_main(argv: list[str] | None = None, prog: str = "cbs-ray plan") -> int:
    """``cbs-ray plan --space FILE --full-budget-tokens T``: ``tune.plan`` (imported when asked for)."""
    from cbs_ray.tune.plan import plan_main as plan

    return plan(argv, prog)


COMMANDS = {"search": search_main, "report": report_main, "schema": schema_main, "predict": predict_main,
            "plan": plan_main}
"""``cbs-ray COMMAND ...``: each takes the rest of the arguments."""

USAGE = """usage: cbs-ray {search,report,schema,predict,plan} ...

  cbs-ray search [--space FILE] [--set key=value ...] [--dry-run] [--verbose] ...   run or resume a search
  cbs-ray report EXPERIMENT_DIR [--output DIR] [--target VALUE] ...                 rebuild a report
  cbs-ray schema                                                                    the spec's JSON Schema
  cbs-ray predict RUNGS.csv --budget-samples D [--json]                             B_crit at D from your rungs
  cbs-ray plan --space FILE --full-budget-tokens T [--dry-run]                      one decision for the full run

cbs-ray COMMAND --help says more; python -m cbs_ray.search and python -m cbs_ray.report are the same commands.
"""


def main(argv: list[str] | None = None) -> int:
    """The ``cbs-ray`` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        try:
            print(f"cbs-ray {version('cbs-ray')}")
        except PackageNotFoundError:  # run from a checkout that was never installed
            print("cbs-ray (not installed)")
        return 0
    command = COMMANDS.get(argv[0])
    if command is None:
        print(f"error: unknown command {argv[0]!r}: choose search, report, schema, predict or plan "
              f"(see cbs-ray --help)", file=sys.stderr)
        return 2
    return command(argv[1:], prog=f"cbs-ray {argv[0]}")
