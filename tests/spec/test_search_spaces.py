"""Every shipped search space loads, validates and plans (no training, no Ray)."""


import pytest

from cbs_ray.search import main
from helpers.paths import ROOT, SEARCH_SPACES

SST2 = ROOT.parent / "shared" / "data" / "sst2"
SPACES = sorted(SEARCH_SPACES.glob("*.yaml"))


def test_there_are_search_spaces():
    assert len(SPACES) >= 3


def streamed_corpus(text: str, tmp_path) -> list[str]:
    """A space streaming Parquet shards names a folder the user writes first: the test writes a small corpus
    (bench/write_markov_parquet.py) and points the space there."""
    if "source: parquet" not in text:
        return []
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from write_markov_parquet import write_corpus

    write_corpus(tmp_path / "corpus", shards=2, rows=512, length=64, eval_rows=512)
    return ["--set", f"data.path={tmp_path / 'corpus'}"]


@pytest.mark.parametrize("path", SPACES, ids=[p.name for p in SPACES])
def test_search_space_validates_and_plans(path, capsys, tmp_path):
    text = path.read_text()
    assert text.startswith("#") and "python -m cbs_ray.search --space search_spaces/" + path.name in text
    if "source: hub" in text:  # hub specs need the network for data; validate the spec alone
        from cbs_ray.spec.load import load_spec

        load_spec(path)
        return
    if "shared/data/sst2/" in text and not SST2.is_dir():
        pytest.skip(f"SST-2 is not at {SST2}")
    assert main(["--space", str(path), "--dry-run", *streamed_corpus(text, tmp_path)]) == 0
    out = capsys.readouterr().out
    assert " micro × " in out and " steps" in out


def test_concurrent_trials_follow_the_spec_on_an_autoscaling_cluster():
    """cluster.yaml starts as a CPU-only head: derived from that, the cap would be 1 trial (and the
    autoscaler would add one GPU node); the shipped cluster spec sets 8, which wins."""
    import yaml

    from cbs_ray.spec.load import load_spec
    from cbs_ray.tune.search_space import max_concurrent

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


def header_commands(text: str) -> list[list[str]]:
    """The ``python -m cbs_ray.search …`` commands a space's header shows, continuation lines joined and each
    line's trailing comment dropped, as argument lists after the module."""
    import shlex

    commands, current = [], None
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        body = line[1:].split("  #")[0].strip()
        if current is None and body.startswith("python -m cbs_ray.search"):
            current = body[len("python -m cbs_ray.search"):]
        elif current is not None:
            current += " " + body
        else:
            continue
        if current.endswith("\\"):
            current = current[:-1]
        else:
            commands.append(shlex.split(current))
            current = None
    return commands


def test_header_commands_are_read_whole():
    text = "# a\n#   python -m cbs_ray.search --space x.yaml --address auto \\\n#       --set a=1      # why\n"
    assert header_commands(text) == [["--space", "x.yaml", "--address", "auto", "--set", "a=1"]]


@pytest.mark.parametrize("path", SPACES, ids=[p.name for p in SPACES])
def test_every_header_command_passes_its_dry_run(path, capsys, tmp_path):
    """What a space's header tells a user to type is valid: its dry run passes (a hub space, which needs the
    network for its data, is validated with the command's settings instead). The GPU branch space's storage
    line was once ``s3://…``, which branch mode refuses."""
    from cbs_ray.spec.load import load_spec

    text = path.read_text()
    commands = header_commands(text)
    assert commands, path.name
    for args in commands:
        args = [a for i, a in enumerate(args) if a != "--address" and (i == 0 or args[i - 1] != "--address")]
        if "shared/data/sst2/" in text and not SST2.is_dir():
            pytest.skip(f"SST-2 is not at {SST2}")
        if "source: hub" in text:
            sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
            flags = {"--validate-schedule": "branch.validate_schedule=true"}
            load_spec(path, sets + [flags[a] for a in args if a in flags])
            continue
        assert main([*args, "--dry-run", *streamed_corpus(text, tmp_path)]) == 0, (path.name, args)
        capsys.readouterr()
