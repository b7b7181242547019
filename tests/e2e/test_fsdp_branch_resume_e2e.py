"""Branch mode under FSDP (issue 51) cut by Ctrl-C and resumed: the tiny causal LM's branch search, every run a Ray
Train run of two gloo workers sharding the model (``training.parallelism: fsdp``). Ctrl-C lands in the driver at
the trunk's report at its branch point; ``resume_search`` finishes it: the trunk continues from its own gathered
checkpoint, the branch starts from the trunk's published one, and every trial runs once (no milestone reported
twice). The trunk-to-branch restore itself is compared with DDP's in ``tests/train/test_fsdp_branch.py``."""

from pathlib import Path

import pytest

from cbs_ray.records.storage import load_history, read_meta
from cbs_ray.spec.load import load_spec
from helpers.ctrl_c import cut_by_ctrl_c

# ≈ 60-90 s on 2 cores: the slow tier.
pytestmark = pytest.mark.slow

LM = "search_spaces/tiny_causal_lm.yaml"
FSDP_BRANCH = ["search.method=branch", "training.budget_samples=1024", "training.eval_every_samples=512",
               "search.batch_sizes=[8, 16]", "branch.trunk_batch_size=8", "branch.checkpoints=[0.5]",
               "branch.window=0.25", "branch.batch_sizes=[16]", "branch.window_min_steps=4",
               "data.builtin_train_examples=1024", "data.builtin_eval_examples=64",
               "asha.grace_period_samples=512", "resources.workers_per_trial=2", "training.parallelism=fsdp"]
"""A trunk at B=8 to 1024 samples, its checkpoint at 512, one branch at 16 from it for 256 samples."""


def test_a_branch_search_under_fsdp_cut_by_ctrl_c_resumes_with_every_trial_once(tmp_path, shared_ray, monkeypatch,
                                                                                capsys):
    from cbs_ray import resume_search, run_search

    spec = load_spec(LM, FSDP_BRANCH + [f"storage_path={tmp_path / 'ray_results'}"])
    marker = str(tmp_path / "interrupted")
    path = cut_by_ctrl_c(monkeypatch, marker, lambda: run_search(spec, output_dir=str(tmp_path / "out"), verbose=0),
                         lambda config, result: config.get("role") == "trunk" and result.get("samples_seen") == 512)
    assert Path(marker).is_file() and not (tmp_path / "out" / "summary.json").exists()
    assert read_meta(path)["spec"]["training"]["parallelism"] == "fsdp"
    before = load_history(path)
    assert before.loc[before["role"] == "trunk", "samples_seen"].max() < 1024 or \
        before[before["role"] == "branch"].empty  # cut before the search was done

    capsys.readouterr()
    result = resume_search(path, output_dir=str(tmp_path / "resumed"), verbose=0)
    assert f"resuming {path}" in capsys.readouterr().out
    history = result.history
    print(f"cut at: {Path(marker).read_text().strip()}; before the resume {len(before)} reports; after, runs "
          f"continued from a checkpoint of their own: {sorted(history['resumed_from_samples'].fillna(0).unique())}")
    roles = history.groupby("trial_id")["role"].first()
    assert sorted(roles) == ["branch", "trunk"]  # every trial once: one trunk, one branch
    assert not history.duplicated(["trial_id", "samples_seen"]).any()  # no milestone reported twice
    assert history.loc[history["role"] == "trunk", "samples_seen"].max() == 1024
    branch = history[history["role"] == "branch"]
    assert branch["start_samples"].iloc[0] == 512 and branch["samples_seen"].max() == 768
    assert (history["workers"] == 2).all() and history["eval_loss"].notna().all()
    assert (tmp_path / "resumed" / "summary.json").is_file()
