"""The ladder's plan and bad input before Ray (``search.method: ladder``): no Ray, no training."""

import pytest

from cbs_ray.search import main
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.ladder_section import resolve_ladder
from cbs_ray.spec.load import load_spec
from cbs_ray.train.run_plan import ladder_configs, plan_from_config

LM = "search_spaces/tiny_causal_lm.yaml"
LADDER = ["search.method=ladder"]


def _sets(overrides):
    return [a for o in overrides for a in ("--set", o)]


def test_the_ladder_resolved_against_the_budget():
    ld = resolve_ladder(load_spec(LM, LADDER), 8192)
    # batches 8…64, two seeds; runs to 1/4 of D = 2048 (32 steps at 64); evaluations from D/64 = 128 at every
    # factor √2 (to whole batches of 64) up to 2·D for the validation; the rungs from twice the warmup (0.1 of
    # 2048: 204 samples) on, up to the fraction.
    assert (ld.batches, ld.seeds, ld.stop_samples) == ((8, 16, 32, 64), 2, 2048)
    assert ld.evaluations == (128, 192, 256, 384, 512, 704, 1024, 1472, 2048, 2880, 4096, 5824, 8192, 11584, 16384)
    assert ld.warmup_samples == 204 and ld.rungs_from == 512 and ld.rung_evaluations == (512, 704, 1024, 1472, 2048)
    assert ld.alpha == 0.75 and ld.run_stop == 2048  # the middle of alpha_range; no validation: the fraction
    assert ld.ladder_samples == 4 * 2 * 2048 and ld.full_samples == 4 * 2 * 8192
    assert resolve_ladder(load_spec(LM, LADDER + ["ladder.validate=true"]), 8192).run_stop == 16384


def test_a_ladder_run_is_constant_lr_after_warmup_and_its_prefix_does_not_depend_on_its_stop():
    spec = load_spec(LM, LADDER)
    ld = resolve_ladder(spec, 8192)
    short, long = [plan_from_config(spec, {**config, "ladder_stop_samples": stop}, 8192)
                   for config in ladder_configs(ld)[-1:] for stop in (2048, 16384)]
    assert short.batch_schedule == ((0, 64),) and short.report_at == (128, 192, 256, 384, 512, 704, 1024, 1472, 2048)
    assert long.report_at[-1] == 16384 and short.lr_decay == "constant"
    assert short.lr_warmup_steps == long.lr_warmup_steps == 3  # 0.1 of the 32 steps to the fraction
    factors_short, factors_long = short.lr_factors(), long.lr_factors()
    assert [factors_short(k) for k in range(32)] == [factors_long(k) for k in range(32)]
    assert factors_short(10) == 1.0 and short.peak_lr(64) == pytest.approx(0.002 * (64 / 16) ** 0.75)
    assert [c["seed_offset"] for c in ladder_configs(ld)] == [0, 1] * 4


def test_dry_run_prints_the_rungs_and_the_cost(capsys):
    assert main(["--space", LM, "--dry-run", "--validate-prediction", *_sets(LADDER)]) == 0
    out = capsys.readouterr().out
    assert "ladder, full budget D = 8192 samples; every batch trains to 2048 samples (25% of D)" in out
    assert "rungs at 512, 704, 1024, 1472, 2048 samples (from twice the warmup" in out
    assert "samples trained: 16384 = 0.25 of one from-scratch search at the full budget" in out
    assert "then (--validate-prediction): the same runs go on to 16384 samples" in out


@pytest.mark.parametrize("overrides, message", [
    (["ladder.fraction=1.5"], "ladder.fraction: must be in (0, 1), got 1.5"),
    (["ladder.fraction=0"], "ladder.fraction: must be in (0, 1), got 0"),
    (["ladder.fraction=0.05"], "ladder.fraction: 0.05 of the budget (8192 samples) gives the largest batch 64 6 "
                               "optimizer steps, under ladder.min_steps=16"),
    (["search.batch_sizes=[8, 16, 32]"], "search.batch_sizes: the ladder needs at least 4 batch sizes"),
    (["search.strategy=grid", "search.early_stopping=false"],
     "search.strategy: grid with search.grid_points=3 asks for an alpha grid"),
    (["search.batch_sizes=auto"], "search.batch_sizes: auto is not available with search.method ladder"),
    (["ladder.seeds=0"], "ladder.seeds: must be at least 1, got 0"),
])
def test_bad_ladder_input_is_one_line_before_ray(overrides, message, capsys):
    with pytest.raises(SpecError, match="^" + message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        load_spec(LM, LADDER + overrides)
    assert main(["--space", LM, "--dry-run", *_sets(LADDER + overrides)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_validate_prediction_needs_the_ladder(capsys):
    assert main(["--space", LM, "--dry-run", "--validate-prediction"]) == 2
    assert "ladder.validate: validates the ladder's prediction; set search.method=ladder" in capsys.readouterr().err
