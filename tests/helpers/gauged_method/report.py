"""The method's report half (``REPORT``, which its entry's ``report_module`` names): scratch's report, and
``weight_norm.csv`` (the file its entry's ``report_files`` declares): each trial's weight norm at each report, from
the history its reading holds."""

from __future__ import annotations

from cbs_ray.report.methods import report_steps

from . import NAME

__all__ = ["REPORT", "GaugedScratchReport"]

SCRATCH_REPORT = report_steps("scratch")
"""The from-scratch search's report steps, found by its registry entry as the report command finds them."""
NORM_COLUMNS = ["trial_id", "batch_size", "samples_seen", "weight_norm", "weight_norm_order"]


class GaugedScratchReport:
    """Scratch's report steps under ``NAME`` (``report.reading.MethodReport``), with the weights' norms."""

    name = NAME
    described = "a from-scratch search that reports its weights' norm"
    report_flags = SCRATCH_REPORT.report_flags

    def summarize(self, path, meta, **flags):
        return SCRATCH_REPORT.summarize(path, meta, **flags)

    def render(self, reading, out):
        page = SCRATCH_REPORT.render(reading, out)
        norms = reading.history.reindex(columns=NORM_COLUMNS).dropna(subset=["weight_norm"])
        norms.to_csv(out / "weight_norm.csv", index=False)
        return page

    def run_lines(self, reading):
        return SCRATCH_REPORT.run_lines(reading)

    def report_lines(self, page, out, path):
        return SCRATCH_REPORT.report_lines(page, out, path)


REPORT = GaugedScratchReport()
