"""Reading a Tune experiment from its storage (a local directory or a URI), with no cluster and no live
trial: the spec file cbs-ray writes beside Tune's own files, every trial's reported results, and the
error files of the trials that failed. The report and the nothing-fits check read through this module;
everything above it sees a history DataFrame and plain messages.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

__all__ = ["ReportError", "META_FILE", "write_meta", "read_meta", "load_history", "with_tokens_seen", "error_lines",
           "failed_trials", "first_error"]

META_FILE = "cbs_spec.json"  # metric, mode, budget, the spec: what the report needs beyond Tune's results


class ReportError(ValueError):
    """Nothing can be reported (no experiment, no trial); the message says why."""


def filesystem(uri: str):
    """(pyarrow filesystem, path on it) for a local path (``~`` expanded, made absolute) or a URI."""
    import pyarrow.fs

    if "://" in uri:
        return pyarrow.fs.FileSystem.from_uri(uri)
    return pyarrow.fs.LocalFileSystem(), str(Path(uri).expanduser().resolve())


def write_meta(experiment_uri: str, meta: dict) -> None:
    """Store what the report needs (metric, mode, budget, spec) beside Tune's own experiment files."""
    fs, path = filesystem(experiment_uri)
    fs.create_dir(path, recursive=True)
    with fs.open_output_stream(f"{path}/{META_FILE}") as f:
        f.write(json.dumps(meta, indent=2).encode())


def read_meta(experiment_uri: str) -> dict:
    """What ``write_meta`` stored; ``ReportError`` when the file is missing or damaged."""
    fs, path = filesystem(experiment_uri)
    try:
        with fs.open_input_stream(f"{path}/{META_FILE}") as f:
            return json.loads(f.read().decode())
    except (FileNotFoundError, OSError):
        raise ReportError(f"{experiment_uri}: not a cbs-ray experiment directory (no {META_FILE})") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ReportError(f"{experiment_uri}: {META_FILE} is damaged ({str(e).splitlines()[0]})") from None


def load_history(experiment_uri: str) -> pd.DataFrame:
    """Every milestone every trial reported, from Tune's persisted results; with packed texts (the metadata's
    ``tokens_per_sample``) also ``tokens_seen`` (``with_tokens_seen``)."""
    from ray.tune import ExperimentAnalysis

    try:
        analysis = ExperimentAnalysis(experiment_uri)
    except Exception as e:
        raise ReportError(f"{experiment_uri}: cannot read the Tune experiment ({str(e).splitlines()[0]})") from None
    failed = {t.trial_id for t in analysis.trials if t.status == "ERROR"}
    frames = [df.assign(trial_id=trial_id, failed=trial_id in failed)
              for trial_id, df in analysis.trial_dataframes.items() if len(df) and "samples_seen" in df]
    if not frames:
        return pd.DataFrame()
    # A trial restarted from a checkpoint older than its last report reports that milestone again.
    history = pd.concat(frames, ignore_index=True).drop_duplicates(["trial_id", "samples_seen"], keep="last")
    try:
        tokens = read_meta(experiment_uri).get("tokens_per_sample")
    except ReportError:  # an experiment without cbs-ray's metadata (the probe's): samples only
        tokens = None
    return with_tokens_seen(history, tokens)


def with_tokens_seen(history: pd.DataFrame, tokens_per_sample: int | None) -> pd.DataFrame:
    """``history`` with a ``tokens_seen`` column, ``samples_seen × tokens_per_sample``, where the texts were
    packed (``budget.tokens_per_sample``: every sample the same tokens); rows that reported it keep theirs.
    Unchanged without packing (None), where samples hold different numbers of tokens."""
    if not tokens_per_sample or history.empty or "samples_seen" not in history:
        return history
    computed = history["samples_seen"] * int(tokens_per_sample)
    history = history.copy()
    history["tokens_seen"] = history["tokens_seen"].fillna(computed) if "tokens_seen" in history else computed
    return history


def error_lines(trial) -> list[str]:
    """The non-blank lines of a trial's error file on the experiment's storage (local or a URI, no Ray
    session needed); [] when it has none or it cannot be read."""
    try:
        fs = trial.storage.storage_filesystem
        with fs.open_input_stream(f"{trial.storage.trial_fs_path}/{trial.run_metadata.error_filename}") as f:
            text = f.readall().decode(errors="replace")
    except Exception:  # no error file, no trial directory name, storage gone: it is only a hint
        return []
    return [line.strip() for line in text.splitlines() if line.strip()]


def failed_trials(experiment_uri: str) -> tuple[list, int]:
    """(the trials that failed, how many trials there are). A trial stopped while Tune was retrying it
    is not marked ERROR, but its error file is recorded."""
    from ray.tune import ExperimentAnalysis

    try:
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
