"""What every method's reading of a finished experiment shares: the per-trial and noise-scale tables, JSON-ready
values, how a bound is written, the ``Decision`` every method writes and what it is built with (``decision``); each
method's own reading, its decision rule included, is in ``cbs_ray.methods``. Pure: DataFrames in, plain values
out."""
