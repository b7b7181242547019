"""The ladder's summaries and reports on hand-built histories, one per branch of the reading (validated, refused, no
anchor, ``ladder.predict: loss`` with and without a prediction, LR-weighted steps with tokens, B_simple and a branch
schedule, the average's column with a cap, fitted curves), as the code that wrote ``tests/golden/expected/
ladder_summaries`` wrote them (issue 46: ``LadderSummary`` typed, summary.json and the report byte for byte the same).
Regenerate only on purpose: ``PYTHONPATH=$PWD python tests/golden/make_ladder_summaries.py``;
``test_ladder_summary_types.py`` checks them. No Ray, no torch."""

from __future__ import annotations

import math
import re
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.ladder_curves import history_rows  # noqa: E402

EXPECTED = Path(__file__).resolve().parent / "expected" / "ladder_summaries"
BATCHES = (8, 16, 32, 64)
EVALS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
ROOT2 = sorted({round(128 * 2 ** (k / 2) / 64) * 64 for k in range(15)})
META = {"ladder_batches": list(BATCHES), "ladder_seeds": 2, "ladder_alpha": 0.5, "warmup_fraction": 0.1,
        "budget_samples": 8192, "ladder_stop_samples": 2048, "ladder_evaluations": list(EVALS),
        "ladder_validate": True, "tokens_per_sample": None, "base_lr": 0.002, "base_batch": 16,
        "max_seq_length": 32, "name": "known"}
SCHEDULE = {"experiment": "/x/known-branch-1", "batch_size_schedule": [[0, 8], [1024, 16], [4096, 32]], "alpha": 0.5,
            "peak_lr": 0.001, "warmup_steps": 10, "warmup_samples": 80,
            "validated": {"below_frontier": True, "loss_holds": False}}
BOOTSTRAP = 60
IMAGE = re.compile(r'src="data:image/png;base64,[^"]*"')


def _frame(evaluations=EVALS, **kw) -> pd.DataFrame:
    return pd.DataFrame(history_rows(BATCHES, evaluations, **kw))


def _with_b_simple(frame: pd.DataFrame) -> pd.DataFrame:
    frame["b_simple"] = [r.samples_seen / 100 if r.batch_size == 64 else float("nan") for r in frame.itertuples()]
    return frame


def _ewa(frame: pd.DataFrame) -> pd.DataFrame:
    frame["ewa_eval_loss"] = frame["eval_loss"]
    frame["eval_loss"] = frame["ewa_eval_loss"] + 0.05 * frame["batch_size"].map(math.log2)
    return frame


def cases() -> dict:
    """name → (history, meta, schedule)."""
    flat = dict(gamma=0.0, c=40.0, noise=0.002)
    long = (*EVALS, 32768)
    return {
        "validated": (_frame(), META, None),
        "refused": (_with_b_simple(_frame(**flat)), {**META, "ladder_validate": False, "ladder_rungs_from": 256}, None),
        "no_anchor": (_frame(**flat), {**META, "ladder_rungs_from": 10 ** 9, "max_seq_length": None}, None),
        "predict_loss": (_frame(ROOT2), {**META, "ladder_evaluations": ROOT2, "ladder_predict": "loss"}, None),
        "predict_loss_refused": (_frame(), {**META, "ladder_predict": "loss"}, None),
        "lr_weighted": (_with_b_simple(_frame()), {**META, "ladder_step_count": "lr_weighted", "tokens_per_sample": 32,
                                                   "ladder_warmup_steps": {"8": 26, "16": 13, "32": 8, "64": 8},
                                                   "experiment_path": "/x/known-ladder-1"}, SCHEDULE),
        "ewa_capped": (_ewa(_frame(long)), {**META, "ladder_evaluations": list(long), "ladder_reading": "ewa",
                                            "ladder_metric": "eval_loss", "ladder_cap": 4.0, "ladder_run_stop": 32768,
                                            "name": None}, None),
        "fit_curve": (_frame(noise=0.002), {**META, "ladder_curve": "fit", "ladder_rungs_from": 256}, None),
    }


def written(summary, out: Path) -> dict[str, str]:
    """summary.json, report.md and report.html (its plot's bytes left out) as ``write_ladder_report`` writes them."""
    from cbs_ray.methods.ladder.report import write_ladder_report

    write_ladder_report(summary, pd.DataFrame(), out)
    return {"summary.json": (out / "summary.json").read_text(), "report.md": (out / "report.md").read_text(),
            "report.html": IMAGE.sub('src="data:image/png;base64,<PLOT>"', (out / "report.html").read_text())}


def main() -> None:
    from cbs_ray.methods.ladder.reading import summarize_ladder

    EXPECTED.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (frame, meta, schedule) in cases().items():
            summary = summarize_ladder(frame, meta, bootstrap=BOOTSTRAP, schedule=schedule)
            for file, text in written(summary, Path(tmp) / name).items():
                (EXPECTED / f"{name}.{file}").write_text(text)
            print(name)


if __name__ == "__main__":
    main()
