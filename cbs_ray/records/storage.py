"""Reading a Tune experiment from its storage (a local directory or a URI), with no cluster and no live
trial: the spec file cbs-ray writes beside Tune's own files, every trial's reported results, and the
error files of the trials that failed. The report and the nothing-fits check read through this module;
everything above it sees a history DataFrame and plain messages.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from cbs_ray.ray_internals import trial_storage
from cbs_ray.records.bounded_file import read_regular_file
from cbs_ray.records.columns import Column
from cbs_ray.records.legacy import old_module_names
from cbs_ray.records.moved_modules import moved_module_names

if TYPE_CHECKING:  # pandas takes half a second to import: what only names a spec's file (a --dry-run) skips it
    import pandas as pd
    from ray.tune.experiment import Trial

__all__ = ["ReportError", "META_FILE", "write_meta", "read_meta", "load_history", "damaged_tune_state",
           "with_tokens_seen", "error_lines", "failed_trials", "first_error"]

META_FILE = "cbs_spec.json"  # metric, mode, budget, the spec: what the report needs beyond Tune's results


class ReportError(ValueError):
    """Nothing can be reported (no experiment, no trial); the message says why."""


def filesystem(uri: str) -> tuple[Any, str]:
    """(pyarrow filesystem, path on it) for a local path (``~`` expanded, made absolute) or a URI."""
    import pyarrow.fs

    if "://" in uri:
        found: tuple[Any, str] = pyarrow.fs.FileSystem.from_uri(uri)
        return found
    # os.path's expansion leaves an unknown ~user as it is (pathlib's raises): the faces expand a user's path first
    # (spec.paths.expand_user), naming the field where it cannot be
    return pyarrow.fs.LocalFileSystem(), str(Path(os.path.expanduser(uri)).resolve())


MAX_META_BYTES = 64 * 2**20
"""The largest ``cbs_spec.json`` read (64 MiB; cbs-ray writes a few kB): a planted huge file is not read."""


def write_meta(experiment_uri: str, meta: dict[str, Any]) -> None:
    """Store what the report needs (metric, mode, budget, spec) beside Tune's own experiment files. Locally it is
    written aside and renamed into place: never through a hard link or a symbolic link in its place."""
    fs, path = filesystem(experiment_uri)
    fs.create_dir(path, recursive=True)
    text = json.dumps(meta, indent=2).encode()
    if "://" in experiment_uri:
        with fs.open_output_stream(f"{path}/{META_FILE}") as f:
            f.write(text)
        return
    descriptor, aside = tempfile.mkstemp(prefix=f".{META_FILE}.", dir=path)
    try:
        with os.fdopen(descriptor, "wb") as f:
            f.write(text)
        os.chmod(aside, 0o644)
        os.replace(aside, f"{path}/{META_FILE}")
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(aside)
        raise


def _read_local_meta(path: str) -> bytes:
    """A local ``cbs_spec.json``'s bytes, read only as a regular file of at most ``MAX_META_BYTES`` (a FIFO or a
    link to /dev/zero hung or exhausted ``cbs-ray report``)."""
    return read_regular_file(f"{path}/{META_FILE}", MAX_META_BYTES, what="a cbs-ray metadata file")


def read_meta(experiment_uri: str) -> dict[str, Any]:
    """What ``write_meta`` stored; ``ReportError`` when the file is missing or damaged (a JSON array, string, number
    or null is not the object cbs-ray writes)."""
    fs, path = filesystem(experiment_uri)
    try:
        if "://" not in experiment_uri:
            meta = json.loads(_read_local_meta(path).decode())
        else:
            with fs.open_input_stream(f"{path}/{META_FILE}") as f:
                meta = json.loads(f.read().decode())
    except (FileNotFoundError, OSError):
        raise ReportError(f"{experiment_uri}: not a cbs-ray experiment directory (no {META_FILE})") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ReportError(f"{experiment_uri}: {META_FILE} is damaged ({str(e).splitlines()[0]})") from None
    except RecursionError:  # JSON nested thousands deep: not what cbs-ray writes
        raise ReportError(f"{experiment_uri}: {META_FILE} is damaged (nested too deep to read)") from None
    if not isinstance(meta, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(meta), "a number")
        raise ReportError(f"{experiment_uri}: {META_FILE} is damaged (it holds {kind}, not the JSON object cbs-ray "
                          "writes)")
    return meta


def load_history(experiment_uri: str) -> pd.DataFrame:
    """Every milestone every trial reported, from Tune's persisted results; with packed texts (the metadata's
    ``tokens_per_sample``) also ``tokens_seen`` (``with_tokens_seen``).

    Nothing on disk is dropped silently: a trial's ``result.json`` cut off mid-line (a killed writer) is read
    up to its last complete line, and the lines lost are named on stderr, trial by trial; where Tune's
    experiment state cannot be read, the trials are rebuilt from their own directories' result files (a
    trial with an error file counts as failed) and a line says so."""
    import pandas as pd

    trials = _trials(experiment_uri)
    frames = []
    for trial_id, failed, fs, trial_dir in trials:
        df = _results(fs, f"{trial_dir}/result.json", trial_id)
        if len(df) and Column.samples_seen in df:
            frames.append(df.assign(trial_id=trial_id, failed=failed))
    if not frames:
        return pd.DataFrame()
    # A trial restarted from a checkpoint older than its last report reports that milestone again.
    history = pd.concat(frames, ignore_index=True).drop_duplicates([Column.trial_id, Column.samples_seen],
                                                                    keep="last")
    try:
        tokens = read_meta(experiment_uri).get("tokens_per_sample")
    except ReportError:  # an experiment without cbs-ray's metadata (the probe's): samples only
        tokens = None
    return with_tokens_seen(history, tokens)


def damaged_tune_state(experiment_uri: str) -> str | None:
    """Why Tune's experiment state (``experiment_state-*.json``) cannot be restored, or None when it parses:
    a resume from a damaged state would start the search afresh and drop the trials before it."""
    import pyarrow.fs

    fs, root = filesystem(experiment_uri)
    try:
        states = [i.path for i in fs.get_file_info(pyarrow.fs.FileSelector(root))
                  if i.base_name.startswith("experiment_state") and i.base_name.endswith(".json")]
        for state in states:
            with fs.open_input_stream(state) as f:
                json.loads(f.readall().decode("utf-8"))
    except ValueError as e:
        return f"{Path(state).name} is damaged ({str(e).splitlines()[0]})"
    except OSError as e:
        return f"it cannot be read ({e})"
    return None


def _trials(experiment_uri: str) -> list[tuple[str, bool, Any, str]]:
    """(trial id, failed, filesystem, trial directory) of every trial, from Tune's experiment state; from the
    trial directories themselves when that state cannot be read (``ReportError`` when neither can)."""
    from ray.tune import ExperimentAnalysis

    try:
        # Its own reading of the result files warns of a cut-off file and drops the trial; ours reads the
        # file up to the cut (``_results``) and says what was lost.
        with old_module_names(), moved_module_names(), \
                _quiet(logging.getLogger("ray.tune.analysis.experiment_analysis")):
            analysis = ExperimentAnalysis(experiment_uri)
        return [(t.trial_id, t.status == "ERROR", *trial_storage(t))
                for t in analysis.trials if t.last_result is not None]
    except Exception as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    on_disk = _trials_on_disk(experiment_uri)
    if not on_disk:
        raise ReportError(f"{experiment_uri}: cannot read the Tune experiment ({reason})") from None
    print(f"warning: {experiment_uri}: Tune's experiment state cannot be read ({reason}); the {len(on_disk)} "
          f"trials are read from their own result files", file=sys.stderr, flush=True)
    return on_disk


@contextlib.contextmanager
def _quiet(logger: logging.Logger) -> Iterator[None]:
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _trials_on_disk(experiment_uri: str) -> list[tuple[str, bool, Any, str]]:
    import pyarrow.fs

    fs, root = filesystem(experiment_uri)
    try:
        entries = fs.get_file_info(pyarrow.fs.FileSelector(root))
    except OSError:
        return []
    trials = []
    for entry in sorted(entries, key=lambda e: e.path):
        names = set() if entry.type != pyarrow.fs.FileType.Directory else \
            {i.base_name for i in fs.get_file_info(pyarrow.fs.FileSelector(entry.path))}
        if "result.json" in names:
            first = _results(fs, f"{entry.path}/result.json", entry.base_name)
            trial_id = str(first[Column.trial_id].iloc[0]) if Column.trial_id in first and len(first) \
                else entry.base_name
            trials.append((trial_id, bool(names & {"error.txt", "error.pkl"}), fs, entry.path))
    return trials


def _results(fs: Any, path: str, trial_id: str) -> pd.DataFrame:
    """One trial's ``result.json`` as Tune's ``ExperimentAnalysis`` reads it (one flattened row per line,
    nested keys joined by ``/``), up to its last complete line; a line that does not parse and the lines after
    it are named on stderr, never silently dropped with the trial."""
    import pandas as pd

    try:
        with fs.open_input_stream(path) as f:
            content = f.readall().decode("utf-8", errors="replace").rstrip("\n")
    except (FileNotFoundError, OSError):
        return pd.DataFrame()
    if not content:
        return pd.DataFrame()
    rows, lines = [], content.split("\n")
    for number, line in enumerate(lines, start=1):
        try:
            rows.append(json.loads(line))
        except ValueError:
            print(f"warning: trial {trial_id}: {path} is cut off at line {number}: {len(lines) - number + 1} "
                  f"line(s) lost, {len(rows)} read", file=sys.stderr, flush=True)
            break
    return pd.json_normalize(rows, sep="/") if rows else pd.DataFrame()


def with_tokens_seen(history: pd.DataFrame, tokens_per_sample: int | None) -> pd.DataFrame:
    """``history`` with a ``tokens_seen`` column, ``samples_seen × tokens_per_sample``, where the texts were
    packed (``spec.resolve.tokens_per_sample``: every sample the same tokens); rows that reported it keep theirs.
    Unchanged without packing (None), where samples hold different numbers of tokens."""
    if not tokens_per_sample or history.empty or Column.samples_seen not in history:
        return history
    computed = history[Column.samples_seen] * int(tokens_per_sample)
    history = history.copy()
    history[Column.tokens_seen] = history[Column.tokens_seen].fillna(computed) if Column.tokens_seen in history \
        else computed
    return history


def error_lines(trial: Trial) -> list[str]:
    """The non-blank lines of a trial's error file on the experiment's storage (local or a URI, no Ray
    session needed); [] when it has none or it cannot be read."""
    try:
        fs, trial_dir = trial_storage(trial)
        with fs.open_input_stream(f"{trial_dir}/{trial.run_metadata.error_filename}") as f:
            text = f.readall().decode(errors="replace")
    except Exception:  # no error file, no trial directory name, storage gone: it is only a hint
        return []
    return [line.strip() for line in text.splitlines() if line.strip()]


def failed_trials(experiment_uri: str) -> tuple[list[Trial], int]:
    """(the trials that failed, how many trials there are). A trial stopped while Tune was retrying it
    is not marked ERROR, but its error file is recorded."""
    from ray.tune import ExperimentAnalysis

    try:
        with old_module_names(), moved_module_names():
            trials = ExperimentAnalysis(experiment_uri).trials
    except Exception:
        return [], 0
    return [t for t in trials if t.status == "ERROR" or t.run_metadata.error_filename], len(trials)


def first_error(experiment_uri: str) -> str:
    """'; N of M trials failed, the first with: <its exception line>' when trials failed, else ''. The line is
    the last of the trial's error file, where Ray puts the exception."""
    failed, total = failed_trials(experiment_uri)
    if not failed:
        return ""
    first = next((lines[-1] for lines in map(error_lines, failed) if lines), None)
    return f"; {len(failed)} of {total} trials failed" + (f", the first with: {first}" if first else "")
