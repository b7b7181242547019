"""Every shipped search space loads, validates and plans (no training, no Ray)."""

from pathlib import Path

import pytest

from cbs_ray.search import main

SST2 = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "sst2"
SPACES = sorted((Path(__file__).parent.parent / "search_spaces").glob("*.yaml"))


def test_there_are_search_spaces():
    assert len(SPACES) >= 3


@pytest.mark.parametrize("path", SPACES, ids=[p.name for p in SPACES])
def test_search_space_validates_and_plans(path, capsys):
    text = path.read_text()
    assert text.startswith("#") and "python -m cbs_ray.search --space search_spaces/" + path.name in text
    if "source: hub" in text:  # hub specs need the network for data; validate the spec alone
        from cbs_ray.spec import load_spec

        load_spec(path)
        return
    if "shared/data/sst2/" in text and not SST2.is_dir():
        pytest.skip(f"SST-2 is not at {SST2}")
    assert main(["--space", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert " micro × " in out and " steps" in out
