"""The ladder's plan and bad input before Ray (``search.method: ladder``): no Ray, no training."""

import pandas as pd
import pytest

from cbs_ray.methods.ladder.hooks import AveragesIterates
from cbs_ray.methods.ladder.search import ladder_configs, ladder_outline_lines, ladder_plans, ladder_run_plan
from cbs_ray.methods.ladder.settings import resolve_ladder
from cbs_ray.search import main
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.hooks import TrainingHooks

LM = "search_spaces/tiny_causal_lm.yaml"
LADDER = ["search.method=ladder"]


def _sets(overrides):
    return [a for o in overrides for a in ("--set", o)]


def test_the_ladder_resolved_against_the_budget():
    ld = resolve_ladder(load_spec(LM, LADDER), 8192)
    # batches 8…64, two seeds; the smallest to 1/4 of D = 2048 (32 steps at 64), the others until they reach its
    # loss there or the cap, 4 × the fraction = 8192; evaluations from D/64 = 128 at every factor √2 (to whole
    # batches of 64) up to the cap (4·D = 32768 for the validation); the rungs from twice the warmup (0.1 of 2048:
    # 204 samples) on, up to the fraction.
    assert (ld.batches, ld.seeds, ld.stop_samples) == ((8, 16, 32, 64), 2, 2048)
    assert ld.evaluations == (128, 192, 256, 384, 512, 704, 1024, 1472, 2048, 2880, 4096, 5824, 8192)
    assert ld.warmup_samples == 204 and ld.rungs_from == 512 and ld.rung_evaluations == (512, 704, 1024, 1472, 2048)
    assert ld.alpha == 0.75 and ld.run_stop == ld.ladder_cap == 8192 and ld.reference_stop == 2048
    assert ld.ladder_samples_at_most == 2 * (2048 + 3 * 8192) and ld.full_samples == 4 * 2 * 8192
    assert ld.reading == "ewa" and ld.reading_column == "ewa_eval_loss" and ld.rung_span == 4
    validated = resolve_ladder(load_spec(LM, LADDER + ["ladder.validate=true"]), 8192)
    assert validated.run_stop == 32768 and validated.reference_stop == 8192 and validated.evaluations[-1] == 32768


def test_a_ladder_run_is_constant_lr_after_warmup_and_its_prefix_does_not_depend_on_its_stop():
    spec = load_spec(LM, LADDER)
    ld = resolve_ladder(spec, 8192)
    short, long = [ladder_run_plan(ld, 64, stop, 1) for stop in (2048, 8192)]
    assert short.batch_schedule == ((0, 64),) and short.report_at == (128, 192, 256, 384, 512, 704, 1024, 1472, 2048)
    assert long.report_at[-1] == 8192 and short.lr.decay == "constant"
    raw = resolve_ladder(load_spec(LM, LADDER + ["ladder.reading=raw"]), 8192)
    assert short.hooks == AveragesIterates() and ladder_plans(raw).plan(ladder_configs(raw)[0]).hooks == TrainingHooks()
    assert short.lr.warmup_steps == long.lr.warmup_steps == 3  # 0.1 of the 32 steps to the fraction
    factors_short, factors_long = short.lr_factors(), long.lr_factors()
    assert [factors_short(k) for k in range(32)] == [factors_long(k) for k in range(32)]
    assert factors_short(10) == 1.0 and short.peak_lr(64) == pytest.approx(0.002 * (64 / 16) ** 0.75)
    assert [c["seed_offset"] for c in ladder_configs(ld)] == [0, 1] * 4


def test_every_ladder_trial_gets_the_plan_the_driver_built_for_its_point():
    """The trial reads a typed plan, not the config's keys: the driver's ``ladder_plans`` hold one
    plan per (batch, seed), and the trial's seed, alpha and warmup are its plan's; a point of no run is refused."""
    spec = load_spec(LM, LADDER)
    ld = resolve_ladder(spec, 8192)
    plans = ladder_plans(ld)
    assert plans.points == ladder_configs(ld)
    last = plans.points[-1]  # B=64, seed offset 1
    plan = plans.plan(last)
    assert (plan.batch_schedule, plan.stop_samples, plan.seed_offset) == (((0, 64),), ld.run_stop, 1)
    trial = TrialConfig.for_plan(spec, plan, budget_samples=8192, model_config=None)
    assert (trial.batch_size, trial.seed, trial.alpha, trial.warmup_fraction) == \
        (64, spec.search.seed + 1, ld.alpha, ld.warmup_fraction)
    with pytest.raises(ValueError, match="no run of this experiment"):
        plans.plan({**last, "seed_offset": 7})


def test_a_warmup_floor_in_steps_for_the_larger_batches_and_the_steps_counted_by_their_lr():
    """ladder.min_warmup_steps raises the warmup of the batches the fraction leaves a step or two (B=128
    warmed up over 1 step on the markov language) and a run's plan carries it; ladder.step_count tells the summary
    to count S(B) by the LR (the meta carries each batch's warmup)."""
    plain = resolve_ladder(load_spec(LM, LADDER), 8192)
    assert [plain.warmup_steps(b) for b in plain.batches] == [26, 13, 6, 3]  # 0.1 of 256, 128, 64, 32 steps
    assert plain.to_meta()["ladder_step_count"] == "optimizer"
    spec = load_spec(LM, LADDER + ["ladder.min_warmup_steps=8", "ladder.step_count=lr_weighted"])
    ld = resolve_ladder(spec, 8192)
    assert [ld.warmup_steps(b) for b in ld.batches] == [26, 13, 8, 8]
    assert ld.to_meta()["ladder_warmup_steps"] == {"8": 26, "16": 13, "32": 8, "64": 8}
    assert ld.to_meta()["ladder_step_count"] == "lr_weighted"
    assert ladder_plans(ld).plan(ladder_configs(ld)[-1]).lr.warmup_steps == 8
    assert resolve_ladder(load_spec(LM, LADDER + ["ladder.min_warmup_steps=100"]), 8192).warmup_steps(64) == 32
    with pytest.raises(SpecError):
        load_spec(LM, LADDER + ["ladder.step_count=wall"])


def test_ladder_predict_reaches_the_meta_and_the_plan():
    """ladder.predict: the default (power_law) leaves the meta as it was (and so every summary before the key); loss
    is carried to the summary by the meta, and the plan says which prediction."""
    plain = resolve_ladder(load_spec(LM, LADDER), 8192)
    assert plain.predict == "power_law" and "ladder_predict" not in plain.to_meta()
    spec = load_spec(LM, LADDER + ["ladder.predict=loss"])
    ld = resolve_ladder(spec, 8192)
    assert ld.predict == "loss" and ld.to_meta()["ladder_predict"] == "loss"
    lines = "\n".join(ladder_outline_lines(spec, ld))
    assert "B_crit = c·L^k fitted against each rung's target loss L (ladder.predict loss)" in lines
    predicted = ladder_outline_lines(load_spec(LM, LADDER), plain)
    assert "(ladder.predict power_law; maths.prediction)" in "\n".join(predicted)


def test_dry_run_prints_the_rungs_and_the_cost(capsys):
    assert main(["--space", LM, "--dry-run", "--validate-prediction", *_sets(LADDER)]) == 0
    out = capsys.readouterr().out
    assert ("ladder, full budget D = 8192 samples; the smallest batch trains to 2048 samples (25% of D), every other "
            "until it reaches the smallest batch's eval_loss there or 8192 samples (ladder.cap 4)") in out
    assert "read through the average of its iterates (ladder.reading ewa" in out
    assert "rungs at 512, 704, 1024, 1472, 2048 samples (from twice the warmup" in out and "a span of 4x in D" in out
    assert "warning: the rungs span under 8x in D" in out
    assert "samples trained: at most 53248 = 0.81 of one from-scratch search at the full budget" in out
    assert ("then (--validate-prediction): the runs go on, the smallest batch to D, every other until it reaches the "
            "smallest batch's eval_loss at D or 32768 samples") in out


@pytest.mark.parametrize("overrides, message", [
    (["ladder.fraction=1.5"], "ladder.fraction: must be in (0, 1), got 1.5"),
    (["ladder.fraction=0"], "ladder.fraction: must be in (0, 1), got 0"),
    (["ladder.fraction=0.05"], "ladder.fraction: 0.05 of the budget (8192 samples) gives the largest batch 64 6 "
                               "optimizer steps, under ladder.min_steps=16"),
    (["search.batch_sizes=[8, 16, 32]"], "search.batch_sizes: the ladder needs at least 4 batch sizes"),
    (["search.strategy=grid", "search.early_stopping=false"],
     "search.strategy: grid with search.grid_points=3 asks for an alpha grid"),
    (["search.batch_sizes=auto"], "search.batch_sizes: auto is not available with search.method ladder"),
    (["ladder.seeds=0"], "ladder.seeds: must be from 1 to 100 (each one multiplies the trials), got 0"),
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


def test_the_ladder_takes_branch_modes_schedule_for_the_same_spec(tmp_path, monkeypatch):
    # Beside the ladder's experiment: branch experiments of other data, another budget, a schedule run, a folder
    # that is no experiment, and one of the same spec (the oldest): that one's schedule is read, as branch mode
    # reports it (the history is helpers.branch_history's, read in place of Tune's files).
    import cbs_ray.methods.branch.same_spec as same_spec
    from cbs_ray.methods.ladder.reading import summarize_ladder
    from cbs_ray.methods.ladder.report import headline
    from cbs_ray.records.meta import ExperimentMeta
    from helpers.branch_history import META as BRANCH_META
    from helpers.branch_history import history
    from helpers.ladder_curves import history_rows

    def meta(method="branch", fingerprint="abc", budget=8192):
        extra = {**BRANCH_META, "warmup_fraction": 0.1} if method == "branch" else {}
        return ExperimentMeta.from_dict({**extra, "name": "tiny", "metric": "eval_loss", "mode": "min", "spec": {},
                                         "method": method, "data_fingerprint": fingerprint, "budget_samples": budget})

    ladder_path = str(tmp_path / "tiny-ladder-20261201-100000")
    ladder = meta("ladder")
    ladder.write(ladder_path)
    read = []
    monkeypatch.setattr(same_spec, "branch_history", lambda path, schedule: (read.append(path), (history(), None))[1])
    assert same_spec.same_spec_schedule(ladder_path, ladder) is None          # nothing beside it
    meta().write(str(tmp_path / "tiny-branch-20261201-090000"))            # the same spec
    meta(fingerprint="other").write(str(tmp_path / "tiny-branch-20261201-110000"))
    meta(budget=4096).write(str(tmp_path / "tiny-branch-20261201-120000"))
    meta().write(str(tmp_path / "tiny-branch-20261201-090000-schedule"))
    (tmp_path / "tiny-branch-20261201-130000").mkdir()
    found = same_spec.same_spec_schedule(ladder_path, ladder)
    assert read == [str(tmp_path / "tiny-branch-20261201-090000")]        # the others were not even read
    assert found["experiment"] == read[0] and found["batch_size_schedule"] == [[0, 16], [1024, 32], [2048, 128]]
    assert found["alpha"] == 0.5 and found["validated"] is None             # no schedule run in this history
    assert found["peak_lr"] is not None and found["warmup_samples"] == found["warmup_steps"] * 16  # the trunk's (B0 16)
    s = summarize_ladder(pd.DataFrame(history_rows((8, 16, 32, 64), (128, 256, 512, 1024, 2048))),
                         {"ladder_batches": [8, 16, 32, 64], "ladder_seeds": 2, "ladder_alpha": 0.5,
                          "warmup_fraction": 0.1, "budget_samples": 8192, "ladder_stop_samples": 2048,
                          "base_lr": 0.002, "base_batch": 16}, bootstrap=0, schedule=found)
    assert s.prediction.batch_size_schedule == found
    assert f"Batch-size schedule (branch mode, {read[0]}): 16 from 0, then 32 from 1024, then 128 from 2048 samples" \
        in headline(s)
    assert same_spec.same_spec_schedule("s3://bucket/tiny-ladder-1", ladder) is None  # remote storage: not looked for
