"""The ``bisect`` strategy on Tune: a thin ``Searcher`` over the pure policy ``maths.bisection.Bisection``.

Tune asks ``suggest`` whenever it may start a trial; the searcher hands out the policy's next run (its warmup by
the seed rule, ``maths.lr_schedule.seed_warmup_fraction``), ``None`` while the next decision waits on a running
trial, and ``FINISHED`` once the policy has nothing left to ask. It paces itself (``paces_itself``: the runner sets no
``max_concurrent_trials``, whose ``ConcurrencyLimiter`` would count the alpha candidates that wait paused at their
rung as running, and never start the last one). ``on_trial_complete`` tells the policy how each run ended: its
metric where it completed the budget, nothing where it was stopped early (by the halving at the alpha batch),
NaN where it diverged or failed. Its state is pickled with the experiment, so ``--resume`` continues the walk
where it stopped.
"""

from __future__ import annotations

import math
import pickle
from typing import Optional

from ray.tune.search import Searcher

from cbs_ray.maths.bisection import Bisection, Run, middle_first
from cbs_ray.maths.lr_schedule import seed_warmup_fraction
from cbs_ray.maths.minimax_walk import runs_by_answer
from cbs_ray.records.trial_point import BATCH_KEY, encode_batch
from cbs_ray.spec.schema import SearchSpec
from cbs_ray.spec.sections import spec_tolerances
from cbs_ray.tune.search_space import evenly_spaced

__all__ = ["AlphaRank", "BisectionSearcher", "bisection_for", "bisection_alphas", "bisection_outline_lines",
           "halving_rung", "walk_line"]


def bisection_alphas(spec: SearchSpec) -> list[float]:
    """The alpha candidates: the ``grid`` strategy's alphas (``search.grid_points`` evenly spaced over
    ``search.alpha_range``; 3: the ends and the middle), the middle first (the seeded configurations' alpha: the
    first candidate, which always goes on from the rung)."""
    low, high = spec.search.alpha_range
    return middle_first(evenly_spaced(low, high, spec.search.grid_points))


def bisection_for(spec: SearchSpec) -> Bisection:
    s = spec.search
    tolerance = spec_tolerances(spec)[0]
    return Bisection(list(spec.batch_sizes), bisection_alphas(spec), mode=s.mode, tolerance=tolerance.value,
                     relative=tolerance.relative, base_batch=spec.training.base_batch)


def _amount(spec: SearchSpec) -> str:
    """The tolerance as the halving applies it: "0.01 nats", "1 % of the prior's metric"."""
    tol = spec_tolerances(spec)[0]
    return f"{tol.value * 100:g} % of the prior's metric" if tol.relative else f"{tol.value:g} nats"


def halving_rung(spec: SearchSpec, budget_samples: int) -> Optional[int]:
    """Where the alpha candidates are compared (ASHA's first rung, ``asha.grace_period_samples``); None where
    they all train to the full budget (no early stopping, or the rung not below the budget)."""
    rung = spec.asha.grace_period_samples
    return rung if spec.search.early_stopping and rung < budget_samples else None


def bisection_outline_lines(spec: SearchSpec, budget_samples: int) -> list[str]:
    """``--dry-run``: what the bisection trains, at most, against one run per batch at the prior alpha (the plain
    alternative) and against the exhaustive grid (every batch × alpha × warmup point of the ``grid``
    strategy, each to the full budget), and the batches it trains for each answer
    where the outcomes are a clean threshold (``minimax_walk.runs_by_answer``)."""
    policy = bisection_for(spec)
    rung = halving_rung(spec, budget_samples)
    losers = len(policy.alphas) - 1
    most = len(spec.batch_sizes) + losers * (rung / budget_samples if rung else 1.0)  # in full runs' samples
    grid_runs = len(spec.batch_sizes) * spec.search.grid_points ** 2
    halving = (f"each trains to {rung} samples and waits until all have; then {policy.alphas[0]} goes on, the best "
               f"other too only where it leads by more than the tolerance {_amount(spec)}, the rest stop; "
               f"alpha is the best at the full budget" if rung else "each to the full budget")
    start = (f"alpha chosen once at B={policy.alpha_batch} among {policy.alphas} ({halving}), warmup by the seed "
             f"rule; then batch {policy.grid[0]}" if len(policy.alphas) > 1 else
             f"alpha {policy.alphas[0]} (one candidate: nothing to choose), warmup by the seed rule; batch "
             f"{policy.grid[0]} first")
    return [f"  bisect: {start}, then in the bracket above the monotone turning point the batch with the fewest "
            f"full runs in the worst case (then on average) until the answer and its neighbours are measured, "
            f"each once",
            f"  at most {most:.3g} runs' samples ({most * budget_samples:.0f}) where no other alpha leads"
            + (f" (+{1 - rung / budget_samples:.3g} where one does)" if rung else "")
            + f" = {most / len(spec.batch_sizes):.2f} of one run per batch at the prior alpha ({len(spec.batch_sizes)} "
            f"runs), {most / grid_runs:.3f} of the exhaustive grid ({grid_runs} runs: {len(spec.batch_sizes)} batches "
            f"x {spec.search.grid_points} alphas x {spec.search.grid_points} warmups)",
            walk_line(policy)]


def walk_line(policy: Bisection) -> str:
    """The batches trained at the chosen alpha for each answer, on a clean threshold (noise can add some)."""
    grid = policy.grid
    start = policy.start_indices() + ([grid.index(policy.alpha_choice_batch())] if len(policy.alphas) > 1 else [])
    orders = runs_by_answer(len(grid), start)
    runs = ", ".join(f"{grid[a]}: {len(order)}" for a, order in orders.items())
    return (f"  full runs by answer where the outcomes are a clean threshold: {runs} (worst "
            f"{max(len(o) for o in orders.values())}; e.g. {grid[len(grid) // 2]}: "
            f"{' '.join(str(grid[i]) for i in orders[len(grid) // 2])})")


class AlphaRank:
    """A halving candidate's place among the alpha candidates from its trial's config (0: the prior, the first
    of ``bisection_alphas``): ``PerBatchASHA``'s ``halving_rank``. A class, not a closure: Tune pickles the
    scheduler with the experiment."""

    def __init__(self, alphas: list[float]):
        self.alphas = list(alphas)

    def __call__(self, config: dict) -> float:
        alpha = config.get("alpha")
        if alpha is None:
            return math.inf
        return min(range(len(self.alphas)), key=lambda i: abs(self.alphas[i] - alpha))


class BisectionSearcher(Searcher):
    """Tune's side of the ``bisect`` strategy (module docstring)."""

    paces_itself = True
    """The runner sets no concurrency limit for it (module docstring)."""

    def __init__(self, policy: Bisection, *, warmups: dict[int, float], budget_samples: int, metric: str,
                 mode: str):
        super().__init__(metric=metric, mode=mode)
        self.policy = policy
        self.warmups = warmups
        self.budget_samples = budget_samples
        self.queue: list[Run] = []
        self.trial_runs: dict[str, Run] = {}

    @classmethod
    def for_spec(cls, spec: SearchSpec, budget_samples: int) -> "BisectionSearcher":
        s = spec.search
        warmups = {b: seed_warmup_fraction(s.warmup_fraction_range, b, spec.training.base_batch)
                   for b in spec.batch_sizes}
        return cls(bisection_for(spec), warmups=warmups, budget_samples=budget_samples, metric=s.metric, mode=s.mode)

    @property
    def most_trials(self) -> int:
        """The most trials the walk can start: every alpha candidate, then every other batch once."""
        return len(self.policy.alphas) + len(self.policy.grid) - 1

    def expected_trials(self) -> int:
        """The trials started, once the walk has finished; until then the most it can start."""
        return len(self.trial_runs) if self.policy.finished else self.most_trials

    def suggest(self, trial_id: str) -> Optional[dict]:
        if not self.queue:
            self.queue += self.policy.next_runs()
        if not self.queue:
            # Ray annotates suggest's return Optional[Dict] but documents Searcher.FINISHED (a str) as its end
            return Searcher.FINISHED if self.policy.finished else None  # type: ignore[return-value]
        run = self.queue.pop(0)
        self.trial_runs[trial_id] = run
        return {BATCH_KEY: encode_batch(run.batch), "alpha": run.alpha,
                "warmup_fraction": self.warmups[run.batch]}

    def on_trial_complete(self, trial_id: str, result: Optional[dict] = None, error: bool = False) -> None:
        run = self.trial_runs.get(trial_id)
        if run is None:
            return
        self.policy.ended(run, self.metric_of(result, error))

    def metric_of(self, result: Optional[dict], error: bool) -> Optional[float]:
        """The run's metric at the full budget; None where it stopped early (no result: stopped while it waited
        paused); NaN where it failed or diverged."""
        if not error and not result:
            return None
        if error or result is None or result.get("diverged"):
            return math.nan
        if result.get("samples_seen", 0) < self.budget_samples:
            return None
        value = result.get(self.metric)
        return float(value) if value is not None else math.nan

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.__dict__, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.__dict__.update(pickle.load(f))
