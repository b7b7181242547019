"""The average of the iterates the ladder reads (``maths.averaging``, ``train.averaging``): known answers."""

import pytest
import torch

from cbs_ray.maths.averaging import polynomial_decay_weight
from cbs_ray.train.averaging import iterate_average


def _average_of(values, eta):
    model = torch.nn.Linear(3, 2)
    average = iterate_average(model, eta=eta)
    seen = []
    for v in values:
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(v)
        average.update_parameters(model)
        seen.append([float(p.detach().flatten()[0]) for p in average.module.parameters()])
    return seen


def test_the_average_of_a_constant_sequence_is_that_sequence():
    assert _average_of([0.7] * 20, eta=8.0) == [[pytest.approx(0.7)] * 2] * 20


def test_polynomial_decay_by_hand():
    """η = 0 is the running mean (1, 1.5, 2 for 1, 2, 3); η = 8: w_1 = 1, w_2 = 9/10, so 1 then 1 + 0.9 = 1.9."""
    assert [row[0] for row in _average_of([1.0, 2.0, 3.0], eta=0.0)] == pytest.approx([1.0, 1.5, 2.0])
    assert [row[0] for row in _average_of([1.0, 2.0], eta=8.0)] == pytest.approx([1.0, 1.9])
    assert polynomial_decay_weight(1) == 1.0 and polynomial_decay_weight(10, 8.0) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        polynomial_decay_weight(0)
