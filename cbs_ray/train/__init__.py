"""One trial: its config and run plan, the Tune trainable, the per-worker loop and its parts (set-up, probes,
checkpoints, sessions, optimizer, gauges)."""
