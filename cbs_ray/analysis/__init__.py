"""Summaries of finished experiments: per-batch tables, the readings, the answer, branch points and schedules. Pure: DataFrames in, typed summaries out."""
