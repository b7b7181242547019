"""How much of a critical-batch answer is noise.

A validation metric measured once carries two kinds of noise: the evaluation set is a sample (an accuracy
p on n examples has a standard error sqrt(p(1-p)/n), 1.3 points for 0.8 on SST-2's 872 dev sentences), and
the training run is one draw over seeds. When either is larger than the turning-point tolerance, the
"critical batch" read from one run per batch size moves with the noise. These functions put a standard
error on each batch size's metric, a range on the turning point, and a plain verdict.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

from cbs_ray.maths.critical_batch import turning_point

__all__ = ["accuracy_standard_error", "mean_and_standard_error", "turning_point_range", "verdict"]


def accuracy_standard_error(accuracy: float, examples: int) -> float:
    """Binomial standard error of an accuracy measured on ``examples`` independent examples."""
    if examples <= 0 or not 0.0 <= accuracy <= 1.0:
        raise ValueError("need examples > 0 and accuracy in [0, 1]")
    return math.sqrt(accuracy * (1.0 - accuracy) / examples)


def mean_and_standard_error(values: Sequence[float], *, eval_se: float = 0.0) -> tuple[float, float]:
    """Mean of repeated runs and its standard error. With one run, the evaluation standard error is all
    there is; with several, the run-to-run spread (which already contains evaluation noise) over √k, and
    never less than the evaluation error over √k."""
    x = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
    if len(x) == 0:
        return math.nan, math.nan
    if len(x) == 1:
        return float(x[0]), float(eval_se)
    spread = float(np.std(x, ddof=1))
    return float(x.mean()), max(spread, eval_se) / math.sqrt(len(x))


def turning_point_range(batch_sizes: Sequence[int], means: Sequence[float], standard_errors: Sequence[float],
                        *, mode: str = "max", tolerance: float = 0.01, relative: bool = True,
                        monotone: bool = False, draws: int = 2000, seed: int = 0,
                        level: float = 0.9) -> dict[str, Any]:
    """The turning point under the noise: redraw each batch size's metric from N(mean, se²), apply the
    rule each time (``monotone``: to the redrawn metrics' monotone fit). Returns the point estimate on the
    means, the central ``level`` range of batch sizes, and how often each batch size came out as the
    turning point."""
    b = list(batch_sizes)
    m = np.asarray(means, dtype=float)
    se = np.nan_to_num(np.asarray(standard_errors, dtype=float), nan=0.0)
    rng = np.random.default_rng(seed)
    drawn = []
    for _ in range(draws):
        sample = m + rng.normal(size=len(m)) * se
        drawn.append(turning_point(b, sample.tolist(), mode=mode, tolerance=tolerance, relative=relative,
                                   monotone=monotone))
    picks = np.asarray(drawn)
    tail = (1.0 - level) / 2
    share = {int(x): float(np.mean(picks == x)) for x in sorted(set(b))}
    return {"batch_size": turning_point(b, m.tolist(), mode=mode, tolerance=tolerance, relative=relative,
                                        monotone=monotone),
            "low": int(np.quantile(picks, tail, method="lower")),
            "high": int(np.quantile(picks, 1 - tail, method="higher")),
            "level": level, "share": share}


def verdict(means: Sequence[float], standard_errors: Sequence[float], *, mode: str = "max",
            tolerance: float = 0.01, relative: bool = True, run_sd: Optional[float] = None,
            repeats: int = 1) -> dict[str, Any]:
    """"resolved" when the noise in a difference between two batch sizes (√2 · the largest standard
    error) is at most half the tolerance in metric units, so a drop of one tolerance is two standard
    errors of a difference away; otherwise "not resolvable" with the repeats needed to get there when
    repeats can (``run_sd``: one run's standard deviation; by default the largest standard error × √repeats)."""
    m = np.asarray(means, dtype=float)
    best = np.nanmax(m) if mode == "max" else np.nanmin(m)
    tolerance_abs = tolerance * abs(best) if relative else tolerance
    errors = np.asarray(standard_errors, dtype=float)
    noise = float(np.nanmax(errors)) if np.isfinite(errors).any() else math.nan
    difference_noise = math.sqrt(2.0) * noise
    resolved = difference_noise <= tolerance_abs / 2
    sd = run_sd if run_sd is not None else noise * math.sqrt(repeats)
    needed = math.ceil((2 * math.sqrt(2.0) * sd / tolerance_abs) ** 2) \
        if tolerance_abs > 0 and math.isfinite(sd) else None  # no standard error at all: no count to give
    out = {"resolved": bool(resolved), "noise": noise, "tolerance_abs": tolerance_abs,
           "repeats": repeats, "repeats_needed": needed}
    if resolved:
        out["text"] = (f"resolved: the noise in a batch-to-batch difference ({difference_noise:.3g}) is at most "
                       f"half the tolerance ({tolerance_abs / 2:.3g})")
    else:
        out["text"] = (f"not resolvable with this evaluation set and these repeats: the noise in a batch-to-batch "
                       f"difference ({difference_noise:.3g}) exceeds half the tolerance ({tolerance_abs / 2:.3g}) — "
                       + (f"use ≥ {needed} repeats, " if needed is not None else "use ")
                       + "a larger evaluation set, or a smoother metric (e.g. eval loss)")
    return out
