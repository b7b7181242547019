"""Per-trial gauges in Ray's metrics system, so a running search shows up in the dashboard's Metrics view
(and in Prometheus/Grafana where the cluster exports them): samples/s, samples seen and the current
validation metric, tagged with the trial and its batch size. Set at every milestone by rank 0."""

from __future__ import annotations

GAUGES = {
    "samples_per_s": "Training throughput of the trial over its last report interval (samples/s).",
    "samples_seen": "Samples the trial has trained on (its progress through the equal-sample budget).",
    "metric": "The trial's current validation metric (the search's metric, named in the 'metric' tag).",
}


class TrialGauges:
    """``cbs_ray_samples_per_s``, ``cbs_ray_samples_seen``, ``cbs_ray_metric`` (Ray prefixes ``ray_``)."""

    def __init__(self, trial_id: str, batch_size: int, metric: str):
        from ray.util.metrics import Gauge

        self.metric = metric
        tags = {"trial": trial_id, "batch_size": str(batch_size), "metric": metric}
        self.gauges = {}
        for key, description in GAUGES.items():
            gauge = Gauge(f"cbs_ray_{key}", description=description, tag_keys=tuple(tags))
            gauge.set_default_tags(tags)
            self.gauges[key] = gauge

    def publish(self, metrics: dict) -> None:
        values = {"samples_per_s": metrics.get("samples_per_s"), "samples_seen": metrics.get("samples_seen"),
                  "metric": metrics.get(self.metric)}
        for key, value in values.items():
            if value is not None:
                self.gauges[key].set(float(value))
