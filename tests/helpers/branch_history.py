"""A branch experiment's history built by hand (a trunk at B=16 and branches at 32, 64, 128 from three
checkpoints), the answers the branch tests check beside it; the ladder's tests read it as a branch experiment
of the same spec."""

import math

import pandas as pd

TRUNK, BUDGET, WINDOW, TOL = 16, 8192, 1024, 0.01
CHECKPOINTS = (1024, 2048, 4096)
BATCHES = (32, 64, 128)
# The trunk's eval loss every 1024 samples: the branches from 1024, 2048 and 4096 end at 2048 (4.0), 3072 (3.5)
# and 5120 (3.2); the trunk improved over those windows by 1.0, 0.5 and 0.1 (all ≥ 2ε = 0.02: resolvable).
TRUNK_LOSS = {1024: 5.0, 2048: 4.0, 3072: 3.5, 4096: 3.3, 5120: 3.2, 6144: 3.1, 7168: 3.05, 8192: 3.0}
B_SIMPLE = {1024: math.nan, 2048: 20.0, 3072: 30.0, 4096: 40.0, 5120: 50.0, 6144: 60.0, 7168: 70.0, 8192: 80.0}


def trunk_rows(losses=TRUNK_LOSS):
    return [{"trial_id": "trunk", "role": "trunk", "start_samples": 0, "samples_seen": s, "steps": s // TRUNK,
             "batch_size": TRUNK, "alpha": 0.75, "peak_lr": 1e-3, "eval_loss": loss, "b_simple": B_SIMPLE[s],
             "diverged": False, "seed_offset": 0} for s, loss in losses.items()]


def branch_rows(losses, alphas=(0.5,)):
    """``losses``: {(start, batch): loss or a tuple (one per alpha) or a list (one per seed)}; None: diverged.
    Each branch reports once, at start + window."""
    rows = []
    for (start, batch), value in losses.items():
        runs = ([(a, 0, v) for a, v in zip(alphas, value)] if isinstance(value, tuple) else
                [(alphas[0], s, v) for s, v in enumerate(value)] if isinstance(value, list) else [(alphas[0], 0, value)])
        for alpha, seed, loss in runs:
            rows.append({"trial_id": f"b{start}_{batch}_{alpha}_{seed}", "role": "branch", "start_samples": start,
                         "samples_seen": start + WINDOW, "steps": WINDOW // batch, "batch_size": batch,
                         "alpha": alpha, "peak_lr": 1e-3 * (batch / TRUNK) ** alpha, "seed_offset": seed,
                         "eval_loss": math.inf if loss is None else loss, "b_simple": math.nan,
                         "diverged": loss is None})
    return rows


# At 1024 (trunk 4.0): B=32 at 3.95 beats the trunk; B=64 at 3.97 is within ε of the trunk (4.01) but not of
# B=32 (3.96): it fails, where comparing with the trunk alone would pass it. B=128 fails -> CBS 32, [32, 64].
# At 2048 (trunk 3.5): B=32 3.50, B=64 3.505, B=128 3.502 all within ε of the best smaller -> CBS ≥ 128.
# At 4096 (trunk 3.2): B=32 3.20, B=64 3.205 pass, B=128 at 3.25 (+0.05 over 3.20) fails -> CBS 64, [64, 128]:
# a decrease from 128, beyond the noise (B=128 passed by 0.008 at 2048, failed by 0.04 at 4096: neither within
# half of ε of the line).
LOSSES = {(1024, 32): 3.95, (1024, 64): 3.97, (1024, 128): 4.5,
          (2048, 32): 3.50, (2048, 64): 3.505, (2048, 128): 3.502,
          (4096, 32): 3.20, (4096, 64): 3.205, (4096, 128): 3.25}


def history(losses=LOSSES, schedule=(), alphas=(0.5,), trunk=TRUNK_LOSS):
    return pd.DataFrame(trunk_rows(trunk) + branch_rows(losses, alphas) + list(schedule))


META = {"trunk_batch": TRUNK, "window_samples": WINDOW, "checkpoints": list(CHECKPOINTS),
        "branch_batches": list(BATCHES), "alphas": [0.5], "tolerance": TOL, "budget_samples": BUDGET,
        "tokens_per_sample": None, "metric": "eval_loss", "trunk_peak_lr": 1e-3, "name": "tiny",
        "tolerance_relative": False, "deviations": ["the eval loss at t + Δ (the paper: EMA train loss)"]}
