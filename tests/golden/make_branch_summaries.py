"""Branch mode's summaries and reports on hand-built histories, one per branch of the reading (a validated schedule
with its controls read off the runs, controls from a from-scratch search with a recorded margin, an older
experiment's relative ε and ``while_safe`` rule with a token budget, the EMA training loss with the fitted rule,
repeats over two alphas with the seesaw rule, a trunk alone), as the code that wrote ``tests/golden/expected/
branch_summaries`` wrote them (issue 46: ``BranchSummary`` typed, branch mode's recorded settings read once;
summary.json and the report byte for byte the same). Regenerate only on purpose:
``PYTHONPATH=$PWD python tests/golden/make_branch_summaries.py``; ``test_branch_summary_types.py`` checks them.
No Ray, no torch."""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.branch_history import BUDGET, META, TRUNK_LOSS, branch_rows, history, trunk_rows  # noqa: E402

EXPECTED = Path(__file__).resolve().parent / "expected" / "branch_summaries"
IMAGE = re.compile(r'src="data:image/png;base64,[^"]*"')
SCRATCH = "/x/known-scratch-1"
CONFIGS = [{"batch_size": 16, "alpha": 0.5, "warmup_fraction": 0.05, "source": SCRATCH},
           {"batch_size": 32, "alpha": 0.75, "warmup_fraction": 0.1, "source": SCRATCH},
           {"batch_size": 64, "alpha": 0.5, "warmup_fraction": 0.1, "source": SCRATCH},
           {"batch_size": 128, "alpha": 0.5, "warmup_fraction": None, "source": "trunk"}]


def _run(control, batch, seed, loss, steps) -> dict:
    return {"trial_id": f"{control}{batch}_{seed}", "role": "schedule", "start_samples": 0, "samples_seen": BUDGET,
            "steps": steps, "batch_size": batch, "alpha": 0.5, "eval_loss": loss, "diverged": False,
            "control": control, "seed_offset": seed}


def validation_rows() -> list[dict]:
    """A schedule validation's runs (``tests/analysis/test_branching.validation_rows``)."""
    rows = [_run("schedule", 128, s, v, 144) for s, v in enumerate((3.00, 3.02, 3.01))]
    rows += [_run("small", 16, s, v, 512) for s, v in ((1, 3.02), (2, 3.01))]
    rows += [_run("large", 128, s, v, 64) for s, v in enumerate((3.10, 3.12, 3.11))]
    rows += [_run("iso_steps", 32, s, v, 256) for s, v in enumerate((3.00, 3.01, 3.02))]
    rows += [_run("iso_steps", 64, s, v, 128) for s, v in enumerate((3.03, 3.04, 3.05))]
    return rows


def _with_ema(frame: pd.DataFrame) -> pd.DataFrame:
    frame["train_loss_ema"] = frame["eval_loss"] + 0.5
    frame.loc[frame["trial_id"] == "b1024_64_0.5_0", "train_loss_ema"] = 3.9 + 0.5
    return frame


def _repeats() -> pd.DataFrame:
    losses = {(1024, 16): [None, 4.02, 3.98], (1024, 32): [3.95, 3.96, 3.94], (1024, 64): [3.96, 3.98, 3.97],
              (1024, 128): [4.5, 4.6, 4.4], (2048, 32): [3.5, 3.51, 3.49], (2048, 64): [3.505, 3.5, 3.51],
              (2048, 128): [3.502, 3.6, 3.55]}
    rows = [r for r in branch_rows(losses) if not (r["batch_size"] == 16 and r["seed_offset"] == 0)]
    rows += branch_rows({(4096, 32): (3.2, 3.21), (4096, 64): (3.205, 3.3), (4096, 128): (3.25, 3.22)},
                        alphas=(0.5, 1.0))
    return pd.DataFrame(trunk_rows() + rows)


def cases() -> dict:
    """name → (history, meta)."""
    old = {k: v for k, v in META.items() if k not in ("tolerance_relative", "deviations")}
    return {
        "validated": (_with_ema(history(schedule=validation_rows())), {**META, "warmup_fraction": 0.1}),
        "controls_from": (history(schedule=validation_rows()),
                          {**META, "warmup_fraction": 0.1, "experiment_path": "/x/known-branch-1", "name": None,
                           "schedule": {"margin": 0.02, "controls_from": SCRATCH, "control_configurations": CONFIGS,
                                        "experiment": "/x/known-branch-1-schedule"}}),
        "old_relative_tokens": (history(), {**old, "tokens_per_sample": 128, "tolerance": 0.002}),
        "train_ema_fitted": (_with_ema(history()), {**META, "loss": "train_ema", "schedule_rule": "fitted",
                                                    "trunk_peak_lr": 2e-3}),
        "repeats_seesaw": (_repeats(), {**META, "repeats": 3, "alphas": [0.5, 1.0], "trunk_alpha": 0.75,
                                        "schedule_rule": "seesaw", "lr_decay": "cosine", "warmup_fraction": 0.05,
                                        "tolerance_relative": True}),
        "no_alphas_unresolvable": (history(trunk={**TRUNK_LOSS, 4096: 3.215}),
                                   {**{k: v for k, v in META.items() if k != "alphas"},
                                    "schedule_rule": "once_per_crossing", "deviations": []}),
        "trunk_only": (pd.DataFrame(trunk_rows()),
                       {**{k: v for k, v in META.items() if k not in ("trunk_peak_lr", "name")}, "alphas": []}),
    }


def written(summary, history: pd.DataFrame, out: Path) -> dict[str, str]:
    """summary.json, report.md and report.html (its plots' bytes left out) as ``write_branch_report`` writes them."""
    from cbs_ray.methods.branch.report import write_branch_report

    write_branch_report(summary, history, out)
    return {"summary.json": (out / "summary.json").read_text(), "report.md": (out / "report.md").read_text(),
            "report.html": IMAGE.sub('src="data:image/png;base64,<PLOT>"', (out / "report.html").read_text())}


def main() -> None:
    from cbs_ray.methods.branch.reading import summarize_branches

    EXPECTED.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (frame, meta) in cases().items():
            for file, text in written(summarize_branches(frame, meta), frame, Path(tmp) / name).items():
                (EXPECTED / f"{name}.{file}").write_text(text)
            print(name)


if __name__ == "__main__":
    main()
