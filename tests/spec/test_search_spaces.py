"""Every shipped search space loads, validates and plans (no training, no Ray)."""


import pytest

from cbs_ray.search import main
from helpers.paths import ROOT, SEARCH_SPACES

SST2 = ROOT.parent / "shared" / "data" / "sst2"
SPACES = sorted(SEARCH_SPACES.glob("*.yaml"))


def test_there_are_search_spaces():
    assert len(SPACES) >= 3


@pytest.mark.parametrize("path", SPACES, ids=[p.name for p in SPACES])
def test_search_space_validates_and_plans(path, capsys):
    text = path.read_text()
    assert text.startswith("#") and "python -m cbs_ray.search --space search_spaces/" + path.name in text
    if "source: hub" in text:  # hub specs need the network for data; validate the spec alone
        from cbs_ray.spec.load import load_spec

        load_spec(path)
        return
    if "shared/data/sst2/" in text and not SST2.is_dir():
        pytest.skip(f"SST-2 is not at {SST2}")
    assert main(["--space", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert " micro × " in out and " steps" in out


def test_concurrent_trials_follow_the_spec_on_an_autoscaling_cluster():
    """cluster.yaml starts as a CPU-only head: derived from that, the cap would be 1 trial (and the
    autoscaler would add one GPU node); the shipped cluster spec sets 8, which wins."""
    import yaml

    from cbs_ray.tune.search_space import max_concurrent
    from cbs_ray.spec.load import load_spec

    cluster_spec = SEARCH_SPACES / "sst2_bert_base.yaml"
    resources = yaml.safe_load(cluster_spec.read_text())["resources"]
    gpu = ["search.batch_sizes=[256, 512]", "resources.workers_per_trial=4", "resources.cpus_per_worker=4",
           "resources.use_gpu=true"]
    assert resources["max_concurrent_trials"] == 8
    shipped = load_spec(None, gpu + ["resources.max_concurrent_trials=8"])
    assert max_concurrent(shipped, {"CPU": 0}) == 8 and max_concurrent(shipped, {"CPU": 384, "GPU": 32}) == 8
    unset = load_spec(None, gpu)
    assert max_concurrent(unset, {"CPU": 0}) == 1                 # what the cap always was on that cluster
    assert max_concurrent(unset, {"CPU": 96, "GPU": 8}) == 2      # two nodes up: 2 trials of 4 GPUs
    assert max_concurrent(load_spec(None, []), {"CPU": 2}) == 2   # this 2-core box: 2 one-CPU trials
