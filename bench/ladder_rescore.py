"""Re-read stored ladder experiments with ``ladder.predict: loss`` (post hoc, no training): the package's prediction
through the loss beside the power law's, each against the measurement at D (issue 36, fourth session).

    python bench/ladder_rescore.py RUN_DIR [RUN_DIR ...]     # each holding rr/<experiment> (bench --keep RUN_DIR)
"""

import argparse
import glob

from cbs_ray.methods.ladder.reading import summarize_ladder
from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.storage import load_history


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="each holding rr/<experiment>")
    for d in parser.parse_args().run_dirs:
        exp = glob.glob(f"{d}/rr/*")[0]
        meta = ExperimentMeta.read(exp).recorded()
        s = summarize_ladder(load_history(exp), {**meta, "experiment_path": exp, "ladder_predict": "loss"},
                             bootstrap=300)
        v, t, p = s.prediction_validation, s.ladder.through_loss, s.prediction
        if v is None or t is None:
            raise SystemExit(f"error: {exp}: not a validated ladder experiment (ladder.validate)")
        pl = v.power_law_prediction
        print(f"{d}: through the loss {p.b_crit or float('nan'):.1f} {p.interval_90}, measured "
              f"{v.measured_b_crit:.1f}, |log2 err| {v.log2_error}, inside {v.within_interval}; the power law "
              f"{pl.b_crit:.1f} ({pl.log2_error:.2f}); k {t.exponent:.2f}, L(D) {t.loss_at_budget}; "
              f"refusal {p.refusal}")

if __name__ == "__main__":
    main()
