"""The command lines: ``cbs-ray search`` (also ``python -m cbs_ray.search``: run or resume a search),
``cbs-ray report`` (also ``python -m cbs_ray.report``: rebuild a report from an experiment directory) and
``cbs-ray schema`` (the spec's JSON Schema). They parse, call the Python API, and turn a bad input into one
line and a non-zero exit: 2 for a bad spec or argument, 1 for a run that has nothing to report, 130 for
Ctrl-C."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from cbs_ray.records.columns import MissingColumnError
from cbs_ray.records.names import resume_command
from cbs_ray.records.storage import META_FILE, ReportError
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec

__all__ = ["OneLineParser", "unforeseen_error", "main", "search_main", "report_main", "schema_main",
           "parse_search_args"]

SEARCH_DESCRIPTION = "Run a critical-batch search: cbs-ray search [--space FILE] [--set key=value ...]"
REPORT_DESCRIPTION = ("The report: cbs-ray report EXPERIMENT_DIR [--output DIR] [--tolerance 0.01] "
                      "[--target VALUE]")
MAX_PATH_CHARS = 4096
"""Linux's PATH_MAX: a longer ``--output`` cannot be a folder."""


def check_output_arg(output: str | None) -> None:
    """``--output`` can name a folder at all (no NUL, no name over 255 bytes, no path over PATH_MAX): a
    ``SpecError`` before anything starts, instead of an ``OSError`` or ``ValueError`` from deep inside."""
    if output is None:
        return
    if "\x00" in output:
        raise SpecError("--output: contains a NUL character")
    too_long = len(output.encode()) > MAX_PATH_CHARS or any(len(part.encode()) > 255 for part in output.split("/"))
    if too_long:
        raise SpecError(f"--output: {output[:60]!r}... is longer than a path can be ({MAX_PATH_CHARS} bytes, "
                        "255 a folder name)")


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (exit code 2) instead of the whole usage."""

    def error(self, message):
        self.exit(2, f"error: {message} (see --help)\n")


def unforeseen_error(e: Exception) -> int:
    """A failure neither command line foresaw: one line and exit code 1, the traceback on request
    (CBS_RAY_DEBUG=1 re-raises it). Call inside the ``except`` block."""
    if os.environ.get("CBS_RAY_DEBUG"):
        raise e
    print(f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} "
          "(set CBS_RAY_DEBUG=1 for the traceback)", file=sys.stderr)
    return 1


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
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # A search imports Ray and torch (seconds): --help, a usage error and a --dry-run's plan answer before them
    # (the API imports each method's module when it is asked for, and a --dry-run needs no Ray).
    from cbs_ray.tune import api
    from cbs_ray.tune.prepare import check_before_ray, output_dir_for
    from cbs_ray.tune.probe import probe_spec


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
            for line in api.dry_run_lines(spec):  # the plan as soon as it is known, then the model's checks
                print(line, flush=True)
            return 0
        if args.probe:
            from cbs_ray.tune import runner
            from cbs_ray.tune.scratch import run_probe

            probe = probe_spec(spec)
            prepared = api.prepare(probe)
            with runner.ray_session(args.address, verbose=args.verbose) as context:
                runner.on_the_cluster(probe, context)
                _, grid = run_probe(probe, prepared, verbose=args.verbose)
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


# ---- python -m cbs_ray.report ----------------------------------------------------------------------

def report_main(argv: list[str] | None = None, prog: str = "python -m cbs_ray.report") -> int:
    parser = OneLineParser(prog=prog, description=REPORT_DESCRIPTION)
    parser.add_argument("experiment_dir", help="the Tune experiment directory a search wrote")
    parser.add_argument("--output", help="where to write the report (default: ./cbs_results/<name>, "
                                         "<name>-branch or <name>-ladder for those methods)")
    parser.add_argument("--tolerance", type=float, help="turning-point tolerance (relative; default from the spec)")
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

    from cbs_ray.tune import api  # (as above: the report's usage errors answer before Ray and torch load)

    if args.target is not None and not math.isfinite(args.target):
        print(f"error: --target: must be a finite number, got {args.target}", file=sys.stderr)
        return 2
    try:
        api.report_experiment(args.experiment_dir, output_dir=args.output, tolerance=args.tolerance,
                              target=args.target, turning_fit=args.turning_point)
    except (ReportError, MissingColumnError) as e:  # a history without a column the report needs names it
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (KeyError, TypeError, ValueError, RecursionError) as e:  # metadata of the wrong shape (ladder_batches: "lots")
        if os.environ.get("CBS_RAY_DEBUG"):
            raise
        said = str(e).splitlines()[0] if str(e) else ""
        print(f"error: {args.experiment_dir}: cannot be reported: {type(e).__name__}: {said[:200]} (its "
              f"{META_FILE} or results are not what cbs-ray writes; CBS_RAY_DEBUG=1 for the traceback)", file=sys.stderr)
        return 2
    except Exception as e:
        return unforeseen_error(e)
    return 0


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

COMMANDS = {"search": search_main, "report": report_main, "schema": schema_main}
"""``cbs-ray COMMAND ...``: each takes the rest of the arguments."""

USAGE = """usage: cbs-ray {search,report,schema} ...

  cbs-ray search [--space FILE] [--set key=value ...] [--dry-run] [--verbose] ...   run or resume a search
  cbs-ray report EXPERIMENT_DIR [--output DIR] [--target VALUE] ...                 rebuild a report
  cbs-ray schema                                                                    the spec's JSON Schema

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
        print(f"error: unknown command {argv[0]!r}: choose search, report or schema (see cbs-ray --help)",
              file=sys.stderr)
        return 2
    return command(argv[1:], prog=f"cbs-ray {argv[0]}")
