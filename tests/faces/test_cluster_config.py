"""cluster.yaml is checked against Ray's own cluster-launcher schema (no cloud account needed)."""


import yaml

from helpers.paths import ROOT

CLUSTER = ROOT / "cluster.yaml"


def test_cluster_yaml_matches_rays_schema():
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load(CLUSTER.read_text())
    # What `ray up` does before launching: merge the provider's defaults, then validate against the
    # launcher's JSON schema; raises on anything Ray would refuse.
    validate_config(prepare_config(config))


def test_cluster_pins_a_ray_of_the_projects_range_and_keeps_the_dashboard_local():
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from cbs_ray.ray_internals import SUPPORTED_RAY

    config = yaml.safe_load(CLUSTER.read_text())
    image = config["docker"]["image"]
    assert image.startswith("rayproject/ray:")
    assert Version(image.split(":")[1].split("-")[0]) in SpecifierSet(SUPPORTED_RAY)
    head = " ".join(config["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head


def test_every_node_gets_the_callers_auth_token():
    # `ray start` on each node finds it and turns token authentication on; README's `RAY_AUTH_MODE=token ray
    # job submit` and the dashboard use the same token (issue 20).
    config = yaml.safe_load(CLUSTER.read_text())
    assert config["file_mounts"]["/home/ray/.ray/auth_token"] == "~/.ray/auth_token"
