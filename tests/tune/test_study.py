"""The persistent Optuna study (search.study_storage): how each trial is told, orphans after a driver
loss, the checks made before Ray starts. Ray's searcher is driven by hand here; no Ray is started."""


import optuna
import pytest
from optuna.trial import TrialState
from ray import tune

from cbs_ray.spec.errors import SpecError
from cbs_ray.tune.study import ORPHANED, PersistentStudySearch, check_study, fail_orphans, open_storage, trial_outcome

BUDGET = 4096


@pytest.mark.parametrize("result,error,expected", [
    ({"accuracy": 0.8, "samples_seen": 4096}, False, (TrialState.COMPLETE, 0.8)),  # the whole budget
    ({"accuracy": 0.6, "samples_seen": 2048}, False, (TrialState.PRUNED, None)),   # ASHA stopped it at half
    ({"accuracy": 0.0, "samples_seen": 1024, "diverged": True}, False, (TrialState.COMPLETE, 0.0)),  # a bad value
    ({"accuracy": 0.7, "samples_seen": 2048}, True, (TrialState.FAIL, None)),      # it raised
    ({"accuracy": float("nan"), "samples_seen": 4096}, False, (TrialState.FAIL, None)),
    (None, False, (TrialState.FAIL, None)),                                       # never reported
])
def test_trial_outcome(result, error, expected):
    assert trial_outcome(result, error=error, metric="accuracy", budget_samples=BUDGET) == expected


def _searcher(storage, name="s"):
    searcher = PersistentStudySearch(space={"log2_batch": tune.choice([3, 4]), "alpha": tune.uniform(0.5, 1.0)},
                                     metric="accuracy", mode="max", budget_samples=BUDGET, storage=storage,
                                     study_name=name, sampler=optuna.samplers.RandomSampler(seed=0))
    return searcher


def test_each_trial_is_told_as_it_ended(tmp_path):
    url = f"sqlite:///{tmp_path / 'cbs.db'}"
    searcher = _searcher(open_storage(url))
    for trial_id in ("full", "stopped", "raised"):
        assert set(searcher.suggest(trial_id)) == {"log2_batch", "alpha"}
    searcher.on_trial_result("full", {"accuracy": 0.7, "samples_seen": 2048})
    searcher.on_trial_complete("full", {"accuracy": 0.8, "samples_seen": 4096})
    searcher.on_trial_result("stopped", {"accuracy": 0.5, "samples_seen": 1024})
    # ASHA's stop decision comes with the result that caused it, which reaches the searcher only here.
    searcher.on_trial_complete("stopped", {"accuracy": 0.55, "samples_seen": 2048})
    searcher.on_trial_complete("raised", None, error=True)

    study = optuna.load_study(study_name="s", storage=url)  # what optuna-dashboard reads
    by_id = {t.user_attrs["tune_trial_id"]: t for t in study.trials}
    assert by_id["full"].state == TrialState.COMPLETE and by_id["full"].value == 0.8
    assert by_id["full"].intermediate_values == {2048: 0.7}  # stepped by samples, not Tune's iteration
    assert by_id["stopped"].state == TrialState.PRUNED
    assert by_id["stopped"].value == 0.55 and by_id["stopped"].intermediate_values == {1024: 0.5, 2048: 0.55}
    assert by_id["raised"].state == TrialState.FAIL
    assert {t.user_attrs["batch_size"] for t in study.trials} <= {8, 16}
    assert study.user_attrs["metric"] == "accuracy"


def test_a_restored_searcher_fails_the_trials_the_killed_driver_asked_after_its_snapshot(tmp_path):
    url = f"sqlite:///{tmp_path / 'cbs.db'}"
    searcher = _searcher(open_storage(url))
    searcher.suggest("a")
    searcher.suggest("b")
    searcher.save(str(tmp_path / "searcher.pkl"))  # Tune's snapshot knows a and b
    searcher.suggest("c")                          # asked after it; then the driver dies
    searcher.on_trial_complete("a", {"accuracy": 0.8, "samples_seen": 4096})  # told after it, too

    restored = _searcher(open_storage(url))
    restored.restore(str(tmp_path / "searcher.pkl"))
    # Tune reruns a (it was running in the snapshot) and b; a's second completion keeps the first value.
    restored.on_trial_result("a", {"accuracy": 0.9, "samples_seen": 2048})
    restored.on_trial_complete("a", {"accuracy": 0.9, "samples_seen": 4096})
    restored.on_trial_complete("b", {"accuracy": 0.7, "samples_seen": 4096})

    trials = optuna.load_study(study_name="s", storage=url).trials
    assert [(t.user_attrs["tune_trial_id"], t.state, t.value) for t in trials] == [
        ("a", TrialState.COMPLETE, 0.8), ("b", TrialState.COMPLETE, 0.7), ("c", TrialState.FAIL, None)]
    assert trials[2].user_attrs["orphaned"] == ORPHANED


def test_fail_orphans_leaves_known_and_finished_trials_alone():
    study = optuna.create_study(direction="maximize")
    known, orphan, finished = study.ask(), study.ask(), study.ask()
    study.tell(finished, 1.0)
    assert fail_orphans(study, known={known.number}) == [orphan.number]
    assert [t.state for t in study.trials] == [TrialState.RUNNING, TrialState.FAIL, TrialState.COMPLETE]


def test_a_study_with_another_direction_or_metric_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'cbs.db'}"
    storage = open_storage(url)
    optuna.create_study(study_name="loss", storage=storage, direction="minimize")
    with pytest.raises(SpecError, match=r"study 'loss' already exists with direction minimize; this search's "
                                        r"accuracy is to be maximized"):
        check_study(storage, "loss", metric="accuracy", mode="max")
    f1 = optuna.create_study(study_name="f1", storage=storage, direction="maximize")
    f1.set_user_attr("metric", "f1")
    with pytest.raises(SpecError, match="already holds trials of f1, this search reports accuracy"):
        check_study(storage, "f1", metric="accuracy", mode="max")
    f1.add_trial(optuna.trial.create_trial(value=0.5))
    assert check_study(storage, "f1", metric="f1", mode="max") == 1  # continued
    assert check_study(storage, "new", metric="accuracy", mode="max") == 0


@pytest.mark.parametrize("url,message", [
    ("/no/such/dir/cbs.journal", "cannot open '/no/such/dir/cbs.journal': no directory /no/such/dir"),
    ("sqlite:////no/such/dir/cbs.db", "cannot open 'sqlite:////no/such/dir/cbs.db'"),
    ("nosuchdb://host/db", "cannot open 'nosuchdb://host/db'"),
])
def test_a_storage_that_cannot_be_opened_is_one_line(url, message):
    with pytest.raises(SpecError) as info:
        open_storage(url)
    assert str(info.value).startswith("search.study_storage: ") and message in str(info.value)
    assert "\n" not in str(info.value)


def test_relative_paths_are_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert open_storage("sqlite:///cbs.db").url == f"sqlite:///{tmp_path / 'cbs.db'}"
    open_storage("cbs.journal")
    optuna.create_study(storage=open_storage("cbs.journal"), study_name="j")
    assert (tmp_path / "cbs.journal").is_file()


def _cli(capsys, *overrides: str) -> tuple[int, str, str]:
    """The command line in this process (a subprocess cost 8 s each: issue 25's quick tier): exit code, stdout, stderr."""
    import ray

    from cbs_ray.cli import search_main

    try:
        rc = search_main([a for override in overrides for a in ("--set", override)])
        assert not ray.is_initialized(), "the check let the search start Ray"
    finally:
        ray.shutdown()
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_refuses_a_bad_study_before_ray_starts(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'cbs.db'}"
    optuna.create_study(study_name="taken", storage=url, direction="minimize")
    for overrides, message in [
        ((f"search.study_storage={url}", "search.study_name=taken"), "already exists with direction minimize"),
        (("search.study_storage=sqlite:////no/such/dir/x.db",), "search.study_storage: cannot open"),
    ]:
        rc, stdout, stderr = _cli(capsys, *overrides, f"storage_path={tmp_path / 'rr'}")
        assert rc == 2, stderr[-1000:]
        assert stderr.startswith("error: ") and message in stderr
        assert len(stderr.strip().splitlines()) == 1
        assert "Ray" not in stdout + stderr and not (tmp_path / "rr").exists()
