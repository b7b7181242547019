"""The dense frontier's batches (issue 60, item 3): √2 apart around B*, each rounded in log B to a batch that lands
on every report, known answers."""

import pytest

from cbs_ray.maths.frontier_batches import dense_batches, landing_batches, nearest_batch, sqrt2_ladder


def test_the_batches_a_control_can_train_divide_the_cadence_and_split_over_the_workers():
    assert landing_batches(48) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 48]
    assert landing_batches(48, workers=4) == [4, 8, 12, 16, 24, 48]
    with pytest.raises(ValueError):
        landing_batches(0)


def test_the_nearest_batch_is_read_in_log_b_a_tie_the_smaller():
    assert nearest_batch(22.6, [16, 20, 32]) == 20  # log(22.6/20) = 0.12 < log(32/22.6) = 0.35
    assert nearest_batch(24, [16, 36]) == 16  # 24 / 16 = 36 / 24 = 1.5: a tie
    assert nearest_batch(1000, [16, 32]) == 32


def test_the_ladder_runs_sqrt2_apart_between_its_ends():
    assert sqrt2_ladder(64, 16, 256) == pytest.approx([16, 16 * 2 ** 0.5, 32, 32 * 2 ** 0.5, 64, 64 * 2 ** 0.5, 128,
                                                       128 * 2 ** 0.5, 256], rel=1e-12)
    assert sqrt2_ladder(64, 40, 100) == pytest.approx([45.254834, 64, 90.509668], rel=1e-6)


def test_a_cadence_of_three_times_a_power_of_two_gives_batches_sqrt2_apart_to_rounding():
    # 64·√2^k, k = -4…4, rounded in log B among the divisors of 1536 = 3·512: 22.6 → 24, 45.3 → 48, 90.5 → 96
    assert dense_batches(64, low=16, high=256, every=1536) == [16, 24, 32, 48, 64, 96, 128, 192, 256]


def test_a_power_of_two_cadence_leaves_batches_two_apart_and_five_gives_quarters():
    assert dense_batches(64, low=16, high=256, every=1024) == [16, 32, 64, 128, 256]
    assert dense_batches(64, low=16, high=256, every=5120) == [16, 20, 32, 40, 64, 80, 128, 160, 256]


def test_the_training_set_caps_it_and_the_schedules_batches_join_it():
    # up to 1024, but no batch over the 300 examples; the trunk's 8 below the ladder joins it
    assert dense_batches(64, low=16, high=1024, every=1536, largest_allowed=300, include=(8,)) == \
        [8, 16, 24, 32, 48, 64, 96, 128, 192, 256]
    assert dense_batches(64, low=32, high=128, every=1536, include=(100,)) == [32, 48, 64, 96, 128]  # 100 lands on no report
