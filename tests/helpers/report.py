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
