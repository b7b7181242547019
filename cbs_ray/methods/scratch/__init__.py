"""Search from scratch (the default ``search.method``): each batch size trained from initialisation, chosen by a
sampler or the bisection, pruned per batch by ASHA (``search``, ``bisection_search``, ``per_batch_asha``). Its
reading (pure): the typed ``summary``, the per-batch table (``batch_table``), the readings of the critical batch
(``critical_batch``), the one ``answer``, the ``recommendation`` and the ``decision``, put together by ``reading``.
Its report: the ``headline``, what to paste (``trainer_snippets``), the ``page`` and the ``plots``, written by
``report``."""
