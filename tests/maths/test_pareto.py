import math
import random

import pytest

from cbs_ray import pareto_front


def test_hand_built_front_ordered_by_time():
    times = [10.0, 5.0, 20.0, 8.0, 12.0]
    accs = [0.80, 0.70, 0.85, 0.69, 0.80]
    # 5.0/0.70 fastest; 10.0/0.80 better; 20.0/0.85 best. 8.0/0.69 is dominated by 5.0/0.70;
    # 12.0/0.80 is dominated by 10.0/0.80 (slower, not better).
    assert pareto_front(times, accs) == [1, 0, 2]


def test_min_mode():
    assert pareto_front([1.0, 2.0, 3.0], [0.5, 0.4, 0.45], mode="min") == [0, 1]


def test_nan_points_never_on_front_and_duplicates_keep_first():
    assert pareto_front([1.0, math.nan, 2.0], [0.5, 0.9, 0.6]) == [0, 2]
    assert pareto_front([1.0, 1.0], [0.5, 0.5]) == [0]
    assert pareto_front([], []) == []


def brute_force(times, metrics):
    front = []
    for i in range(len(times)):
        dominated = any(
            times[j] <= times[i] and metrics[j] >= metrics[i] and (times[j] < times[i] or metrics[j] > metrics[i])
            for j in range(len(times)))
        duplicate_earlier = any(times[j] == times[i] and metrics[j] == metrics[i] for j in range(i))
        if not dominated and not duplicate_earlier:
            front.append(i)
    return sorted(front, key=lambda i: times[i])


@pytest.mark.parametrize("seed", range(30))
def test_matches_brute_force(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 25)
    times = [float(rng.randint(1, 10)) for _ in range(n)]  # small ranges make ties common
    metrics = [rng.randint(0, 10) / 10 for _ in range(n)]
    assert pareto_front(times, metrics) == brute_force(times, metrics)
