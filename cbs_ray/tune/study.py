"""The search's Optuna study, kept in a database or a journal file (``search.study_storage``) so that
``optuna-dashboard`` shows it while the search runs and it outlives the search.

Ray's ``OptunaSearch`` takes the storage (``storage=``, ``study_name=``; ray-project/ray#48547) and asks
and tells the study; ``PersistentStudySearch`` only makes what it writes there exact:

- Intermediate values are stepped by ``samples_seen`` (not Tune's iteration count), and a trial that ASHA
  stopped before the full budget is told as *pruned*: Optuna then records its last intermediate value.
  A trial that trained the whole budget is *complete* with its final value; a diverged one is complete
  too, with the worst value its task reports (TPE should learn that this region is bad), and is marked
  ``diverged`` in its user attributes.
- Each study trial carries the Tune trial's id (``tune_trial_id``) and its batch size as user attributes.
- After ``--resume``: Tune restores the searcher from its last snapshot. A trial the killed driver had
  asked for after that snapshot was never run and never will be (Tune does not know it); it is told
  *failed*, with ``orphaned`` in its user attributes, so that every study trial that is not failed is
  exactly one Tune trial. A trial told before the kill and finished again after the resume keeps its first
  value (Optuna refuses a second tell; nothing is duplicated).
"""

from __future__ import annotations

import logging
import math

from optuna.trial import TrialState
from ray.tune.search.optuna import OptunaSearch

from cbs_ray.records.trial_point import BATCH_KEY, decode_batch
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.paths import expand_user

__all__ = ["open_storage", "check_study", "PersistentStudySearch", "trial_outcome", "ORPHANED"]

logger = logging.getLogger(__name__)

ORPHANED = "asked by a driver that was killed before Tune saved the trial; never run"


def open_storage(url: str):
    """An Optuna storage for ``url``: an RDB storage for a database URL (``sqlite:///…``), a journal
    storage for a file path. Relative sqlite and journal paths are made absolute now, so that a resumed
    search started elsewhere opens the same file. Raises ``SpecError`` when it cannot be opened."""
    import optuna
    from optuna.storages import JournalStorage, RDBStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        if "://" not in url:
            path = expand_user(url, "search.study_storage").resolve()
            if not path.parent.is_dir():
                raise OSError(f"no directory {path.parent}")
            return JournalStorage(JournalFileBackend(str(path)))
        if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
            url = f"sqlite:///{expand_user(url[len('sqlite:///'):], 'search.study_storage').resolve()}"
        return RDBStorage(url)
    except SpecError:
        raise
    except Exception as e:  # a bad URL, a missing driver, a database that refuses the connection
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SpecError(f"search.study_storage: cannot open {url!r}: {reason}") from None


def check_study(storage, study_name: str, *, metric: str, mode: str) -> int:
    """Check that ``study_name`` in ``storage`` can hold this search: absent, or a study with the same
    direction and metric (it is then continued). Returns how many trials it already holds."""
    import optuna

    direction = optuna.study.StudyDirection.MAXIMIZE if mode == "max" else optuna.study.StudyDirection.MINIMIZE
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        if summary.study_name != study_name:
            continue
        if summary.directions != [direction]:
            raise SpecError(f"search.study_name: study {study_name!r} already exists with direction "
                            f"{summary.directions[0].name.lower()}; this search's {metric} is to be "
                            f"{direction.name.lower()}d: choose another search.study_name")
        known = summary.user_attrs.get("metric")
        if known not in (None, metric):
            raise SpecError(f"search.study_name: study {study_name!r} already holds trials of {known}, this "
                            f"search reports {metric}: choose another search.study_name")
        return summary.n_trials
    return 0


def trial_outcome(result: dict | None, *, error: bool, metric: str, budget_samples: int):
    """How a finished Tune trial is told to Optuna: ``(state, value)``: *failed* when it errored or
    reported no value, *pruned* when it stopped (ASHA) before ``budget_samples`` without diverging,
    else *complete* with its last value. Pruned and failed trials are told without a value (Optuna keeps
    a pruned trial's last intermediate value)."""
    value = None if not result else result.get(metric)
    if error or result is None or value is None or math.isnan(value):
        return TrialState.FAIL, None
    if not result.get("diverged") and result.get("samples_seen", budget_samples) < budget_samples:
        return TrialState.PRUNED, None
    return TrialState.COMPLETE, float(value)


class PersistentStudySearch(OptunaSearch):
    """Ray's ``OptunaSearch`` that tells the study exactly what happened to each trial (see the module's
    docstring); ``budget_samples`` tells a pruned trial from a complete one."""

    def __init__(self, *args, budget_samples: int, **kwargs):
        super().__init__(*args, **kwargs)
        self._budget_samples = budget_samples

    def _setup_study(self, mode):
        super()._setup_study(mode)
        assert self._ot_study is not None  # made by OptunaSearch._setup_study
        self._ot_study.set_user_attr("metric", self._metric)

    def suggest(self, trial_id: str):
        config = super().suggest(trial_id)
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is not None and "tune_trial_id" not in ot_trial.user_attrs:
            ot_trial.set_user_attr("tune_trial_id", trial_id)
            if BATCH_KEY in ot_trial.params:
                ot_trial.set_user_attr("batch_size", decode_batch(ot_trial.params[BATCH_KEY]))
        return config

    def on_trial_result(self, trial_id: str, result: dict):
        value = result.get(self._metric)
        if trial_id in self._completed_trials or value is None or math.isnan(value):
            return
        try:
            self._ot_trials[trial_id].report(float(value), int(result["samples_seen"]))
        except Exception as e:  # told before a driver loss, or a step reported twice
            logger.debug("not reported to the study: %s", e)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
        if trial_id in self._completed_trials:
            return
        ot_trial = self._ot_trials[trial_id]
        assert self._metric is not None and self._ot_study is not None  # set up before any trial (OptunaSearch)
        state, value = trial_outcome(result, error=error, metric=self._metric, budget_samples=self._budget_samples)
        try:
            if result and result.get("diverged"):
                ot_trial.set_user_attr("diverged", True)
            if state == TrialState.PRUNED and result is not None:
                # the result that made ASHA stop it reached the searcher only here; Optuna keeps a pruned
                # trial's last intermediate value as its value
                ot_trial.report(float(result[self._metric]), int(result["samples_seen"]))
            self._ot_study.tell(ot_trial, value, state=state)
        except Exception as e:  # told before a driver loss: the first value stands
            logger.debug("not told to the study: %s", e)
        self._completed_trials.add(trial_id)

    def restore(self, checkpoint_path: str):
        super().restore(checkpoint_path)
        fail_orphans(self._ot_study, known={t.number for t in self._ot_trials.values()})


def fail_orphans(study, *, known: set[int]) -> list[int]:
    """Tell *failed* every running trial of ``study`` that no Tune trial stands for (numbers not in
    ``known``), marked ``orphaned``; returns their numbers."""
    from optuna.trial import Trial

    orphans = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) if t.number not in known]
    for frozen in orphans:
        Trial(study, frozen._trial_id).set_user_attr("orphaned", ORPHANED)
        study.tell(frozen.number, state=TrialState.FAIL)
    return [t.number for t in orphans]
