"""One seam per search method: the command lines look the method up in one table and never fork on it."""

import json
import types

import pytest

from cbs_ray.cli import report_main
from cbs_ray.methods.branch import search as branch
from cbs_ray.methods.ladder import search as ladder
from cbs_ray.methods.scratch import search as scratch
from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.storage import META_FILE
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.tune.api import _check_same_data, method_named, method_names
from cbs_ray.tune.prepare import Prepared
from cbs_ray.tune.search_method import SearchMethod


def _steps(protocol) -> set:
    return {name for name in vars(protocol) if not name.startswith("_") and callable(getattr(protocol, name))}


def test_every_method_the_spec_accepts_has_one_entry_with_the_protocols_steps():
    """Each method's Ray half (``tune.api.method_named``) and its report steps (``report.methods.report_steps``,
    which the report command reads without Tune) under the same name, both from its registry entry."""
    from cbs_ray.records.method_registry import BUILT_IN_METHODS
    from cbs_ray.report.methods import report_steps
    from cbs_ray.report.reading import MethodReport

    assert method_names()[:3] == ("scratch", "branch", "ladder") == tuple(e.name for e in BUILT_IN_METHODS)
    assert _steps(SearchMethod) == {"outline_lines", "check", "stages"}
    assert _steps(MethodReport) == {"summarize", "render", "run_lines", "report_lines"}
    for name in method_names():
        method, steps = method_named(name), report_steps(name)
        assert method.name == name == steps.name and steps.described.startswith("a ")
        assert all(callable(getattr(method, step)) for step in _steps(SearchMethod))
        assert all(callable(getattr(steps, step)) for step in _steps(MethodReport))
    assert method_named("scratch") is scratch.METHOD and method_named("branch") is branch.METHOD
    assert method_named("ladder") is ladder.METHOD
    assert report_steps(None) is report_steps("scratch")  # an experiment whose metadata names no method


def test_the_dry_run_plan_is_the_methods_own():
    from cbs_ray.tune.prepare import Prepared

    data = types.SimpleNamespace(train_examples=10 ** 6)  # no data prepared here

    def budget(spec):
        return Prepared(data, spec.training.budget_samples, None)

    spec = load_spec(None)
    lines = method_named("scratch").outline_lines(spec, budget(spec))
    assert lines[0].startswith("tiny-bert-sentiment") and any("B=128" in line for line in lines)
    lm = load_spec("search_spaces/tiny_causal_lm.yaml", ["search.method=branch"])
    assert "branch mode (Merrill et al. 2025)" in method_named("branch").outline_lines(lm, budget(lm))[0]


def _meta(**changes):
    fields = dict(name="x", metric="accuracy", mode="max", spec={}, budget_samples=64, data_fingerprint="aa")
    return ExperimentMeta(**{**fields, **changes})


class _Data:
    def __init__(self, fingerprint):
        self.fingerprint = lambda: fingerprint


def test_resume_refuses_other_data_and_an_experiment_that_cannot_say_what_it_trained_on():
    _check_same_data(_meta(), Prepared(_Data("aa"), 64, None), "/x")  # the same data: resumes
    with pytest.raises(SpecError, match="the budget is now 128 samples"):
        _check_same_data(_meta(), Prepared(_Data("aa"), 128, None), "/x")
    with pytest.raises(SpecError, match="other tokens than the experiment's trials trained on"):
        _check_same_data(_meta(), Prepared(_Data("bb"), 64, None), "/x")
    with pytest.raises(SpecError, match="metadata format 1, without a fingerprint"):
        _check_same_data(_meta(format=1, data_fingerprint=None), Prepared(_Data("aa"), 64, None), "/x")


def test_a_branch_report_refuses_the_scratch_reports_flags_and_a_non_finite_target_is_exit_2(tmp_path, capsys):
    (tmp_path / META_FILE).write_text(json.dumps({"name": "lm", "method": "branch", "metric": "eval_loss",
                                                  "mode": "min", "spec": {}}))
    assert report_main([str(tmp_path), "--target", "3.0"]) == 2
    assert "--target: applies to a from-scratch experiment" in capsys.readouterr().err
    assert report_main([str(tmp_path), "--turning-point", "raw"]) == 2
    assert "--turning-point: applies to a from-scratch experiment" in capsys.readouterr().err
    for value in ("nan", "inf"):
        assert report_main([str(tmp_path), "--target", value]) == 2
        assert "--target: must be a finite number" in capsys.readouterr().err


def test_a_search_result_gives_the_answer_with_its_bound_not_the_number_alone():
    """Issue 28: ``result.critical_batch`` was 8 where the answer is "≤ 8" (the drop right after the smallest
    batch); ``result.answer`` carries the batch, the bound and the verdict."""
    import pandas as pd

    from cbs_ray.methods.scratch.reading import summarize

    rows = [{"trial_id": f"t{b}", "batch_size": b, "alpha": 1.0, "warmup_fraction": 0.1, "peak_lr": 1e-3,
             "samples_seen": 1024, "accuracy": accuracy, "wall_time_s": 1024 / b, "samples_per_s": float(b),
             "diverged": False} for b, accuracy in ((8, 0.80), (16, 0.70), (32, 0.65))]
    summary = summarize(pd.DataFrame(rows), metric="accuracy", mode="max", budget_samples=1024)
    from cbs_ray.report.reading import Reading
    from cbs_ray.tune.result import SearchResult

    result = SearchResult(load_spec(None), Reading(summary, pd.DataFrame(), (), summary.answer), "/x/exp", None)
    assert (result.answer.batch_size, result.answer.bound, result.answer.resolved) == (8, "upper", None)
    assert result.critical_batch == 8 and result.answer.text.startswith("Critical batch: ≤ 8 (")


def test_a_dry_run_s_plan_loads_no_torch_transformers_ray_pandas_nor_matplotlib():
    """Issue 35 (issue 36's target: the ladder's plan on markov_lm.yaml in ≤ 2 s): the plan of a ``--dry-run`` is
    printed from the spec and the data alone, before the model's checks import torch and transformers; nothing of
    Ray's machinery, pandas or matplotlib loads for it. In a fresh interpreter: this one has them all."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from cbs_ray.spec.load import load_spec\n"
            "from cbs_ray.tune.api import dry_run_lines\n"
            "lines = dry_run_lines(load_spec('search_spaces/markov_lm.yaml', ['search.method=ladder']))\n"
            "plan = [next(lines) for _ in range(5)]\n"
            "assert plan[0].startswith('markov-lm: ladder'), plan\n"
            "heavy = ('torch', 'transformers', 'ray', 'pandas', 'matplotlib', 'scipy', 'optuna')\n"
            "print(sorted(m for m in heavy if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
