"""What every method's reading of a finished experiment shares: the per-batch tables, JSON-ready values, how a
bound is written, the ``Decision`` every method writes (``decision``, with branch's and the ladder's rules), and
branch mode's control configurations; each method's own reading is in ``cbs_ray.methods``. Pure: DataFrames in,
plain values out."""
