"""Branch mode (``search.method: branch``, docs/branch-mode.md): one trunk, branches from its checkpoints, the schedule
run (``search``, ``gate``, ``trunk_watch``); the critical batch at each point, its trend and the schedule with its
pre-registered verdicts (``reading`` and ``reading_*``), the fixed-batch controls' configurations
(``control_configurations``, chosen on the driver by ``fair_controls``) and the ``decision``; the report, the
trainer snippets and the schedule a ladder of the same spec reads (``report``, ``trainer_snippets``,
``same_spec``)."""
