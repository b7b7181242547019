"""The micro-batch planner's arithmetic with a fake memory function that fails above a threshold."""

import pytest

from cbs_ray.memory_planner import ProbeCache, largest_fitting, plan_micro_batch, probe_key


def memory(limit_samples):
    calls = []

    def fits(m):
        calls.append(m)
        return m <= limit_samples
    return fits, calls


@pytest.mark.parametrize("limit,upper,expected", [(37, 1024, 37), (64, 1024, 64), (1, 8, 1), (500, 128, 128),
                                                  (0, 16, 0)])
def test_largest_fitting_finds_the_threshold(limit, upper, expected):
    fits, calls = memory(limit)
    assert largest_fitting(fits, upper=upper) == expected
    assert len(calls) <= 2 * max(1, upper).bit_length() + 1   # doubling + bisection, not a linear scan


def test_plan_applies_the_safety_margin_and_rounds_to_a_power_of_two():
    assert plan_micro_batch(memory(100)[0], per_worker=512) == 64      # 0.9 × 100 = 90 -> 64
    assert plan_micro_batch(memory(150)[0], per_worker=512) == 128     # 135 -> 128
    assert plan_micro_batch(memory(1000)[0], per_worker=256) == 128    # the share caps it: 0.9 × 256 -> 128
    with pytest.raises(MemoryError):
        plan_micro_batch(memory(0)[0], per_worker=64)


def test_cache_round_trip_and_keys(tmp_path):
    cache = ProbeCache(tmp_path / "probe.json")
    key = probe_key({"name": "bert-base-uncased"}, 128, "bf16", "NVIDIA H200")
    assert cache.get(key) is None
    cache.put(key, 256)
    assert ProbeCache(tmp_path / "probe.json").get(key) == 256
    assert probe_key({"config": {"b": 1, "a": 2}}, 128, "bf16", "x") == probe_key({"config": {"a": 2, "b": 1}}, 128, "bf16", "x")
    assert key != probe_key({"name": "bert-base-uncased"}, 256, "bf16", "NVIDIA H200")
