"""Branch mode's report points to cbs_ray.integrations, with a snippet that reads its own summary.json."""

from cbs_ray.integrations import BatchSizeSchedule
from cbs_ray.methods.branch.reading import summarize_branches
from cbs_ray.methods.branch.trainer_snippets import trainer_snippets
from helpers.branch_history import META, history


def test_the_report_snippet_names_from_summary_and_the_schedule_reads_back(tmp_path):
    summary = summarize_branches(history(), META)
    snippets = trainer_snippets(summary)
    language, snippet, note = snippets["HF Trainer, Lightning or a PyTorch loop (cbs_ray.integrations)"]
    assert language == "python" and 'BatchSizeSchedule.from_summary("summary.json")' in snippet
    assert "warmup_steps=schedule.warmup_steps" in snippet and "laid out in samples" in note
    assert "docs/integrations.md" in note and "1.41" in note
    (tmp_path / "summary.json").write_text(summary.to_json())
    schedule = BatchSizeSchedule.from_summary(tmp_path)
    assert [[s.start_samples, s.batch_size] for s in schedule.stages] == summary.batch_size_schedule
    assert schedule.optimizer_steps() == 144  # the Levanter snippet's num_train_steps for this schedule


def test_the_branch_summary_carries_the_trunks_warmup_and_from_summary_returns_it(tmp_path):
    meta = dict(META, warmup_fraction=0.1)
    summary = summarize_branches(history(), meta)
    steps = round(0.1 * (meta["budget_samples"] // meta["trunk_batch"]))  # maths.lr_schedule.warmup_steps
    assert summary.trunk.warmup_steps == steps and summary.trunk.warmup_samples == steps * meta["trunk_batch"]
    (tmp_path / "summary.json").write_text(summary.to_json())
    schedule = BatchSizeSchedule.from_summary(tmp_path)
    assert schedule.warmup_steps == steps and schedule.warmup_samples == steps * meta["trunk_batch"]
