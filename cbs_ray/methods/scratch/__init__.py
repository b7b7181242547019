"""Search from scratch (the default ``search.method``): each batch size trained from initialisation, chosen by a
sampler or the bisection, pruned per batch by ASHA (``search``, ``bisection_search``, ``per_batch_asha``); the
per-batch table and the answer (``reading``); the report (``report``)."""
