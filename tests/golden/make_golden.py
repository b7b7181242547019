"""Write the golden experiments and what today's code reports of them (issue 35: behaviour stays the same
through the driver's refactor; floats to ``tests/helpers/tolerant.py``'s tolerance, issue 47). Run once, from the repository root, with the code whose outputs are the
reference: ``PYTHONPATH=$PWD python tests/golden/make_golden.py``; ``test_golden_reports.py`` then checks every
later change against them.

Three small stored experiments, each a directory as Tune leaves it (one ``result.json`` per trial, cbs-ray's
``cbs_spec.json``; no Tune state, so the report reads the trials' own files): a from-scratch search (the
reporter's known B_crit = 128), a branch search with its schedule run (the branch tests' history), and a ladder
of the same spec name and data fingerprint beside it, which carries the branch search's schedule. Their
``cbs_spec.json`` name the experiments' folder ``<EXPERIMENTS>``, which the test replaces by where it copies
them. The expected outputs are ``summary.json``, ``report.md`` and the printed answer of ``python -m
cbs_ray.report``, with the copies' folder written ``<EXPERIMENTS>`` and the report's ``<OUT>``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: the helpers

from helpers.branch_history import META as BRANCH_META  # noqa: E402
from helpers.branch_history import history as branch_history  # noqa: E402
from helpers.ladder_curves import history_rows  # noqa: E402
from helpers.report import BUDGET as SCRATCH_BUDGET  # noqa: E402
from helpers.report import history as scratch_history  # noqa: E402

EXPERIMENTS = HERE / "experiments"
EXPECTED = HERE / "expected"
PLACEHOLDER = "<EXPERIMENTS>"
NAMES = {"scratch": "golden-scratch-20260101-000000", "branch": "golden-branch-20260101-000000",
         "ladder": "golden-ladder-20260101-000000"}
"""Each method's stored experiment; the branch search's schedule run is ``<branch>-schedule``."""
FINGERPRINT = "0123456789abcdef"


def _write_trials(folder: Path, frame, config_keys: tuple = ()) -> None:
    folder.mkdir(parents=True)
    for trial_id, rows in frame.groupby("trial_id", sort=True):
        trial = folder / f"{trial_id}"
        trial.mkdir()
        lines = []
        for row in rows.sort_values("samples_seen").to_dict("records"):
            row = {k: v for k, v in row.items() if not (isinstance(v, float) and v != v)}  # NaN: not reported
            row["config"] = {k: row[k] for k in config_keys if k in row}
            lines.append(json.dumps(row, sort_keys=True))
        (trial / "result.json").write_text("\n".join(lines) + "\n")


def _write_meta(folder: Path, meta: dict) -> None:
    (folder / "cbs_spec.json").write_text(json.dumps(meta, indent=2, sort_keys=True))


def _spec(overrides: list[str]) -> dict:
    from cbs_ray.spec.load import load_spec, spec_to_dict

    return spec_to_dict(load_spec(None, ["name=golden", *overrides]))


def write_experiments() -> None:
    import pandas as pd

    from helpers.branch_history import BUDGET, TRUNK

    if EXPERIMENTS.exists():
        shutil.rmtree(EXPERIMENTS)
    # From scratch: accuracy, B_crit = 128.
    scratch = EXPERIMENTS / NAMES["scratch"]
    _write_trials(scratch, scratch_history(), ("batch_size", "alpha", "warmup_fraction"))
    _write_meta(scratch, {"name": "golden-scratch", "metric": "accuracy", "mode": "max",
                          "budget_samples": SCRATCH_BUDGET, "tolerance": 0.01, "format": 2,
                          "data_fingerprint": FINGERPRINT,
                          "spec": _spec([f"training.budget_samples={SCRATCH_BUDGET}", "search.metric=accuracy",
                                         "search.mode=max"])})
    # Branch mode: the trunk and branches, and the schedule run with its controls.
    sys.path.insert(0, str(HERE.parent / "analysis"))
    from test_branching import validation_rows

    branch = EXPERIMENTS / NAMES["branch"]
    _write_trials(branch, branch_history(), ("role", "start_samples", "alpha", "seed_offset"))
    schedule = EXPERIMENTS / f"{NAMES['branch']}-schedule"
    _write_trials(schedule, pd.DataFrame(validation_rows()), ("role", "alpha", "seed_offset", "control"))
    _write_meta(branch, {**BRANCH_META, "name": "golden", "method": "branch", "mode": "min", "format": 2,
                         "data_fingerprint": FINGERPRINT, "checkpoint_dir": f"{PLACEHOLDER}/{NAMES['branch']}/"
                                                                             "trunk_checkpoints",
                         "schedule_experiment": f"{PLACEHOLDER}/{NAMES['branch']}-schedule",
                         "schedule": {"batch_size_schedule": [[0, 32], [4096, 64]], "alpha": 0.5},
                         "spec": _spec(["search.method=branch", f"training.budget_samples={BUDGET}",
                                        "search.metric=eval_loss", "search.mode=min",
                                        f"branch.trunk_batch_size={TRUNK}"])})
    # The ladder: B_crit(D) = 2·D^0.5 exactly, its validation's runs to 2·D; same name and data as the branch's.
    batches, evaluations = (8, 16, 32, 64), (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
    ladder = EXPERIMENTS / NAMES["ladder"]
    _write_trials(ladder, pd.DataFrame(history_rows(batches, evaluations, noise=0.002)), ("batch_size",))
    _write_meta(ladder, {"name": "golden", "method": "ladder", "metric": "eval_loss", "mode": "min", "format": 2,
                         "ladder_batches": list(batches), "ladder_seeds": 2, "ladder_alpha": 0.5,
                         "warmup_fraction": 0.1, "budget_samples": BUDGET, "ladder_stop_samples": 2048,
                         "ladder_evaluations": list(evaluations), "ladder_validate": True, "tokens_per_sample": None,
                         "ladder_rungs_from": 256, "ladder_curve": "interpolate", "base_lr": 0.002, "base_batch": 16,
                         "max_seq_length": 32, "data_fingerprint": FINGERPRINT,
                         "spec": _spec(["search.method=ladder", f"training.budget_samples={BUDGET}",
                                        "search.metric=eval_loss", "search.mode=min",
                                        "search.batch_sizes=[8,16,32,64]", "ladder.validate=true"])})


def copy_experiments(to: Path) -> Path:
    """The stored experiments copied into ``to``, their metadata naming where they now are."""
    shutil.copytree(EXPERIMENTS, to)
    for meta in to.glob("*/cbs_spec.json"):
        meta.write_text(meta.read_text().replace(PLACEHOLDER, str(to)))
    return to


def reported(method: str, experiments: Path, out: Path) -> dict[str, str]:
    """``python -m cbs_ray.report`` of the method's stored experiment (copied to ``experiments``), written to
    ``out``: {file name: its text}, the copies' folder and ``out`` replaced by placeholders."""
    import contextlib
    import io

    from cbs_ray.cli import report_main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = report_main([str(experiments / NAMES[method]), "--output", str(out)])
    assert code == 0, f"the report of the {method} experiment exited {code}"

    def neutral(text: str) -> str:
        return text.replace(str(out), "<OUT>").replace(str(experiments), PLACEHOLDER)

    return {"stdout.txt": neutral(printed.getvalue()),
            **{name: neutral((out / name).read_text()) for name in ("summary.json", "report.md")}}


def main() -> None:
    import tempfile

    write_experiments()
    if EXPECTED.exists():
        shutil.rmtree(EXPECTED)
    with tempfile.TemporaryDirectory() as tmp:
        experiments = copy_experiments(Path(tmp) / "experiments")
        for method in NAMES:
            folder = EXPECTED / method
            folder.mkdir(parents=True)
            for name, text in reported(method, experiments, Path(tmp) / f"out-{method}").items():
                (folder / name).write_text(text)
            print(f"{method}: {folder}")


if __name__ == "__main__":
    main()
