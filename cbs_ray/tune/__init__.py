"""Running searches on Ray Tune: the runner, one module per search method, the search space, per-batch ASHA, the study, placement, the dashboard and the trackers."""
