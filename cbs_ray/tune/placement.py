"""Whether one trial can ever be placed on the cluster the search joined, checked before Tune starts.

A trial is one Tune actor (``train.trial.trial_resources``) and, unless it trains in-process, ``workers_per_trial``
Ray Train workers of ``train.trial.worker_resources`` each, reserved as one placement group whose bundles may
spread over nodes (the Train controller holds nothing and runs on the trial's node). Ray does not refuse a
request that no node can meet: it waits for such a node, and on a cluster that cannot add one that is
forever (a trial "PENDING" in Tune's table, no error). So the request is held against the alive nodes'
*total* resources (what other jobs hold now is freed in time); if no placement exists, the search ends with
one line naming what was asked and what the nodes have.

On an autoscaling cluster waiting is right: the autoscaler adds the node the request needs (``cluster.yaml``
starts with a CPU-only head and no GPU worker). ``autoscales`` tells the two apart from what Ray itself
publishes, no flag needed:

* the cluster config in the GCS (``ray._private.state.state.get_cluster_config()``), which KubeRay and
  autoscaler v2 report: autoscaling when a node group can grow (``max_count`` -1 or above ``min_count``), the
  rule of Ray Data's ``is_autoscaling_enabled``;
* the autoscaler's own report of the live nodes' types (v1: the ``__autoscaling_status`` key of the GCS
  KV store, which ``ray status`` prints; v2: ``ray.autoscaler.v2.sdk.get_cluster_status``). A cluster started
  without ``--autoscaling-config`` (``ray start``, ``ray.init()``, ``ray.cluster_utils.Cluster``) runs the
  autoscaler with a read-only provider that names every node ``node_<node id>``; a cluster-launcher cluster
  (``ray up cluster.yaml``) names them by the config's node types (``head``, ``gpu_worker``).

Where none of these is readable, the cluster is taken not to autoscale: a search that would wait forever
is worse than one that says so.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from cbs_ray.ray_internals import autoscaling_status, cluster_node_groups
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.train.trial import train_workers, trial_resources, worker_resources

__all__ = ["TrialDemand", "NeverPlaced", "trial_demand", "never_placed", "autoscales", "check_placeable",
           "READ_ONLY_NODE_TYPE"]

READ_ONLY_NODE_TYPE = re.compile(r"node_[0-9a-f]+")
"""The node type Ray's read-only provider gives every node of a cluster it cannot scale
(``ray.autoscaler._private.util.format_readonly_node_type``)."""


class NeverPlaced(SpecError):
    """No node of a cluster without an autoscaler can ever hold one trial; the message names the field."""


@dataclass(frozen=True)
class TrialDemand:
    """What one trial asks of the cluster."""

    trial: dict
    """The Tune trial actor's bundle (an in-process trial: its worker's CPUs)."""
    workers: int
    """Ray Train workers beside it (0: in-process)."""
    per_worker: dict
    """Each worker's bundle."""

    def text(self) -> str:
        if not self.workers:
            return f"{_bundle_text(self.trial)} for its in-process worker"
        return f"{self.workers} worker{'s' * (self.workers > 1)} × {_bundle_text(self.per_worker)}"


def trial_demand(spec: SearchSpec) -> TrialDemand:
    return TrialDemand(trial=trial_resources(spec), workers=train_workers(spec), per_worker=worker_resources(spec))


# ---- the check, over plain dicts -------------------------------------------------------------------------

def _asked(bundle: dict) -> dict:
    return {k: v for k, v in bundle.items() if v > 0}


def copies_that_fit(bundle: dict, node: dict) -> float:
    """How many ``bundle``s a node with ``node``'s total resources holds at once (inf for an empty bundle)."""
    return min((node.get(k, 0.0) // v for k, v in _asked(bundle).items()), default=float("inf"))


def never_placed(demand: TrialDemand, nodes: Sequence[dict], *, field: str = "resources") -> Optional[str]:
    """Why no placement of one trial exists on ``nodes`` (each node's total resources, as ``ray.nodes()``
    gives them under ``Resources``), or None when one does. The workers' bundles are identical, so a node
    holds ``copies_that_fit`` of them and the cluster their sum: that sum below ``workers`` is exactly "no
    placement". The message starts with the field to change, e.g. ``resources.use_gpu: …``."""
    trial, worker = _asked(demand.trial), _asked(demand.per_worker)
    keys = sorted((set(worker) | set(trial)) - {"memory"})
    have = f"{len(nodes)} node{'s' * (len(nodes) != 1)}: {_nodes_text(nodes, keys)}"
    if not any(copies_that_fit(trial, node) >= 1 for node in nodes):
        return (f"{field}.cpus_per_worker: a trial asks for {demand.text()}, and no node has that much "
                f"({have})")
    if not demand.workers:
        return None
    if worker.get("GPU") and not any(node.get("GPU", 0) > 0 for node in nodes):
        return f"{field}.use_gpu: a trial asks for {demand.text()}, and no node has a GPU ({have})"
    capacity = sum(copies_that_fit(worker, node) for node in nodes)
    if capacity < 1:
        return (f"{field}.cpus_per_worker: a trial asks for {demand.text()}, and no node has that much for one "
                f"worker ({have})")
    if capacity < demand.workers:
        return (f"{field}.workers_per_trial: a trial asks for {demand.text()}, and the nodes hold {int(capacity)} "
                f"such worker{'s' * (capacity > 1)} at most ({have})")
    return None


def autoscales(*, node_types: Iterable[str] = (), node_groups: Iterable[tuple[int, int]] = ()) -> bool:
    """Whether the cluster has an autoscaler that can add nodes: a node group of the GCS cluster config
    (``(min_count, max_count)``) that can grow, or an autoscaler that reports node types of a launcher
    config rather than the read-only provider's ``node_<id>``."""
    return (any(high == -1 or high > low for low, high in node_groups)
            or any(not READ_ONLY_NODE_TYPE.fullmatch(t) for t in node_types))


def _number(value: float) -> str:
    return f"{value:g}"


def _bundle_text(bundle: dict) -> str:
    return "{" + ", ".join(f"{k}: {_number(v)}" for k, v in _asked(bundle).items() if k != "memory") + "}"


def _nodes_text(nodes: Sequence[dict], keys: list[str]) -> str:
    """Each distinct node as the resources asked for (missing ones as 0), with a count when repeated."""
    counts: dict[str, int] = {}
    for node in nodes:
        text = "{" + ", ".join(f"{k}: {_number(node.get(k, 0))}" for k in keys) + "}"
        counts[text] = counts.get(text, 0) + 1
    return ", ".join(text if n == 1 else f"{n} × {text}" for text, n in counts.items())


# ---- the cluster's side (Ray) ----------------------------------------------------------------------------

def _alive_nodes() -> list[dict]:
    import ray

    return [dict(node["Resources"]) for node in ray.nodes() if node.get("Alive")]


def _autoscaler_node_types() -> list[str]:
    """The node types the cluster's autoscaler reports for its live nodes ([] before its first report)."""
    import ray
    from ray.autoscaler.v2.utils import is_autoscaler_v2

    if is_autoscaler_v2(fetch_from_server=True):
        from ray.autoscaler.v2.sdk import get_cluster_status

        status = get_cluster_status(ray.get_runtime_context().gcs_address)
        return [n.ray_node_type_name for n in status.active_nodes + status.idle_nodes]
    raw = autoscaling_status()
    report = (json.loads(raw).get("autoscaler_report") or {}) if raw else {}
    return list((report.get("node_type_mapping") or {}).values()) or list(report.get("active_nodes") or {})


def cluster_autoscales() -> bool:
    """``autoscales`` on what the connected cluster publishes; False where it publishes nothing readable."""
    try:
        return autoscales(node_types=_autoscaler_node_types(), node_groups=cluster_node_groups())
    except Exception:  # private state that another Ray version may move: then say so rather than wait
        return False


def check_placeable(spec: SearchSpec) -> None:
    """Before Tune starts (Ray connected): raise ``NeverPlaced`` when no node can ever hold one trial and
    the cluster cannot add one; on an autoscaling cluster print that trials wait for new nodes."""
    reason = never_placed(trial_demand(spec), _alive_nodes())
    if reason is None:
        return
    if cluster_autoscales():
        print(f"note: {reason.split(': ', 1)[1]}; the cluster autoscales: trials wait for the nodes it adds",
              flush=True)
        return
    raise NeverPlaced(f"{reason}; the cluster has no autoscaler to add nodes, so no trial could ever start")
