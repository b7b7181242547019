"""Running searches on Ray Tune: the runner and the driver the methods (``cbs_ray.methods``) run on, the search
space, the study, placement, the dashboard and the trackers."""
