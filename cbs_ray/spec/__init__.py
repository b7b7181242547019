"""The search spec: its typed sections, their checks, loading from YAML with ``--set`` overrides, the rules between
fields, and its resolution against the data (budget, branch points)."""
