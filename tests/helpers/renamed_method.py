"""A search method defined outside the package (issue 46's target: adding a method is its two halves and one
registry entry): the from-scratch search under another name and report folder, registered with
``cbs_ray.records.method_registry.register_method``. Its two halves wrap scratch's; the registry, the spec's check,
the driver, ``--resume`` and the report command know it only by its entry."""

from cbs_ray.methods.scratch.report import REPORT as SCRATCH_REPORT
from cbs_ray.methods.scratch.search import METHOD as SCRATCH
from cbs_ray.records.method_registry import MethodEntry, register_method

NAME = "renamed_scratch"

ENTRY = MethodEntry(NAME, "-renamed", search_module=__name__, report_module=__name__, fixed_grid=False,
                    supports_study=False, auto_batches=False, report_files=("renamed.txt",))


class RenamedScratch:
    """Scratch's Ray half under ``NAME`` (``tune.search_method.SearchMethod``)."""

    name = NAME

    def outline_lines(self, spec, prepared):
        return [f"{NAME}: {line}" for line in SCRATCH.outline_lines(spec, prepared)]

    def check(self, spec, prepared):
        SCRATCH.check(spec, prepared)

    def stages(self, spec, prepared):
        return SCRATCH.stages(spec, prepared)


class RenamedScratchReport:
    """Scratch's report steps under ``NAME`` (``report.reading.MethodReport``)."""

    name = NAME
    described = "a renamed from-scratch search"
    report_flags = SCRATCH_REPORT.report_flags

    def summarize(self, path, meta, **flags):
        return SCRATCH_REPORT.summarize(path, meta, **flags)

    def render(self, reading, out):
        page = SCRATCH_REPORT.render(reading, out)
        (out / "renamed.txt").write_text(f"{NAME}\n")
        return page

    def run_lines(self, reading):
        return SCRATCH_REPORT.run_lines(reading)

    def report_lines(self, page, out, path):
        return SCRATCH_REPORT.report_lines(page, out, path)


METHOD = RenamedScratch()
REPORT = RenamedScratchReport()


def register() -> None:
    """Register ``ENTRY`` (again: it does nothing)."""
    register_method(ENTRY)
