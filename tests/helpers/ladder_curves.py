"""Learning curves whose critical batch is known: B_crit(D) = c · D^γ exactly (McCandlish et al.'s
S(B) = S_min + E_min/B at every D), for the ladder's tests."""

import math


def samples_needed(batch: int, d: float, *, reference: int, c: float, gamma: float) -> float:
    """Samples batch ``batch`` needs to reach the reference batch's loss at ``d``: E_B(D) = B · S_B(D) with
    S_B = S_min + E_min/B, B_crit = E_min/S_min = c·D^γ, and S_ref(D) = D / reference (the reference reaches
    its own loss at D): E_B(D) = D (B + B_crit) / (B_crit + reference)."""
    b_crit = c * d ** gamma
    return d * (batch + b_crit) / (b_crit + reference)


def loss_at(batch: int, samples: float, *, reference: int, c: float, gamma: float, a: float = 6.0,
            p: float = 0.2) -> float:
    """The loss batch ``batch`` has after ``samples``: the reference's a·D^−p at the D whose target it reaches
    then (E_B(D) = samples, solved by bisection on log D)."""
    lo, hi = math.log(1e-3), math.log(1e12)
    for _ in range(200):
        mid = (lo + hi) / 2
        if samples_needed(batch, math.exp(mid), reference=reference, c=c, gamma=gamma) < samples:
            lo = mid
        else:
            hi = mid
    return a * math.exp((lo + hi) / 2) ** -p


def history_rows(batches, evaluations, *, seeds=2, c=2.0, gamma=0.5, noise=0.0):
    """Reports of every (batch, seed) run at ``evaluations``, as the history holds them."""
    rows = []
    for b in batches:
        for s in range(seeds):
            for e in evaluations:
                jitter = noise * (1 if (s + e // 128) % 2 else -1)
                rows.append({"trial_id": f"B{b}_s{s}", "batch_size": b, "samples_seen": e, "steps": e // b,
                             "eval_loss": loss_at(b, e, reference=min(batches), c=c, gamma=gamma) + jitter,
                             "diverged": False})
    return rows
