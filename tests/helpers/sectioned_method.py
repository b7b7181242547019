"""The spec's side of a search method defined outside the package with its own section, ``sweep:``: its settings
dataclass (a field check beside its field, a rule against the rest of the spec in ``section_rule``) lives here, and one
``register_method`` line makes the spec's YAML, ``--set``, the JSON Schema and the validation know it; nothing in
``cbs_ray.spec`` names it. Its two halves are not this module's subject (``renamed_method`` runs and reports one)."""

from dataclasses import dataclass, field

from cbs_ray.records.method_registry import MethodEntry, register_method
from cbs_ray.spec.checks import between, check, reads_section
from cbs_ray.spec.errors import SpecError

NAME = "swept_scratch"
SECTION = "sweep"


@dataclass
class SweepSettings:
    """The ``sweep:`` section: how many LR points the method would sweep per batch."""

    points: int = field(default=3, metadata=check(between(1, 9)))
    """LR points per batch size (1 to 9)."""
    widest: bool = False
    """Sweep the whole ``search.alpha_range``; needs a range wider than a point."""

    def section_rule(self, spec) -> None:
        """Its rule against the rest of the spec, for its own specs alone."""
        if not reads_section(spec, self):
            return
        low, high = spec.search.alpha_range
        if self.widest and low == high:
            raise SpecError(f"{SECTION}.widest: sweeps search.alpha_range, which is one point ({low})")


SETTINGS = SweepSettings

ENTRY = MethodEntry(NAME, "-swept", search_module=__name__, report_module=__name__, supports_study=False,
                    section=SECTION, settings_module=__name__)


def register() -> None:
    """Register ``ENTRY`` (again: it does nothing)."""
    register_method(ENTRY)
