"""A field's own checks, declared beside the field (``vocab_size: int = field(default=2000,
metadata=check(at_least(10)))``): each ``Check`` is a predicate and the message that names what it wants.
"""

from __future__ import annotations

import functools
import math
import types
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from cbs_ray.records.method_registry import method_entry, method_names
from cbs_ray.records.names import NAME_MAX_BYTES, name_problem
from cbs_ray.spec.errors import SpecError

if TYPE_CHECKING:  # a type only: the schema imports this module
    from cbs_ray.spec.schema import SearchSpec

# ---- single-field checks, declared beside their fields ---------------------------------------------

@dataclass(frozen=True)
class Check:
    """A rule on one field's own value, declared beside the field as ``field(..., metadata=check(...))``
    and applied by ``validate``. ``says`` is the message after ``<field>: ``, formatted with ``value``.
    A None in an Optional field is never checked (None means "not set")."""
    ok: Callable[[Any], bool]
    says: str

    def __call__(self, value: Any, path: str) -> None:
        if not self.ok(value):
            raise SpecError(f"{path}: {self.says.format(value=value)}")


def check(*checks: Check) -> dict:
    """Field metadata declaring ``checks``, applied in order; the first that fails is the error."""
    return {"checks": checks}


def _got(show_value: bool) -> str:
    return ", got {value}" if show_value else ""


@dataclass(frozen=True)
class RegisteredMethod(Check):
    """``search.method``: one of the methods in ``records.method_registry`` when the spec is checked (a method
    registered after this module loaded counts too)."""

    def __call__(self, value: Any, path: str) -> None:
        if not self.ok(value):
            raise SpecError(f"{path}: {self.says.format(value=value, known=', '.join(method_names()))}")


def a_registered_method() -> Check:
    return RegisteredMethod(lambda v: v in method_names(), "must be one of {known}, got {value!r}")


def reads_section(spec: SearchSpec, section: object) -> bool:
    """Whether the spec's method reads ``section``, one of the methods' sections the spec holds
    (``SearchSpec.section``): the section its registry entry names (``MethodEntry.section``) is that very object. A
    section's rules and validation switches ask this, so that no rule names a method."""
    key = method_entry(spec.search.method).section
    return key is not None and spec.method_sections.get(key) is section


def positive(says: str = "must be positive", *, show_value: bool = True) -> Check:
    return Check(lambda v: v > 0, says + _got(show_value))


def at_least(low: int, *, show_value: bool = True) -> Check:
    return Check(lambda v: v >= low, f"must be at least {low}" + _got(show_value))


MAX_REPEATS = 100
"""The most runs of one configuration a spec may ask for (``search.repeats``, ``branch.repeats``,
``branch.validation_seeds``, ``ladder.seeds``): each multiplies the trials, and 100 is already hundreds of runs;
``ladder.seeds=1e8`` (400 M trials) was accepted."""


def a_count(most: int) -> Check:
    """A count of runs from 1 to ``most``: more is a typo, not a plan."""
    return Check(lambda v: 1 <= v <= most, f"must be from 1 to {most} (each one multiplies the trials), got {{value}}")


def between(low: float, high: float, *, show_value: bool = True) -> Check:
    """From ``low`` to ``high``, both included (NaN and infinities fail: every comparison with NaN is false). The
    upper bounds are generous (each field's docstring says why its bound); what they stop is a typo or a hostile
    value that hung the plan or exhausted memory after Ray started."""
    return Check(lambda v: low <= v <= high, f"must be from {low} to {high}" + _got(show_value))


SEED_MAX = 2**32 - 1
"""The largest seed: numpy's ``RandomState`` and Optuna's samplers take a 32-bit unsigned seed (a negative one
failed after Ray started)."""

MAX_SAMPLES = 2**40
"""The largest budget or cadence in samples (~1.1e12): more than any pre-training run's samples (15 T tokens
of 8192-token samples is 1.8e9)."""

MAX_TOKENS = 2**50
"""The largest token budget (~1.1e15): 70 times the largest published pre-training runs' 15 T tokens."""

MAX_SEQUENCE = 2**17
"""The longest sequence, source or target (131 072 tokens): the longest contexts models train with today."""

MAX_BUILTIN_EXAMPLES = 10**7
"""The most examples a built-in task generates in memory (10 M: ~1.3 GB of int64 at 16 tokens)."""

MAX_TRIALS = 10_000
"""The most trials of a search: Tune keeps every trial in the driver's memory, and 10 000 is far beyond any grid
here (18 by default); 10⁹ was accepted."""

MAX_GRID_POINTS = 100
"""The most points per range of the ``grid`` and ``bisect`` strategies: 100 alphas are finer than any LR rule
tells apart, and 10⁶ hung ``--dry-run`` (``maths.bisection.middle_first``)."""


def non_negative() -> Check:
    return Check(lambda v: v >= 0, "must be >= 0, got {value}")


def greater_than(low: float) -> Check:
    return Check(lambda v: v > low, f"must be greater than {low}, got {{value}}")


def within(low: float, high: float, *, ends: str) -> Check:
    """``low``..``high`` with ``ends`` as written in the message: ``"[)"`` includes low and excludes high."""
    above = (lambda v: v >= low) if ends[0] == "[" else (lambda v: v > low)
    below = (lambda v: v <= high) if ends[1] == "]" else (lambda v: v < high)
    return Check(lambda v: above(v) and below(v), f"must be in {ends[0]}{low}, {high}{ends[1]}, got {{value}}")


def low_high_pair() -> Check:
    """A ``[low, high]`` list of two numbers."""
    def ok(v):
        return len(v) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
    return Check(ok, "expected [low, high], got {value!r}")


def ordered_within(low: float, high: float) -> Check:
    """A ``[low, high]`` pair (see ``low_high_pair``) with low <= high, both within [``low``, ``high``]."""
    return Check(lambda v: low <= v[0] <= v[1] <= high,
                 f"must satisfy {low} <= low <= high <= {high}, got {{value!r}}")


DIRECTORY_NAME = Check(lambda v: name_problem(v) is None,
                       "must be one folder name (no spaces, slashes, control characters, . or ..; at most "
                       f"{NAME_MAX_BYTES} bytes in UTF-8), got {{value!r:.120}}")
HAS_MODEL_TYPE = Check(lambda c: "model_type" in c, "must contain model_type (e.g. bert, gpt2)")
BUILTIN_METRICS = ("accuracy", "eval_loss", "perplexity", "bleu", "excess_loss")
"""The metrics the spec path computes; ``search.metric`` may name another only with ``compute_metrics``."""
METRIC_NAME = Check(lambda v: bool(v) and v.replace("_", "").replace("-", "").isalnum(),
                    "must be a metric's name (accuracy, eval_loss, perplexity, bleu, excess_loss, or a key "
                    "compute_metrics returns), got {value!r}")
POSITIVE_NUMBER = Check(lambda v: v > 0 and math.isfinite(v), "must be a positive number, got {value}")


def join_key(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


@functools.cache
def type_hints_of(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def admits_none(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def expand_batch_sizes(value: Any) -> list[int]:
    if isinstance(value, dict):
        unknown = set(value) - {"min", "max"}
        if unknown or not {"min", "max"} <= set(value):
            raise SpecError("search.batch_sizes: expected {min: B, max: B} or a list of powers of two")
        low, high = value["min"], value["max"]
        for name, b in (("min", low), ("max", high)):
            check_power_of_two(b, f"search.batch_sizes.{name}")
        if low > high:
            raise SpecError("search.batch_sizes: min is larger than max")
        return [2 ** k for k in range(low.bit_length() - 1, high.bit_length())]
    if isinstance(value, list):
        return batch_list(value, "search.batch_sizes")
    raise SpecError(f"search.batch_sizes: expected a list or {{min, max}}, got {value!r}")


def batch_list(values: list, path: str) -> list[int]:
    """A listed grid of batch sizes (``search.batch_sizes``, ``branch.batch_sizes``): non-empty, powers of two,
    no duplicate; sorted."""
    if not values:
        raise SpecError(f"{path}: empty list")
    for b in values:
        check_power_of_two(b, path)
    if len(set(values)) != len(values):
        raise SpecError(f"{path}: duplicate batch size")
    return sorted(values)


def check_power_of_two(b: Any, path: str) -> None:
    if isinstance(b, bool) or not isinstance(b, int):
        raise SpecError(f"{path}: expected integer batch sizes, got {b!r}")
    if b <= 0:
        raise SpecError(f"{path}: batch size must be positive, got {b}")
    if b & (b - 1):
        raise SpecError(f"{path}: batch size must be a power of two, got {b}")
