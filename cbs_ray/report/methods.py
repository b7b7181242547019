"""Every search method's report steps by ``search.method`` name (``REPORTS``), and the report of an experiment
rebuilt with the method that wrote it (``report_experiment``: ``python -m cbs_ray.report`` and ``cbs-ray report``).
The search's end (``tune.driver``) looks its method's steps up here too, so that a report reads the same whether
a search just wrote it or the command rebuilds it. Nothing here imports Ray or anything that trains."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.storage import ReportError
from cbs_ray.report import branch, ladder, scratch
from cbs_ray.report.reading import MethodReport, Reading, experiment_out

__all__ = ["REPORTS", "report_steps", "report_experiment"]

REPORTS: dict[str, MethodReport] = {"scratch": scratch.REPORT, "branch": branch.REPORT, "ladder": ladder.REPORT}
"""Each method's report steps (``report.reading.MethodReport``), by the name ``search.method`` and an
experiment's metadata give it."""


def report_steps(name: Optional[str]) -> MethodReport:
    """The report steps of the method ``name``; from scratch for any other (an experiment's metadata that names
    none, or one no method of this version wrote: its report then says what it cannot read)."""
    return REPORTS.get(name or "scratch", REPORTS["scratch"])


def report_experiment(path: str, *, output_dir: Optional[str] = None, tolerance: Optional[float] = None,
                      target: Optional[float] = None, turning_fit: Optional[str] = None) -> Reading:
    """The report of the experiment at ``path`` rebuilt from what Tune stored with the method that wrote it (from
    scratch where its metadata cannot be read: that report says why), printed and written to ``output_dir``
    (default ``./cbs_results/<name>``, the method's own folder); a flag the method does not read is a
    ``ReportError``. Returns the method's ``Reading``."""
    try:
        meta = ExperimentMeta.read(path)
    except ReportError:
        meta = None
    method = report_steps(meta.method if meta else None)
    given = {"--tolerance": tolerance, "--target": target, "--turning-point": turning_fit}
    for flag, value in given.items():
        if value is not None and flag not in method.report_flags:
            takes = " and ".join([*method.report_flags, "--output"])
            raise ReportError(f"{flag}: applies to a from-scratch experiment; {path} is {method.described} (its "
                              f"report takes {takes})")
    path = path if "://" in path else str(Path(path).expanduser().resolve())
    reading = method.summarize(path, meta, tolerance=tolerance, target=target, turning_fit=turning_fit)
    out = experiment_out(meta, output_dir)
    page = method.render(reading, out)
    print("\n".join([*reading.headline(), *method.report_lines(page, out, path)]), flush=True)
    return reading
