"""Branch mode's recommended batch-size schedule as each trainer writes it (the report's "Use it" section):
OLMo-core's ``BatchSizeSchedulerCallback``, Levanter's ``train_batch_size`` schedule, Megatron-LM's
``--step-batch-size-schedule`` and ``cbs_ray.integrations`` for HF Trainer, Lightning and plain loops."""

from __future__ import annotations

from cbs_ray.methods.branch.reading import BranchSummary
from cbs_ray.methods.branch.reading_schedule import schedule_in_tokens, schedule_steps, schedule_total_steps

__all__ = ["trainer_snippets"]


def _olmo_core(summary: BranchSummary) -> str:
    if summary.tokens_per_sample:
        pairs = schedule_in_tokens(summary.batch_size_schedule, summary.tokens_per_sample)
        sizes = ", ".join(str(b) for _, b in pairs)
        starts = ", ".join(f"Duration.tokens({s})" for s, _ in pairs)
    else:
        sizes = ", ".join(f"{b} * SEQUENCE_LENGTH" for _, b in summary.batch_size_schedule)
        starts = ", ".join(f"Duration.tokens({s} * SEQUENCE_LENGTH)" if s else "Duration.tokens(0)"
                           for s, _ in summary.batch_size_schedule)
    return ("from olmo_core.train import Duration\n"
            "from olmo_core.train.callbacks import BatchSizeSchedulerCallback\n\n"
            "# global batch sizes in tokens; OLMo-core multiplies the LR by sqrt(new / old) at each change\n"
            "# (the alpha = 0.5 rule); the LR scheduler must count in tokens (units: tokens, or t_max)\n"
            "# so that the schedule's shape does not move when the batch changes\n"
            "trainer_config = trainer_config.with_callback(\n"
            "    \"batchwup\",\n"
            "    BatchSizeSchedulerCallback(\n"
            f"        batch_sizes=[{sizes}],\n"
            f"        schedule=[{starts}],\n"
            "    ),\n)\n")


def _levanter(summary: BranchSummary) -> str:
    steps = schedule_steps(summary.batch_size_schedule)
    total = schedule_total_steps(summary.batch_size_schedule, summary.budget_samples)
    lines = ["trainer:", f"  num_train_steps: {total}  # the budget, {summary.budget_samples} sequences, under this "
             "schedule", "  train_batch_size:"]
    for (step, batch), (samples, _) in zip(steps, summary.batch_size_schedule):
        lines += [f"    - start: {step}  # optimizer step; {samples} sequences seen", f"      value: {batch}"]
    return "\n".join(lines) + "\n"


def _megatron(summary: BranchSummary) -> tuple[str, str]:
    """The flags and what they say. Megatron-LM's ``--step-batch-size-schedule "THRESHOLD:BATCH …"``
    (NVIDIA/Megatron-LM#3779, #4411; it replaced ``--rampup-batch-size``) writes the doubling schedule exactly:
    thresholds in tokens when ``--seq-length`` is given, in samples otherwise; batches in sequences."""
    schedule, budget, tokens = summary.batch_size_schedule, summary.budget_samples, summary.tokens_per_sample
    steps = " ".join(f"{int(s) * tokens if tokens else int(s)}:{int(b)}" for s, b in schedule)
    length = f" --seq-length {tokens}" if tokens else ""
    flags = f"--step-batch-size-schedule \"{steps}\" --train-samples {budget}{length}\n"
    note = (("Thresholds in tokens (with --seq-length), " if tokens else
             "Thresholds in samples (no --seq-length given; with it they would be read as tokens), ")
            + "batch sizes in sequences. Megatron does not rescale the LR with the batch: multiply it by "
            f"{2 ** (summary.schedule_alpha or 0.5):.3g} at each doubling yourself, the rule the branches measured.")
    return flags, note


def _integrations(summary: BranchSummary) -> str:
    return ("from cbs_ray.integrations import BatchSizeSchedule\n"
            "from cbs_ray.integrations.hf import BatchSizeScheduleCallback, training_arguments\n\n"
            "schedule = BatchSizeSchedule.from_summary(\"summary.json\")  # this report's schedule, alpha "
            f"{summary.schedule_alpha or 0.5:g}\n"
            "args = TrainingArguments(..., warmup_steps=schedule.warmup_steps,  # the trunk's, in steps of the "
            "first batch\n"
            "                         **training_arguments(schedule, per_device_train_batch_size=MICRO))\n"
            "trainer = Trainer(..., args=args, callbacks=[BatchSizeScheduleCallback(schedule)])\n")


def trainer_snippets(summary: BranchSummary) -> dict[str, tuple[str, str, str]]:
    """{trainer: (language, snippet, note)} for the recommended schedule."""
    flags, note = _megatron(summary)
    tokens = summary.tokens_per_sample
    return {
        "OLMo-core (BatchSizeSchedulerCallback)": (
            "python", _olmo_core(summary),
            "Batch sizes and switch points in tokens" + (f" ({tokens} tokens a sequence)." if tokens else
                                                         ": set SEQUENCE_LENGTH to your sequence length.")
            + " Each change must be an integer factor (a doubling is)."),
        "Levanter (trainer.train_batch_size)": (
            "yaml", _levanter(summary),
            "Levanter's schedule is in optimizer steps: each start is the step at which the schedule has seen the "
            "switch point's sequences. Scale the learning rate yourself if it should follow the batch."),
        "Megatron-LM (--step-batch-size-schedule)": ("bash", flags, note),
        "HF Trainer, Lightning or a PyTorch loop (cbs_ray.integrations)": (
            "python", _integrations(summary),
            "Reads this report's summary.json: batches by gradient accumulation at a fixed micro-batch, the "
            "trainer's warmup and decay laid out in samples (as the trunk trained them), and the LR × "
            f"{2 ** (summary.schedule_alpha or 0.5):.3g} per doubling on top. Lightning "
            "and plain loops, and the in-run noise scale: docs/integrations.md."),
    }
