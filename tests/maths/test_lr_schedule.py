import math

import pytest

from cbs_ray import lr_multiplier, scaled_lr, warmup_steps


def test_linear_rule_doubles_lr_with_batch():
    assert scaled_lr(1e-3, 512, 256, 1.0) == pytest.approx(2e-3)


def test_sqrt_rule_scales_by_root_of_batch_ratio():
    assert scaled_lr(1e-3, 1024, 256, 0.5) == pytest.approx(2e-3)  # sqrt(4) = 2


def test_alpha_zero_keeps_base_lr_and_smaller_batch_lowers_it():
    assert scaled_lr(3e-4, 4096, 256, 0.0) == pytest.approx(3e-4)
    assert scaled_lr(1e-3, 64, 256, 1.0) == pytest.approx(2.5e-4)


def test_scaled_lr_rejects_non_positive():
    with pytest.raises(ValueError):
        scaled_lr(0.0, 8, 8, 1.0)


@pytest.mark.parametrize("fraction,total,expected", [
    (0.0, 100, 0), (0.1, 100, 10), (0.05, 10, 1),  # 0.5 rounds to even 0, but nonzero warmup keeps 1
    (0.01, 10, 1), (1.0, 64, 64), (0.25, 7, 2),
    (0.1, 25, 2),  # 2.5: Python's round, to the even neighbour
    (0.1, 0, 0),   # never more warmup than steps (1 before)
])
def test_warmup_steps(fraction, total, expected):
    assert warmup_steps(fraction, total) == expected


def test_warmup_fraction_outside_unit_interval_fails():
    with pytest.raises(ValueError):
        warmup_steps(1.5, 10)


def test_linear_warmup_then_linear_decay():
    # 4 warmup steps of 10: 0.25, 0.5, 0.75, 1.0, then 6 decay steps of 1/7 each, never reaching 0.
    got = [lr_multiplier(s, 4, 10) for s in range(10)]
    assert got == pytest.approx([0.25, 0.5, 0.75, 1.0, 6 / 7, 5 / 7, 4 / 7, 3 / 7, 2 / 7, 1 / 7])


def test_cosine_and_constant_decay():
    assert lr_multiplier(0, 0, 10, decay="cosine") == pytest.approx(1.0)
    assert lr_multiplier(5, 0, 10, decay="cosine") == pytest.approx(0.5)
    assert lr_multiplier(9, 2, 10, decay="constant") == 1.0
    with pytest.raises(ValueError):
        lr_multiplier(5, 0, 10, decay="step")


def test_no_warmup_starts_at_peak():
    assert lr_multiplier(0, 0, 100) == 1.0
    assert math.isclose(lr_multiplier(50, 0, 100), 0.5)


def test_lr_weighted_steps_is_the_sum_of_the_multipliers():
    from cbs_ray.maths.lr_schedule import lr_multiplier, lr_weighted_steps

    for warmup in (0, 1, 2, 4, 8, 20):
        for t in range(0, 40):
            expected = sum(lr_multiplier(k, warmup, 1000, decay="constant") for k in range(t))
            assert lr_weighted_steps(t, warmup) == pytest.approx(expected)
    assert lr_weighted_steps(2, 4) == pytest.approx(0.75)   # 1/4 + 2/4
    assert lr_weighted_steps(10, 4) == pytest.approx(8.5)   # 10 − (4 − 1)/2
    assert lr_weighted_steps(7.5, 1) == 7.5
    with pytest.raises(ValueError):
        lr_weighted_steps(-1, 4)
