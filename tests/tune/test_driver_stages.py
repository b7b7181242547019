"""The driver's stage bookkeeping (issue 46: the driver runs and resumes any method's stages, the stage recorded in
the experiment's metadata before it starts), without Ray: stages made by hand whose Tune runs only note what the
metadata said when they started, and resume decisions from records written out with their known answer."""

import json
import types
from pathlib import Path

import pytest

from cbs_ray.records.meta import ExperimentMeta
from cbs_ray.records.storage import META_FILE, ReportError
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from cbs_ray.tune.driver import ExperimentLauncher, resume_actions, resume_stages, run_method, run_stages
from cbs_ray.tune.prepare import Prepared
from cbs_ray.tune.search_method import Launch, Stage, method_named

SEARCH_REPEATS = ["search", "repeats"]


def test_the_recorded_stage_is_restored_the_earlier_are_done_and_the_later_start():
    restorable = {"/e", "/e-repeats"}.__contains__
    assert resume_actions(SEARCH_REPEATS, [("search", "/e")], restorable) == [("restore", "/e"), ("start", None)]
    recorded = [("search", "/e"), ("repeats", "/e-repeats")]
    assert resume_actions(SEARCH_REPEATS, recorded, restorable) == [("done", "/e"), ("restore", "/e-repeats")]
    # killed after the repeats were recorded but before Tune saved their state: started afresh
    assert resume_actions(SEARCH_REPEATS, recorded, {"/e"}.__contains__) == [("done", "/e"), ("start", None)]
    three = ["search", "repeats", "schedule"]
    assert resume_actions(three, [("search", "/e")], restorable) == [("restore", "/e"), ("start", None),
                                                                     ("start", None)]


def test_a_recorded_stage_the_method_has_not_is_one_line():
    with pytest.raises(SpecError, match="records the stages search, schedule; its method has search, repeats"):
        resume_actions(SEARCH_REPEATS, [("search", "/e"), ("schedule", "/e-schedule")], lambda path: True)


def _meta(**fields):
    return ExperimentMeta(name="x", metric="accuracy", mode="max", spec={}, **fields)


def test_an_experiment_written_before_the_stage_record_reads_it_from_its_old_fields():
    assert _meta().stage_record("search", "/now/e") == [("search", "/now/e")]
    assert _meta(repeats_experiment="/r/e-repeats").stage_record("search", "/now/e") == [
        ("search", "/now/e"), ("repeats", "/r/e-repeats")]
    assert _meta(method_record={"schedule_experiment": "/r/e-schedule"}).stage_record("search", "/e") == [
        ("search", "/e"), ("schedule", "/r/e-schedule")]
    # the record itself wins, and its first experiment is where the experiment is now (it may have moved)
    recorded = [{"name": "search", "experiment": "/then/e"}, {"name": "repeats", "experiment": "/then/e-repeats"}]
    assert _meta(stages=recorded, repeats_experiment="/old").stage_record("search", "/now/e") == [
        ("search", "/now/e"), ("repeats", "/then/e-repeats")]


def test_a_damaged_stage_record_is_one_line(tmp_path):
    fields = {"name": "x", "metric": "accuracy", "mode": "max", "spec": {}}
    for damaged in ({"search": "/e"}, [{"name": "search"}], ["search"]):
        (tmp_path / META_FILE).write_text(json.dumps({**fields, "stages": damaged}))
        with pytest.raises(ReportError, match="stages is not a list of"):
            ExperimentMeta.read(str(tmp_path))
    (tmp_path / META_FILE).write_text(json.dumps({**fields, "stages": [{"name": "search", "experiment": "/e"}]}))
    assert ExperimentMeta.read(str(tmp_path)).stages == [{"name": "search", "experiment": "/e"}]


class Noted:
    """Stages made by hand on a launcher: each Tune run notes the first experiment's metadata as it was when the
    run started."""

    def __init__(self, launcher: ExperimentLauncher):
        self.launcher, self.runs, self.restored, self.first = launcher, [], [], None

    def run(self, stage: str):
        def run(name: str, meta: ExperimentMeta) -> str:
            path = f"{self.launcher.spec.storage_uri.rstrip('/')}/{name}"
            self.first = self.first or path
            self.runs.append((stage, name, ExperimentMeta.read(self.first).stages))
            return path
        return run

    def stage(self, name: str, launch) -> Stage:
        return Stage(name, lambda launcher, first: launch,
                     lambda launcher, path, meta: self.restored.append((name, path)))

    def planned(self) -> list[Stage]:
        fields = {"metric": "accuracy", "mode": "max", "budget_samples": 64}
        return [self.stage("search", Launch(self.run("search"), fields)),
                self.stage("nothing", None),  # what earlier stages produced leaves it nothing to run
                self.stage("repeats", Launch(self.run("repeats"), lambda name, path: {"repeats_experiment": path}))]


@pytest.fixture
def noted(tmp_path):
    spec = load_spec(None, [f"storage_path={tmp_path}"])
    launcher = ExperimentLauncher(spec, Prepared(types.SimpleNamespace(), 64, None), verbose=0)
    with launcher.held:
        yield Noted(launcher)


def test_the_driver_records_each_stage_and_what_it_decided_before_its_run_starts(noted):
    first = run_stages(noted.launcher, noted.planned())
    (search, name, at_search), (repeats, repeats_name, at_repeats) = noted.runs
    assert (search, repeats, repeats_name) == ("search", "repeats", f"{name}-repeats")
    assert first == noted.first and Path(first).name == name
    assert at_search == [{"name": "search", "experiment": first}]
    assert at_repeats == [{"name": "search", "experiment": first},
                          {"name": "repeats", "experiment": f"{first}-repeats"}]
    meta = ExperimentMeta.read(first)
    assert meta.repeats_experiment == f"{first}-repeats" and meta.budget_samples == 64  # the stages' fields


def test_a_resume_restores_the_recorded_stage_or_starts_it_again_and_never_reruns_a_done_one(noted):
    first = run_stages(noted.launcher, noted.planned())
    noted.runs.clear()
    Path(f"{first}-repeats").mkdir()
    (Path(f"{first}-repeats") / "tuner.pkl").write_bytes(b"")  # what Tune's can_restore looks for
    resume_stages(noted.launcher, noted.planned(), first, ExperimentMeta.read(first))
    assert noted.restored == [("repeats", f"{first}-repeats")] and noted.runs == []
    # killed before Tune saved the repeats' state: started again under the same name, recorded once
    (Path(f"{first}-repeats") / "tuner.pkl").unlink()
    noted.restored.clear()
    resume_stages(noted.launcher, noted.planned(), first, ExperimentMeta.read(first))
    assert noted.restored == [] and [run[:2] for run in noted.runs] == [("repeats", f"{Path(first).name}-repeats")]
    assert [s["name"] for s in ExperimentMeta.read(first).stages] == ["search", "repeats"]


def test_an_experiment_written_before_the_record_resumes_as_its_old_fields_say(noted):
    first = run_stages(noted.launcher, noted.planned()[:1])  # the search alone ran
    legacy = {k: v for k, v in ExperimentMeta.read(first).to_dict().items() if k != "stages"}
    (Path(first) / META_FILE).write_text(json.dumps(legacy))
    (Path(first) / "tuner.pkl").write_bytes(b"")
    noted.runs.clear()
    resume_stages(noted.launcher, noted.planned(), first, ExperimentMeta.read(first))
    assert noted.restored == [("search", first)] and [run[0] for run in noted.runs] == ["repeats"]
    # the repeats were recorded as before (their old field) and the record now names the search too
    meta = ExperimentMeta.read(first)
    assert meta.repeats_experiment == f"{first}-repeats"
    assert meta.stage_record("search", first) == [("search", first), ("repeats", f"{first}-repeats")]


def test_a_probe_is_only_for_a_method_whose_entry_takes_auto_batch_sizes(tmp_path):
    spec = load_spec(None, [f"storage_path={tmp_path}"])
    with pytest.raises(SpecError, match="auto is not available with search.method ladder"):
        run_method(method_named("ladder"), spec, Prepared(types.SimpleNamespace(), 64, None), probe=spec,
                   out=tmp_path / "out")


def test_the_probe_runs_first_in_the_searchs_one_ray_session_and_the_search_trains_the_grid_it_chose(
        tmp_path, monkeypatch, capsys):
    """``batch_sizes: auto``: the driver's own step before the stages, in the same Ray session (one opened), through
    the probe spec's method; then the search's data are prepared on the probe's grid and its plan printed."""
    import contextlib

    from cbs_ray.tune import driver

    sessions, events = [], []

    @contextlib.contextmanager
    def session(address, verbose):
        sessions.append(address)
        events.append("session")
        yield None

    class Method:  # scratch's name (the probe's method): one stage that notes its spec's batch sizes
        name = "scratch"

        def outline_lines(self, spec, prepared):
            return [f"plan of {spec.name}: {spec.search.batch_sizes}"]

        def check(self, spec, prepared):
            events.append(("check", spec.name))

        def stages(self, spec, prepared):
            def run(launcher, name):
                events.append(("trains", launcher.spec.name, list(launcher.spec.search.batch_sizes), launcher.prepared))
                return f"{launcher.spec.storage_uri}/{name}"
            return [Stage("search", lambda launcher, first: Launch(lambda name, meta: run(launcher, name),
                                                                 {"metric": "accuracy", "mode": "max"}),
                          lambda launcher, path, meta: None)]

    searched = Prepared(types.SimpleNamespace(), 64, None)
    monkeypatch.setattr(driver, "ray_session", session)
    monkeypatch.setattr(driver, "on_the_cluster", lambda spec, context: None)
    monkeypatch.setattr(driver, "method_named", lambda name: Method())
    monkeypatch.setattr(driver, "probe_grid", lambda probe, path, train_examples: (12.0, [8, 16]))
    monkeypatch.setattr(driver, "prepare", lambda spec, objects=None: searched)
    monkeypatch.setattr(driver, "finish", lambda method, spec, path, out: path)
    spec = load_spec(None, ["search.batch_sizes=auto", f"storage_path={tmp_path}"])
    from cbs_ray.tune.probe import probe_spec

    probe = probe_spec(spec)
    probed = Prepared(types.SimpleNamespace(train_examples=1024), 64, None)
    path = run_method(Method(), spec, probed, probe=probe, out=tmp_path / "out")
    assert sessions == [None]  # one Ray session for the probe and the search
    assert events == ["session", ("trains", probe.name, [16], probed), ("check", spec.name),
                      ("trains", spec.name, [8, 16], searched)]
    assert ExperimentMeta.read(path).spec["search"]["batch_sizes"] == [8, 16]
    out = capsys.readouterr().out
    assert out.index("probe: ") < out.index(f"plan of {spec.name}: [8, 16]")


def test_a_later_stage_cut_by_ctrl_c_names_the_first_experiment_the_one_resume_continues(noted):
    from cbs_ray.tune.runner import SearchInterrupted

    def cut(name, meta):
        raise SearchInterrupted(f"{noted.launcher.spec.storage_uri}/{name}")  # what Tune's stop names: its own

    planned = noted.planned()
    planned[2] = noted.stage("repeats", Launch(cut))
    with pytest.raises(SearchInterrupted) as interrupted:
        run_stages(noted.launcher, planned)
    assert interrupted.value.experiment_path == noted.first  # not <first>-repeats, which has no metadata
