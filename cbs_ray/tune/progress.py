"""What a search shows while it runs, instead of Tune's per-trial tables (those with ``--verbose``).

``ProgressBoard`` is the pure part: it follows the trials' events (started, reported, ended) and says
how many are done, running, stopped early, diverged or failed, how many samples are trained of those
planned, the elapsed time and an ETA, and the best metric per batch size so far. ``SearchProgress`` is the
Tune callback that feeds it, and shows it as a live block of three lines on a terminal (tqdm, which the
package's dependencies bring; tqdm's bar gives the samples, the elapsed time and the ETA), or as one plain
line per finished trial where the output is not a terminal (CI, ``ray job submit`` logs, a file).

Planned samples: a trial that ended counts what it trained (ASHA's stops shrink the plan), one that runs
or waits counts its whole span, and a trial not started yet counts ``default_span`` (the budget).

Running: a trial counts as running from its start to its end, except while Tune holds it paused (a synchronous
halving's candidate waiting at its rung, ``methods.scratch.per_batch_asha``): that one trains nothing and is counted as
paused, from Tune's trial states. A trial's end line counts the others at that instant: of two that
end together the first one's line still counts the second as running.

How a trial ended is read off the samples it trained: one that reached its plan's stop or the budget
D (``default_span``), whichever comes first, is ``done`` whatever ended it. A ladder run's plan may go on to
``ladder.cap`` × D while its stopper ends the smallest batch at D (``methods.ladder.search``): that run trained
the full budget and is never "stopped early"; only a trial that ended short of both is.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ray.tune import Callback

from cbs_ray.records.columns import Column
from cbs_ray.records.storage import error_lines

__all__ = ["ProgressBoard", "SearchProgress", "ENDINGS"]

ENDINGS = ("done", "stopped early", "diverged", "failed")
"""How a trial can end, in the order the board counts them."""


@dataclass
class _Trial:
    batch: int
    start: int
    stop: int
    samples: int = 0
    """Absolute samples at its last report (``samples_seen``)."""
    best: Optional[float] = None
    last: Optional[float] = None
    diverged: bool = False
    ending: Optional[str] = None
    reason: Optional[str] = None
    """Why a failed trial failed (the last line of its error file), for its line."""
    said: Optional[tuple] = None
    """(ending, samples) of the end its last line said: Tune can end a trial twice (a paused loser the halving
    stops), and the same end is said once."""

    def trained(self) -> int:
        return max(0, min(self.samples, self.stop) - self.start)


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _amount(samples: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if samples >= size:
            return f"{samples / size:.3g}{unit}"
    return f"{int(samples)}"


@dataclass
class ProgressBoard:
    """The search's progress, from its trials' events (pure: no Ray, no terminal)."""

    planned_trials: int
    default_span: int
    """The budget D: samples a trial not started yet is expected to train, and where a trial that reached them
    trained the full budget (``done``, even where its plan went further)."""
    metric: str
    mode: str
    clock: Callable[[], float] = time.monotonic
    trials: dict = field(default_factory=dict)
    started_at: Optional[float] = None
    paused: set = field(default_factory=set)
    """The trials Tune holds paused (``PAUSED``) as of its last hook: started, not ended, not running."""
    samples_before: int = 0
    """Samples trained before this driver started (the trials a resumed search had finished): counted as
    trained, but not in the rate the ETA reads."""

    def started(self, trial_id: str, batch: int, start: int, stop: int) -> None:
        if self.started_at is None:
            self.started_at = self.clock()
        trial = self.trials.setdefault(trial_id, _Trial(batch=batch, start=start, stop=stop))
        trial.ending = None  # a restarted trial runs again
        self.paused.discard(trial_id)

    def reported(self, trial_id: str, samples: int, value: Optional[float], diverged: bool = False) -> None:
        trial = self.trials[trial_id]
        trial.samples = max(trial.samples, int(samples))
        trial.diverged = trial.diverged or bool(diverged)
        if value is not None and math.isfinite(value) and not diverged:
            trial.last = value
            better = trial.best is None or (value < trial.best if self.mode == "min" else value > trial.best)
            trial.best = value if better else trial.best

    def ended(self, trial_id: str, *, failed: bool = False, reason: Optional[str] = None) -> str:
        """Mark the trial's end (``reason``: why a failed one failed); returns how it ended (one of ``ENDINGS``)."""
        trial = self.trials[trial_id]
        trial.ending = ("failed" if failed else "diverged" if trial.diverged
                        else "done" if self.reached_the_end(trial) else "stopped early")
        trial.reason = reason if failed else None
        return trial.ending

    def reached_the_end(self, trial: _Trial) -> bool:
        """Whether ``trial`` trained to its plan's stop or to the budget D, whichever comes first (both absolute
        samples: a branch's window ends before D; a ladder run's plan may end after it)."""
        return trial.samples >= min(trial.stop, self.default_span)

    def is_news(self, trial_id: str) -> bool:
        """Whether the trial's end is not the one its last line said (and, if so, that it is said now): a second
        end at the same samples with the same ending is not news."""
        trial = self.trials[trial_id]
        now = (trial.ending, trial.samples)
        news, trial.said = trial.said != now, now
        return news

    def ended_before(self, trial_id: str, batch: int, start: int, stop: int, *, samples: int,
                     value: Optional[float], diverged: bool = False, failed: bool = False) -> None:
        """A trial that had ended before this driver started (``--resume``): counted as ended, its samples as
        trained (``samples_before``: not in the ETA's rate), its last reading in the best per batch."""
        if trial_id in self.trials:
            return
        trial = self.trials[trial_id] = _Trial(batch=batch, start=start, stop=stop)
        self.reported(trial_id, samples, value, diverged)
        self.ended(trial_id, failed=failed)
        self.samples_before += trial.trained()

    # ---- what it shows ----------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Trials running, paused (by Tune) and ended each way (``ENDINGS``)."""
        ended = [t.ending for t in self.trials.values()]
        paused = sum(t.ending is None and i in self.paused for i, t in self.trials.items())
        return {"running": ended.count(None) - paused, "paused": paused, **{e: ended.count(e) for e in ENDINGS}}

    def follow_states(self, statuses: dict[str, str]) -> bool:
        """Take Tune's trial states (trial id → ``status``) for which trials are paused; whether that changed."""
        paused = {i for i, status in statuses.items() if status == "PAUSED"}
        changed, self.paused = paused != self.paused, paused
        return changed

    def _running(self, c: dict[str, int]) -> str:
        return f"{c['running']} running" + (f", {c['paused']} paused" if c["paused"] else "")

    def trained_samples(self) -> int:
        return sum(t.trained() for t in self.trials.values())

    def planned_samples(self) -> int:
        known = sum(t.trained() if t.ending else t.stop - t.start for t in self.trials.values())
        return known + max(0, self.planned_trials - len(self.trials)) * self.default_span

    def elapsed_s(self) -> float:
        return 0.0 if self.started_at is None else self.clock() - self.started_at

    def eta_s(self) -> Optional[float]:
        """Seconds left at the rate so far (None before the first sample)."""
        trained = self.trained_samples()
        now = trained - self.samples_before  # what this driver trained, at the rate so far
        if now <= 0:
            return None
        return self.elapsed_s() * max(0, self.planned_samples() - trained) / now

    def best_per_batch(self) -> dict[int, Optional[float]]:
        best: dict[int, Optional[float]] = {}
        for t in sorted(self.trials.values(), key=lambda t: t.batch):
            current = best.get(t.batch)
            if t.best is not None and (current is None
                                       or (t.best < current if self.mode == "min" else t.best > current)):
                best[t.batch] = t.best
            else:
                best.setdefault(t.batch, current)
        return best

    def trials_line(self) -> str:
        c = self.counts()
        ended = self.planned_trials - c["running"] - c["paused"] - max(0, self.planned_trials - len(self.trials))
        return (f"trials {ended}/{self.planned_trials} ended: {c['done']} done, {self._running(c)}, "
                f"{c['stopped early']} stopped early, {c['diverged']} diverged, {c['failed']} failed")

    def best_line(self) -> str:
        best = self.best_per_batch()
        cells = [f"{b} {'–' if v is None else f'{v:.4g}'}" for b, v in best.items()]
        return f"best {self.metric} per batch: " + (" · ".join(cells) if cells else "none yet")

    def time_line(self) -> str:
        eta = self.eta_s()
        return (f"samples {_amount(self.trained_samples())} of {_amount(self.planned_samples())} planned · elapsed "
                f"{_clock(self.elapsed_s())} · ETA {'–' if eta is None else _clock(eta)}")

    def event_line(self, trial_id: str) -> str:
        """The plain line of a trial that just ended (where the output is not a terminal)."""
        t = self.trials[trial_id]
        result = "" if t.last is None else f": {self.metric} {t.last:.4g}"
        why = f" ({t.reason[:200]})" if t.reason else ""
        c, eta = self.counts(), self.eta_s()
        return (f"[{_clock(self.elapsed_s())}] trial B={t.batch} {t.ending}{result} at {t.samples} samples{why} · "
                f"{sum(c[e] for e in ENDINGS)}/{self.planned_trials} ended, {self._running(c)} · "
                f"ETA {'–' if eta is None else _clock(eta)}")


class SearchProgress(Callback):
    """The Tune callback that shows a ``ProgressBoard`` (module docstring). ``span_of(config)`` gives a trial's
    batch size and the samples it starts and stops at: ``(batch, start, stop)``."""

    def __init__(self, board: ProgressBoard, span_of: Callable[[dict], tuple[int, int, int]], *,
                 live: Optional[bool] = None, stream=None):
        self.board, self.span_of = board, span_of
        self.stream = stream
        self.live = live
        self._bars: Optional[tuple[Any, Any, Any]] = None

    def __getstate__(self):  # Tune pickles its callbacks with the experiment; the bars stay here
        return {**self.__dict__, "_bars": None, "stream": None}

    def __setstate__(self, state):
        # Restored by --resume: the pickled board is as it was at some snapshot, its clock another process's;
        # the first step rebuilds it from the trials Tune restored (``on_step_begin``).
        self.__dict__.update(state)
        self._restored = True

    def _out(self):
        return self.stream or sys.stdout

    def _is_live(self) -> bool:
        if self.live is None:
            self.live = bool(getattr(self._out(), "isatty", lambda: False)())
        return self.live

    # ---- Tune's hooks -----------------------------------------------------------------------------

    def on_step_begin(self, iteration, trials, **info):
        # A resumed search: Tune restores the trials that had ended without calling a hook for them.
        if getattr(self, "_restored", False):
            self._restored = False
            self.board.trials.clear()
            self.board.started_at, self.board.samples_before, self.board.paused = None, 0, set()
        for t in trials:
            if t.status in ("TERMINATED", "ERROR") and t.trial_id not in self.board.trials:
                batch, start, stop = self.span_of(t.config)
                last = t.last_result or {}
                self.board.ended_before(t.trial_id, batch, start, stop, samples=int(last.get(Column.samples_seen, 0)),
                                        value=last.get(self.board.metric), diverged=bool(last.get(Column.diverged)),
                                        failed=t.status == "ERROR")
        if self.board.follow_states({t.trial_id: t.status for t in trials}):  # a halving candidate paused or went on
            self._show()

    def on_trial_start(self, iteration, trials, trial, **info):
        batch, start, stop = self.span_of(trial.config)
        self.board.started(trial.trial_id, batch, start, stop)
        self._show()

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if trial.trial_id not in self.board.trials:
            self.on_trial_start(iteration, trials, trial)
        self.board.reported(trial.trial_id, result.get(Column.samples_seen, 0), result.get(self.board.metric),
                            bool(result.get(Column.diverged, False)))
        self._show()

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._ended(trial, failed=False)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._ended(trial, failed=True)

    def on_experiment_end(self, trials, **info):
        self._show()
        if self._bars:
            for bar in self._bars:
                bar.close()
            self._bars = None

    # ---- showing it -------------------------------------------------------------------------------

    def _ended(self, trial, *, failed: bool) -> None:
        if trial.trial_id not in self.board.trials:
            batch, start, stop = self.span_of(trial.config)
            self.board.started(trial.trial_id, batch, start, stop)
        lines = error_lines(trial) if failed else []
        ending = self.board.ended(trial.trial_id, failed=failed, reason=lines[-1] if lines else None)
        news = self.board.is_news(trial.trial_id)  # a loser Tune ends twice is said once
        if news and not self._is_live():
            print(self.board.event_line(trial.trial_id), file=self._out(), flush=True)
        elif news and ending == "failed":
            from tqdm import tqdm

            tqdm.write(self.board.event_line(trial.trial_id), file=self._out())
        self._show()

    def _show(self) -> None:
        if not self._is_live():
            return
        from tqdm import tqdm

        if self._bars is None:
            out = self._out()
            self._bars = (tqdm(bar_format="{desc}", position=0, file=out, leave=True),
                          tqdm(total=1, unit="sample", unit_scale=True, desc="samples", position=1, file=out,
                               leave=True, dynamic_ncols=True),
                          tqdm(bar_format="{desc}", position=2, file=out, leave=True))
        status, samples, best = self._bars
        status.set_description_str(self.board.trials_line(), refresh=True)
        samples.total = max(1, self.board.planned_samples())
        samples.n = min(self.board.trained_samples(), samples.total)
        samples.refresh()
        best.set_description_str(self.board.best_line(), refresh=True)
