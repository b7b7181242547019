"""The names an experiment puts on disk, defined once and needing nothing: its name as one safe folder name,
each search method's default report folder, and the command that resumes it."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

from cbs_ray.records.method_registry import DEFAULT_METHOD, method_entry

__all__ = ["NAME_MAX_BYTES", "NAME_MAX_CHARS", "name_problem", "default_report_dir", "resume_command", "TRUNK_DONE"]

NAME_MAX_BYTES = 100
"""The longest experiment name, in UTF-8 bytes (a filesystem counts a name's bytes: 100 CJK characters are 300, and
passed a check in characters, then failed with ENAMETOOLONG after Ray started). It becomes one directory
name (``./cbs_results/<name>-ladder``) and, with the date and time, a Tune experiment directory (``<name>-branch-
20261203-101500-999-schedule``: 100 + 41 bytes); 100 leaves room under every filesystem's 255-byte limit."""
NAME_MAX_CHARS = NAME_MAX_BYTES
"""The same bound under its earlier name: in bytes, which a name of ASCII characters counts alike."""

TRUNK_DONE = "trunk_done"
"""The marker a branch-mode trunk writes into its checkpoint directory when it ends (finished or diverged; "failed"
inside when Tune gave up on it): a branch waiting for a checkpoint that is still not there then fails at once
instead of waiting forever, and the report tells a trunk that failed for good."""

def name_problem(name: object) -> Optional[str]:
    """Why ``name`` cannot be one safe path component (a directory name of its own, never a path that leads
    elsewhere), or None when it can."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty name"
    if len(name.encode("utf-8", "surrogatepass")) > NAME_MAX_BYTES:
        return f"must be at most {NAME_MAX_BYTES} bytes in UTF-8, got {len(name.encode('utf-8', 'surrogatepass'))}"
    if name in (".", ".."):
        return f"must be a folder's own name, not {name!r}"
    if any(c in "/\\ " or not c.isprintable() for c in name):
        return f"must be one folder name without spaces, slashes or control characters, got {name!r}"
    return None


def default_report_dir(name: str, method: str = DEFAULT_METHOD) -> Path:
    """``./cbs_results/<name>`` for a from-scratch search, ``./cbs_results/<name>-branch`` and
    ``./cbs_results/<name>-ladder`` for the others (each method's ``MethodEntry.report_suffix``), so that a ladder run
    after a branch run of the same spec (as docs/ladder.md suggests) never clears the branch report. A method no
    entry has is an ``UnknownMethodError``: a name read from tampered metadata never steers the path."""
    return Path("cbs_results") / f"{name}{method_entry(method).report_suffix}"


def resume_command(experiment_path: str) -> str:
    """The command that continues a search, shell-quoted so that pasting it runs only that command."""
    return f"cbs-ray search --resume {shlex.quote(str(experiment_path))}"
