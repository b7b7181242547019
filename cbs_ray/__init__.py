"""cbs-ray: find the critical batch size of transformer training with Ray Tune and Ray Train.

The maths (LR rules, turning point, Pareto front) is pure and imports no Ray; ``run_search`` is the
Python API behind ``python -m cbs_ray.search``.
"""

from cbs_ray.maths.budget import BatchPlan, milestones, optimizer_steps, plan_batch
from cbs_ray.maths.critical_batch import turning_point
from cbs_ray.maths.lr_schedule import lr_multiplier, scaled_lr, warmup_steps
from cbs_ray.maths.noise_scale import noise_scale
from cbs_ray.maths.pareto import pareto_front
from cbs_ray.maths.tradeoff import TradeoffFit, fit_tradeoff, overhead_rule
from cbs_ray.maths.uncertainty import accuracy_standard_error, turning_point_range, verdict
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.spec.schema import SearchSpec

__all__ = ["SearchSpec", "SpecError", "load_spec", "run_search", "resume_search", "SearchResult", "DoesNotFit",
           "turning_point", "pareto_front", "scaled_lr", "warmup_steps", "lr_multiplier", "plan_batch", "BatchPlan",
           "milestones", "optimizer_steps", "fit_tradeoff", "TradeoffFit", "overhead_rule", "analyze",
           "Report", "noise_scale", "accuracy_standard_error", "turning_point_range", "verdict"]


def __getattr__(name):
    # The API pulls in pandas and Ray's Tune (the report pandas and matplotlib); loaded on first use, so
    # that `import cbs_ray` stays light for the maths.
    if name in ("run_search", "resume_search", "SearchResult"):
        from cbs_ray.tune import api

        return getattr(api, name)
    if name == "DoesNotFit":
        from cbs_ray.tune import runner

        return runner.DoesNotFit
    if name in ("analyze", "Report"):
        from cbs_ray.methods.scratch import report

        return getattr(report, name)
    raise AttributeError(name)
