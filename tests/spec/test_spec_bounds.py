"""A spec file within bounds (issue 29 rows 6, 12, 13 and duplicate keys): each refusal one line, exit 2,
naming the file, before anything runs."""

import pytest

from cbs_ray.search import main
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec

ALIAS_BOMB = "name: x\nmodel:\n  config:\n    model_type: bert\n" + "".join(
    f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else '1'}]\n" for i in range(7))
CASES = {
    "alias bomb": (ALIAS_BOMB, "anchors and aliases (&, *) are not allowed"),
    "an anchor alone": ("name: &n x\n", "anchors and aliases"),
    "nested 20 000 deep": ("name: x\nmodel:\n  config:\n    x: " + "[" * 20000 + "]" * 20000 + "\n",
                           "nested deeper than 32 levels"),
    "a key twice": ("name: x\ntraining:\n  base_lr: 0.001\n  base_lr: 0.002\n", "key 'base_lr' given twice"),
    "over 1 MB": ("name: x\n" + "#" * 1_100_000 + "\n", "larger than 1 MB"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_spec_file_outside_the_bounds_is_one_line_exit_2_naming_the_file(case, tmp_path, capsys):
    text, says = CASES[case]
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    assert main(["--space", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and says in err, err


def test_an_alias_in_a_set_value_is_refused_too():
    with pytest.raises(SpecError, match="--set model.config: anchors and aliases"):
        load_spec(None, ["model.config={a: &x [1], b: *x}"])


def test_the_shipped_nesting_is_well_inside_the_bound():
    spec = load_spec(None, ["model.config={model_type: bert, a: {b: {c: {d: 1}}}}"])
    assert spec.model.config["a"]["b"]["c"]["d"] == 1
