"""A worked example of a search method defined outside the package, in one folder: the from-scratch search whose
every trial also reports its weights' norm (``weight_norm``) at each evaluation, with its own spec section
(``gauge:``) that says which norm. docs/layout-and-tests.md walks through it.

- ``settings.py``: the ``gauge:`` section, its dataclass (a check beside its field) and its rule against the rest of
  the spec (``section_rule``).
- ``hooks.py``: what its runs add to the training loop (``train.hooks.TrainingHooks``).
- ``search.py``: its Ray half (``METHOD``): scratch's stages, whose trials' plans carry its hooks.
- ``report.py``: its report half (``REPORT``): scratch's report, and ``weight_norm.csv`` beside it.
- here: its registry entry, and the one line that registers it (``register``).

Nothing in ``cbs_ray`` names it: the spec's YAML, ``--set``, the JSON Schema, the driver, ``--resume`` and the report
command know it by its entry alone. Its modules are imported where the trials run (its hooks travel pickled in their
plans), so it is imported as ``tests.helpers.gauged_method``: Ray's workers have the driver's working directory (the
repository's root) on their path, not pytest's ``pythonpath``.
"""

from cbs_ray.records.method_registry import MethodEntry, register_method

NAME = "gauged_scratch"
SECTION = "gauge"

ENTRY = MethodEntry(NAME, "-gauged", search_module=f"{__name__}.search", report_module=f"{__name__}.report",
                    supports_study=False, auto_batches=False, report_files=("weight_norm.csv",),
                    section=SECTION, settings_module=f"{__name__}.settings")


def register() -> None:
    """Register ``ENTRY`` (again: it does nothing)."""
    register_method(ENTRY)
