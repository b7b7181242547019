"""The search methods, one folder each: ``scratch``, ``branch``, ``ladder``. A folder holds its method's
Ray half (``search.py``, the module ``records.method_registry`` names, with what only it runs on Tune), its reading
(``reading.py`` and ``reading_*.py``: pure, DataFrames in, a typed summary out) and its report (``report.py``, the
module the registry names for the report). Layers inside each folder, and no folder imports another's modules but
the one declared exception (pyproject.toml's contracts; docs/layout-and-tests.md)."""
