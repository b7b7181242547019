"""cbs-ray: find the critical batch size of transformer training with Ray Tune and Ray Train.

The maths (LR rules, turning point, Pareto front) is pure and imports no Ray; ``run_search`` is the
Python API behind ``python -m cbs_ray.search``.
"""

from .budget import BatchPlan, milestones, optimizer_steps, plan_batch
from .critical_batch import turning_point
from .noise_scale import noise_scale
from .pareto import pareto_front
from .lr_schedule import lr_multiplier, scaled_lr, warmup_steps
from .spec import SearchSpec, SpecError, load_spec
from .tradeoff import TradeoffFit, fit_tradeoff, overhead_rule
from .uncertainty import accuracy_standard_error, turning_point_range, verdict

__all__ = ["SearchSpec", "SpecError", "load_spec", "run_search", "SearchResult", "DoesNotFit", "turning_point",
           "pareto_front", "scaled_lr", "warmup_steps", "lr_multiplier", "plan_batch", "BatchPlan",
           "milestones", "optimizer_steps", "fit_tradeoff", "TradeoffFit", "overhead_rule", "analyze",
           "Report", "noise_scale", "accuracy_standard_error", "turning_point_range", "verdict"]


def __getattr__(name):
    # The search module pulls in pandas (and Ray lazily); keep `import cbs_ray` light for the maths.
    if name in ("run_search", "SearchResult", "DoesNotFit"):
        from . import search

        return getattr(search, name)
    if name in ("analyze", "Report"):
        from . import report

        return getattr(report, name)
    raise AttributeError(name)
