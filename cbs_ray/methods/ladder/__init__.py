"""The ladder (``search.method: ladder``, docs/ladder.md): a fixed grid of batch sizes trained to a token cap, each
stopped where its loss stops improving enough (``search``, ``reading_stop``); the prediction of the full run from
the ladder (``reading``) and the ``decision`` it makes; its report (``report``)."""
