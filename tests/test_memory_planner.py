"""The micro-batch planner's arithmetic with a fake memory function that fails above a threshold."""

import pytest

from cbs_ray.memory_planner import ProbeCache, plan_micro_batch, probe_key


def memory(limit_samples):
    calls = []

    def fits(m):
        calls.append(m)
        return m <= limit_samples
    return fits, calls


@pytest.mark.parametrize("limit,expected", [
    (100, 64),    # 128 / 0.9 = 143 does not fit; 64 / 0.9 = 72 does
    (150, 128),   # 143 fits
    (142, 64),    # one short of 143
    (1, 0),       # even 1 / 0.9 -> 2 does not fit
    (2, 1),
])
def test_plan_is_the_largest_power_of_two_that_fits_with_a_10_percent_margin(limit, expected):
    fits, calls = memory(limit)
    if expected == 0:
        with pytest.raises(MemoryError):
            plan_micro_batch(fits)
        return
    assert plan_micro_batch(fits) == expected
    assert len(calls) == expected.bit_length() + 1  # doubling only: log2(p) + 2 tries, the last one fails


def test_the_probe_stops_at_its_limit_and_does_not_depend_on_a_trials_share():
    fits, calls = memory(10 ** 9)
    assert plan_micro_batch(fits, upper=1024) == 1024
    assert max(calls) == 1138  # 1024 / 0.9 rounded up: the margin is probed, not assumed


def test_cache_round_trip_and_keys(tmp_path):
    cache = ProbeCache(tmp_path / "probe.json")
    key = probe_key({"name": "bert-base-uncased"}, 128, "bf16", "NVIDIA H200")
    assert cache.get(key, 512) is None
    cache.put(key, 256, 512)  # probed up to 512: 256 is the device's ceiling (512 / 0.9 did not fit)
    again = ProbeCache(tmp_path / "probe.json")
    assert (again.get(key, 512), again.get(key, 4096), again.get(key, 128)) == (256, 256, 128)
    cache.put(key, 512, 512)  # reached its limit: says nothing about 1024
    assert (cache.get(key, 512), cache.get(key, 64), cache.get(key, 1024)) == (512, 64, None)
    assert probe_key({"config": {"b": 1, "a": 2}}, 128, "bf16", "x") == probe_key({"config": {"a": 2, "b": 1}}, 128, "bf16", "x")
    assert key != probe_key({"name": "bert-base-uncased"}, 256, "bf16", "NVIDIA H200")
