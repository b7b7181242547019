"""Summaries of finished experiments: per-batch tables, the readings and the answer every method shares (each
method's own reading is in ``cbs_ray.methods``). Pure: DataFrames in, typed summaries out."""
