import pytest

from cbs_ray import BatchPlan, milestones, optimizer_steps, plan_batch


def test_plan_without_cap_is_one_micro_step_per_worker():
    assert plan_batch(64, 2) == BatchPlan(64, 32, 1, 2)


def test_plan_with_cap_accumulates_to_the_exact_batch():
    plan = plan_batch(2048, 4, max_micro_batch=64)
    assert (plan.micro_batch, plan.accumulation, plan.workers) == (64, 8, 4)
    assert plan.micro_batch * plan.accumulation * plan.workers == 2048
    assert str(plan) == "B=2048 = 64 micro × 8 accum × 4 workers"


def test_plan_picks_largest_divisor_under_a_non_power_cap():
    # 48 per worker, cap 20: largest divisor of 48 that is <= 20 is 16, so 3 micro-steps, and it says so.
    plan = plan_batch(96, 2, max_micro_batch=20)
    assert plan == BatchPlan(96, 16, 3, 2)
    assert str(plan) == ("B=96 = 16 micro × 3 accum × 2 workers (a micro-batch of 20 does not divide the 48 per "
                         "worker: 16 is the largest divisor under it)")
    assert "divisor" not in str(plan_batch(96, 2, max_micro_batch=48))  # a cap above the share is no lowering


def test_plan_rejects_batch_not_divisible_by_workers():
    with pytest.raises(ValueError):
        plan_batch(8, 3)


def test_optimizer_steps_and_milestones():
    assert optimizer_steps(16384, 128) == 128
    with pytest.raises(ValueError):
        optimizer_steps(1000, 128)
    assert milestones(8192, 2048) == [2048, 4096, 6144, 8192]
    with pytest.raises(ValueError):
        milestones(5000, 2048)


def test_every_batch_hits_every_milestone_when_cadence_is_multiple_of_largest():
    batches, every = [8, 16, 32, 64, 128], 2048
    for b in batches:
        assert all(m % b == 0 for m in milestones(16384, every))
