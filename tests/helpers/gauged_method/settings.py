"""The ``gauge:`` section of the spec (``SETTINGS``, which the registry entry's ``settings_module`` names): which norm
of the weights the method's runs report. Its field's check sits beside the field; its rule against the rest of the
spec is ``section_rule``, which applies to this method's specs alone."""

from dataclasses import dataclass, field

from cbs_ray.spec.checks import between, check, reads_section
from cbs_ray.spec.errors import SpecError

__all__ = ["GaugeSettings", "SETTINGS"]


@dataclass
class GaugeSettings:
    """The ``gauge:`` section."""

    norm_order: int = field(default=2, metadata=check(between(1, 2)))
    """The norm of all trainable weights each evaluation reports as ``weight_norm``: 1 (sum of magnitudes) or 2."""

    def section_rule(self, spec) -> None:
        """The norm is read from one rank's parameters, which under FSDP are a shard of the model."""
        if reads_section(spec, self) and spec.training.parallelism == "fsdp":
            raise SpecError("gauge: reads one rank's weights; under training.parallelism fsdp that is a shard "
                            "(use ddp)")


SETTINGS = GaugeSettings
