"""records.trial_point: a trial's batch size as its Tune config holds it (``log2_batch``), encoded and decoded in
one place (issue 46, item 3)."""

import ast
from pathlib import Path

import numpy as np
import pytest

import cbs_ray
from cbs_ray.records.trial_point import BATCH_KEY, batch_of, decode_batch, encode_batch

PACKAGE = Path(cbs_ray.__file__).parent


@pytest.mark.parametrize("batch, value", [(1, 0), (2, 1), (8, 3), (64, 6), (4096, 12)])
def test_the_batch_is_its_log2_under_the_recorded_key(batch, value):
    assert BATCH_KEY == "log2_batch"  # what every recorded experiment's params.json and study hold
    assert encode_batch(batch) == value and decode_batch(value) == batch
    assert batch_of({BATCH_KEY: value, "alpha": 0.5}) == batch and type(batch_of({BATCH_KEY: value})) is int


def test_what_tune_and_optuna_hand_back_decodes_to_a_plain_int():
    # Tune's randint samples numpy integers; a JSON round trip may give a float.
    assert decode_batch(np.int64(5)) == 32 and type(decode_batch(np.int64(5))) is int
    assert decode_batch(5.0) == 32 and encode_batch(np.int64(32)) == 5


def test_only_trial_point_spells_the_key():
    """Every other module of the package names the key through ``BATCH_KEY`` (a string constant equal to it
    anywhere else is a second encoding place)."""
    def spells(path: Path) -> bool:
        return any(isinstance(n, ast.Constant) and n.value == BATCH_KEY for n in ast.walk(ast.parse(path.read_text())))

    spelling = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if spells(p))
    assert spelling == ["records/trial_point.py"]
