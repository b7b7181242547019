"""A hand-built history with a known answer (B_crit = 128), for the reporter's tests."""

import pandas as pd

BUDGET = 65536  # every batch reaches 0.8 (at 100·B + 12800 samples) and the 0.9 cap within it


def history(batches=(16, 32, 64, 128, 256), target_steps=None):
    """One trial per batch whose accuracy rises linearly in samples, reaching 0.8 after
    S(B)·B samples with S(B) = 100 + 12800/B (B_crit = 128), then continuing to the budget."""
    rows = []
    for b in batches:
        samples_to_08 = (100 + 12800 / b) * b
        for k in range(1, BUDGET // 1024 + 1):
            s = 1024 * k
            rows.append({"trial_id": f"t{b}", "batch_size": b, "alpha": 0.5, "warmup_fraction": 0.1,
                         "peak_lr": 1e-3 * (b / 16) ** 0.5, "samples_seen": s,
                         "accuracy": min(0.9, 0.5 + 0.3 * s / samples_to_08), "wall_time_s": s / (100 * b ** 0.5),
                         "samples_per_s": 100 * b ** 0.5, "diverged": False})
    return pd.DataFrame(rows)


# ---- issue 28: perplexity runs, repeats and seeds --------------------------------------------------------

SEEDS = {8: (0.625, 0.075), 16: (0.625, 0.1)}
"""The (alpha, warmup) a search over the default ranges seeds B=8 and B=16 with (B0 = 16)."""


def perplexity_run(tid, batch, ppl, *, alpha=0.625, warmup=0.1, per_s=100.0, reports=(512, 1024), repeat=False):
    """A perplexity run reporting at ``reports`` (its first at 1.2 × the final figure), budget 1024."""
    return [{"trial_id": tid, "batch_size": batch, "alpha": alpha, "warmup_fraction": warmup, "peak_lr": 1e-3,
             "samples_seen": s, "perplexity": ppl * (1.2 if s < 1024 else 1.0), "wall_time_s": s / per_s,
             "samples_per_s": per_s, "diverged": False, "repeat": repeat} for s in reports]


def issue_28_repeats() -> pd.DataFrame:
    """The issue's B=8: the search's best trial 4.951, its two repeats 4.854 (the fastest run) and 4.904 (mean
    4.903); B=16 worse."""
    return pd.DataFrame(
        perplexity_run("s8", 8, 4.951) + perplexity_run("r8a", 8, 4.854, per_s=120.0, repeat=True)
        + perplexity_run("r8b", 8, 4.904, repeat=True) + perplexity_run("s16", 16, 5.6, per_s=200.0)
        + perplexity_run("r16a", 16, 5.5, per_s=200.0, repeat=True)
        + perplexity_run("r16b", 16, 5.7, per_s=200.0, repeat=True))
