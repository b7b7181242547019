"""SST-2 from ../shared/data/sst2/ through the shipped space, shrunk (``pytest -m slow``; ~1 min)."""

import json

import pytest

from cbs_ray.search import main
from helpers.paths import ROOT

SST2 = ROOT.parent / "shared" / "data" / "sst2"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not SST2.is_dir(), reason=f"SST-2 is not at {SST2}")]


def test_sst2_search_learns_the_task(tmp_path):
    argv = ["--space", str(ROOT / "search_spaces" / "sst2_tiny_cpu.yaml"), "--output", str(tmp_path / "out")]
    for override in ["search.batch_sizes=[16, 64]", "search.num_trials=3", "training.budget_samples=8192",
                     f"storage_path={tmp_path / 'ray_results'}"]:
        argv += ["--set", override]
    assert main(argv) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    rows = summary["per_batch"]
    assert all(r["eval_examples"] == 8192 for r in summary["trials"])  # selected on the phrases held out
    assert max(r["best_accuracy"] for r in rows) > 0.70  # a 2-layer BERT after 8192 SST-2 phrases
    assert max(r["dev_accuracy"] for r in rows) > 0.70  # on dev.tsv's 872 sentences (chance: 0.51)
    assert summary["critical_batch"]["batch_size"] in (16, 64)
