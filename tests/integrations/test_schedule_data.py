"""BatchSizeSchedule: stages, LR multipliers, accumulation and from_summary, on hand-computed answers."""

import json
import math
import subprocess
import sys

import pytest

from cbs_ray.integrations import BatchSizeSchedule, ScheduleError


def test_stages_and_lr_multipliers_follow_the_alpha_rule():
    s = BatchSizeSchedule([(0, 8), (64, 16), (192, 32)])
    assert [(st.start_samples, st.batch_size, st.start_step) for st in s.stages] == [(0, 8, 0), (64, 16, 8),
                                                                                    (192, 32, 16)]
    # √2 per doubling at alpha 0.5: 1, 1.414, 2
    assert [st.lr_multiplier for st in s.stages] == pytest.approx([1.0, math.sqrt(2), 2.0])
    linear = BatchSizeSchedule([(0, 8), (64, 32)], alpha=1.0)
    assert linear.stages[1].lr_multiplier == 4.0


def test_a_stage_starts_at_the_previous_stages_next_step_boundary():
    # 8-sample steps: 60 is not a boundary, the next one is 64 (step 8); then 16-sample steps from 64:
    # 100 rounds up to 64 + 3·16 = 112 (step 11).
    s = BatchSizeSchedule([(0, 8), (60, 16), (100, 32)])
    assert [(st.start_samples, st.start_step, st.nominal_start) for st in s.stages] == [(0, 0, 0), (64, 8, 60),
                                                                                       (112, 11, 100)]


def test_optimizer_steps_and_samples_before_a_step():
    s = BatchSizeSchedule([(0, 8), (64, 16), (192, 32)], budget_samples=320)
    # 64/8 = 8 steps, 128/16 = 8 steps, 128/32 = 4 steps
    assert s.optimizer_steps() == 20
    assert s.optimizer_steps(64) == 8 and s.optimizer_steps(65) == 9 and s.optimizer_steps(0) == 0
    assert s.samples_before_step(8) == 64 and s.samples_before_step(10) == 96 and s.samples_before_step(20) == 320
    assert s.stage_at_step(7).batch_size == 8 and s.stage_at_step(8).batch_size == 16
    assert s.stage_at_samples(191).batch_size == 16 and s.stage_at_samples(192).batch_size == 32
    assert [st.batch_size for _, st in s.steps()] == [8] * 8 + [16] * 8 + [32] * 4


def test_accumulation_plan_at_a_fixed_micro_batch_and_world_size():
    s = BatchSizeSchedule([(0, 8), (64, 16), (192, 32)])
    assert s.accumulation_plan(4) == [2, 4, 8]
    assert s.accumulation_plan(4, world_size=2) == [1, 2, 4]
    with pytest.raises(ScheduleError, match="not a whole number of micro-batches"):
        s.accumulation_plan(3)
    with pytest.raises(ScheduleError, match="micro-batch 8 × 2 process"):
        s.accumulation_plan(8, world_size=2)  # 8 is not a multiple of 16


def test_a_schedule_in_tokens_counts_whole_sequences():
    s = BatchSizeSchedule([(0, 1024), (8192, 2048)], unit="tokens", tokens_per_sample=128)
    assert [(st.start_samples, st.batch_size) for st in s.stages] == [(0, 8), (64, 16)]
    with pytest.raises(ScheduleError, match="whole sequences"):
        BatchSizeSchedule([(0, 1000)], unit="tokens", tokens_per_sample=128)
    with pytest.raises(ScheduleError, match="tokens_per_sample"):
        BatchSizeSchedule([(0, 1024)], unit="tokens")


@pytest.mark.parametrize("stages, message", [([], "at least one stage"), ([(8, 8)], "start at 0"),
                                             ([(0, 8), (0, 16)], "increase"),
                                             ([(0, 0)], "batch size must be a whole number from 1")])
def test_bad_schedules_say_what_is_wrong(stages, message):
    with pytest.raises(ScheduleError, match=message):
        BatchSizeSchedule(stages)


def test_from_summary_reads_branch_modes_schedule(tmp_path):
    summary = {"method": "branch", "batch_size_schedule": [[0, 8], [64, 16], [192, 32]], "schedule_alpha": 1.0,
               "budget_samples": 320, "trunk": {"peak_lr": 0.003}, "tokens_per_sample": 128}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    s = BatchSizeSchedule.from_summary(tmp_path)  # the report folder
    assert [(st.start_samples, st.batch_size) for st in s.stages] == [(0, 8), (64, 16), (192, 32)]
    assert s.alpha == 1.0 and s.stages[2].lr_multiplier == 4.0
    assert s.budget_samples == 320 and s.peak_lr == 0.003 and s.optimizer_steps() == 20


def test_from_summary_reads_a_from_scratch_recommendation_as_one_stage(tmp_path):
    summary = {"mode": "scratch", "budget_samples": 4096,
               "recommendation": {"batch_size": 64, "alpha": 0.5, "peak_lr": 0.002, "budget_samples": 4096}}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    s = BatchSizeSchedule.from_summary(path)
    assert [(st.start_samples, st.batch_size) for st in s.stages] == [(0, 64)]
    assert s.optimizer_steps() == 64 and s.peak_lr == 0.002


def test_from_summary_without_an_answer_is_a_clear_error(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"mode": "scratch", "recommendation": None}))
    with pytest.raises(ScheduleError, match="neither a batch_size_schedule"):
        BatchSizeSchedule.from_summary(tmp_path)
    with pytest.raises(ScheduleError, match="cannot read"):
        BatchSizeSchedule.from_summary(tmp_path / "missing.json")


def test_the_package_imports_without_ray_torch_hf_or_lightning():
    code = ("import sys, cbs_ray.integrations; "
            "print(sorted(m for m in ('ray', 'torch', 'transformers', 'lightning') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
