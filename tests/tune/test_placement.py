"""Whether one trial can ever be placed (issue 20), over hand-built node lists: no Ray."""

import pytest

from cbs_ray.spec.load import load_spec
from cbs_ray.tune.placement import TrialDemand, autoscales, copies_that_fit, never_placed, trial_demand

# Nodes as ray.nodes() gives their totals: a head with CPU 0 (cluster.yaml's) has no CPU key at all.
HEAD = {"memory": 8e9, "object_store_memory": 1e9, "node:__internal_head__": 1.0}
CPU2 = {"CPU": 2.0, "memory": 8e9, "object_store_memory": 1e9}
CPU1_FAKE_GPU = {"CPU": 1.0, "fake_gpu": 1.0, "memory": 8e9}
GPU4 = {"CPU": 48.0, "GPU": 4.0, "memory": 1.6e11}


def demand(*overrides) -> TrialDemand:
    return trial_demand(load_spec(None, list(overrides)))


def test_what_a_trial_asks_for():
    assert demand() == TrialDemand(trial={"CPU": 1}, workers=0, per_worker={"CPU": 1})  # in-process
    ddp = demand("resources.workers_per_trial=4", "resources.cpus_per_worker=2", "resources.use_gpu=true")
    assert ddp.workers == 4 and ddp.per_worker == {"CPU": 2, "GPU": 1} and ddp.trial["CPU"] == 0
    assert ddp.text() == "4 workers × {CPU: 2, GPU: 1}"


def test_copies_of_a_bundle_a_node_holds():
    assert copies_that_fit({"CPU": 2, "GPU": 1}, GPU4) == 4  # the GPUs run out first
    assert copies_that_fit({"CPU": 1}, HEAD) == 0
    assert copies_that_fit({"CPU": 0, "memory": 1_000_000}, HEAD) >= 1  # a Train trial's own actor fits the head


def test_a_trial_that_fits_is_placed():
    assert never_placed(demand(), [HEAD, CPU2]) is None
    assert never_placed(demand("resources.workers_per_trial=2"), [HEAD, CPU1_FAKE_GPU, CPU2]) is None
    # Two workers of one CPU over two one-CPU nodes: the placement group spreads.
    assert never_placed(demand("resources.workers_per_trial=2"), [HEAD, CPU1_FAKE_GPU, CPU1_FAKE_GPU]) is None
    gpu = demand("resources.workers_per_trial=8", "resources.cpus_per_worker=4", "resources.use_gpu=true")
    assert never_placed(gpu, [HEAD, GPU4, GPU4]) is None


def test_more_workers_than_the_nodes_hold_names_workers_per_trial():
    reason = never_placed(demand("resources.workers_per_trial=4"), [HEAD, CPU1_FAKE_GPU, CPU2])
    assert reason == ("resources.workers_per_trial: a trial asks for 4 workers × {CPU: 1}, and the nodes hold 3 "
                      "such workers at most (3 nodes: {CPU: 0}, {CPU: 1}, {CPU: 2})")


def test_a_worker_larger_than_any_node_names_cpus_per_worker():
    reason = never_placed(demand("resources.workers_per_trial=2", "resources.cpus_per_worker=4"), [HEAD, CPU2, CPU2])
    assert reason.startswith("resources.cpus_per_worker: a trial asks for 2 workers × {CPU: 4}, and no node has "
                             "that much for one worker (3 nodes: {CPU: 0}, 2 × {CPU: 2})")
    in_process = never_placed(demand("resources.cpus_per_worker=3"), [HEAD, CPU2])
    assert in_process == ("resources.cpus_per_worker: a trial asks for {CPU: 3} for its in-process worker, and no "
                          "node has that much (2 nodes: {CPU: 0}, {CPU: 2})")


def test_use_gpu_without_a_gpu_anywhere_names_use_gpu():
    reason = never_placed(demand("resources.use_gpu=true"), [HEAD, CPU1_FAKE_GPU, CPU2])
    assert reason == ("resources.use_gpu: a trial asks for 1 worker × {CPU: 1, GPU: 1}, and no node has a GPU "
                      "(3 nodes: {CPU: 0, GPU: 0}, {CPU: 1, GPU: 0}, {CPU: 2, GPU: 0})")


@pytest.mark.parametrize("node_types, node_groups, expected", [
    # ray start / ray.init() / cluster_utils.Cluster: the read-only provider names each node by its ID.
    (["node_6196a8a68b51e96995a46e18f766d77b9ed8109442053a2acfb347d5", "node_ebc937e8"], [], False),
    ([], [], False),  # nothing published (no autoscaler report yet): not autoscaling
    (["head", "gpu_worker"], [], True),  # ray up cluster.yaml: the launcher config's node types
    (["ray.head.default"], [], True),
    ([], [(0, 8)], True),  # a GCS cluster config (KubeRay, autoscaler v2) with a group that can grow
    ([], [(2, -1)], True),
    ([], [(1, 1), (0, 0)], False),  # fixed-size groups
])
def test_an_autoscaling_cluster_is_told_from_a_fixed_one(node_types, node_groups, expected):
    assert autoscales(node_types=node_types, node_groups=node_groups) is expected
