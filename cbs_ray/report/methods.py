"""Every search method's report steps by ``search.method`` name (``report_steps``: the module its entry in
``records.method_registry`` names, imported when asked for), and the report of an experiment
rebuilt with the method that wrote it (``report_experiment``: ``python -m cbs_ray.report`` and ``cbs-ray report``).
The search's end (``tune.driver``) looks its method's steps up here too, so that a report reads the same whether
a search just wrote it or the command rebuilds it. Nothing here imports Ray or anything that trains."""

from __future__ import annotations

import importlib
from typing import Optional, cast

from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.method_registry import DEFAULT_METHOD, UnknownMethodError, method_entry
from cbs_ray.records.storage import ReportError
from cbs_ray.report.reading import MethodReport, Reading, experiment_out
from cbs_ray.spec.paths import expand_user

__all__ = ["report_steps", "report_experiment"]


def report_steps(name: Optional[str]) -> MethodReport:
    """The report steps (``report.reading.MethodReport``: the ``REPORT`` of the module its registry entry names) of
    the method ``name``; from scratch where it is None (an experiment whose metadata cannot be read: its report
    then says what it cannot read). A name no entry has is an ``UnknownMethodError``."""
    module = importlib.import_module(method_entry(name or DEFAULT_METHOD).report_module)
    return cast(MethodReport, module.REPORT)


def report_experiment(path: str, *, output_dir: Optional[str] = None, tolerance: Optional[float] = None,
                      target: Optional[float] = None, turning_fit: Optional[str] = None) -> Reading:
    """The report of the experiment at ``path`` rebuilt from what Tune stored with the method that wrote it (from
    scratch where its metadata cannot be read: that report says why), printed and written to ``output_dir``
    (default ``./cbs_results/<name>``, the method's own folder); a flag the method does not read is a
    ``ReportError``. Returns the method's ``Reading``."""
    named, path = path, path if "://" in path else str(expand_user(path, "EXPERIMENT_DIR").resolve())
    try:
        meta = ExperimentMeta.read(path)
    except UnknownMethodError as e:  # never another method's steps, nor a folder the name would steer
        raise UnknownMethodError(f"{named}: {e}; nothing was written") from None
    except ReportError:
        meta = None
    method = report_steps(meta.method if meta else None)
    given = {"--tolerance": tolerance, "--target": target, "--turning-point": turning_fit}
    for flag, value in given.items():
        if value is not None and flag not in method.report_flags:
            takes = " and ".join([*method.report_flags, "--output"])
            raise ReportError(f"{flag}: applies to a from-scratch experiment; {named} is {method.described} (its "
                              f"report takes {takes})")
    reading = method.summarize(path, meta, tolerance=tolerance, target=target, turning_fit=turning_fit)
    out = experiment_out(meta, output_dir)
    page = method.render(reading, out)
    print("\n".join([*reading.headline(), *method.report_lines(page, out, path)]), flush=True)
    return reading
