"""from_summary on every shape cbs-ray writes (scratch, branch, ladder) and on hostile files: each malformed input
is one ScheduleError naming the file and the field (issue 48, issue 47 item 11); stage starts deferred to valid
boundaries; the ramp helper."""

import json
import logging
import os
import pathlib
import threading

import pytest

from cbs_ray.integrations import BatchSizeSchedule, ScheduleError

BRANCH = {"method": "branch", "batch_size_schedule": [[0, 16], [1024, 32], [2048, 128]], "schedule_alpha": 0.5,
          "budget_samples": 8192, "trunk": {"batch_size": 16, "peak_lr": 0.001, "warmup_steps": 51,
                                            "warmup_samples": 816}}
SCRATCH = {"mode": "max", "budget_samples": 65536,
           "recommendation": {"batch_size": 256, "alpha": 0.5, "peak_lr": 0.004, "warmup_steps": 26,
                              "budget_samples": 65536}}
LADDER = {"method": "ladder", "prediction": {"budget_samples": 8192, "batch_size": 128, "peak_lr": 0.0057,
                                             "warmup_steps": 6, "alpha": 0.5, "batch_size_schedule": None}}


def write(tmp_path, summary, name="summary.json"):
    path = tmp_path / name
    path.write_text(summary if isinstance(summary, str) else json.dumps(summary))
    return path


def test_branch_summary_gives_the_schedule_and_the_trunks_warmup(tmp_path):
    s = BatchSizeSchedule.from_summary(write(tmp_path, BRANCH))
    assert [(st.start_samples, st.batch_size) for st in s.stages] == [(0, 16), (1024, 32), (2048, 128)]
    assert s.warmup_samples == 816 and s.warmup_steps == 51 and s.peak_lr == 0.001 and s.budget_samples == 8192
    no_samples = dict(BRANCH, trunk={"peak_lr": 0.001, "warmup_steps": 51})  # steps alone: × the first batch
    assert BatchSizeSchedule.from_summary(write(tmp_path, no_samples)).warmup_samples == 816


def test_scratch_summary_gives_one_stage_with_its_warmup(tmp_path):
    s = BatchSizeSchedule.from_summary(write(tmp_path, SCRATCH))
    assert [(st.start_samples, st.batch_size) for st in s.stages] == [(0, 256)]
    assert s.warmup_steps == 26 and s.warmup_samples == 26 * 256 and s.optimizer_steps() == 256


def test_ladder_summary_gives_its_batch_or_the_schedule_it_carries(tmp_path):
    s = BatchSizeSchedule.from_summary(write(tmp_path, LADDER))
    assert [(st.start_samples, st.batch_size) for st in s.stages] == [(0, 128)]
    assert s.warmup_samples == 6 * 128 and s.peak_lr == 0.0057 and s.budget_samples == 8192
    carried = {"batch_size_schedule": [[0, 16], [1024, 32]], "alpha": 1.0, "experiment": "x"}
    s = BatchSizeSchedule.from_summary(write(tmp_path, {"prediction": dict(LADDER["prediction"],
                                                                           batch_size_schedule=carried)}))
    assert [(st.start_samples, st.batch_size) for st in s.stages] == [(0, 16), (1024, 32)] and s.alpha == 1.0
    assert s.peak_lr is None and s.warmup_samples is None  # a schedule carried without its trunk's LR
    carried.update(peak_lr=0.001, warmup_steps=51, warmup_samples=816)  # what same_spec_schedule now carries
    s = BatchSizeSchedule.from_summary(write(tmp_path, {"prediction": dict(LADDER["prediction"],
                                                                           batch_size_schedule=carried)}))
    assert s.peak_lr == 0.001 and s.warmup_samples == 816 and s.warmup_steps == 51 and s.base_batch == 16


def _branch(**changes):
    return json.dumps(dict(BRANCH, **changes))


HOSTILE = [
    ("[]", "a JSON object"),
    ("null", "a JSON object"),
    ("", "cannot read"),
    ("{not json", "cannot read"),
    ("[" * 2000 + "]" * 2000, "cannot read"),
    ('{"batch_size_schedule": [[0, Infinity]]}', "batch_size_schedule[0][1]"),
    ('{"batch_size_schedule": [[0, 1e400]]}', "batch_size_schedule[0][1]"),
    ('{"batch_size_schedule": [[0, NaN]]}', "batch_size_schedule[0][1]"),
    (_branch(batch_size_schedule=[[0, 1e308]]), "batch_size_schedule[0][1]"),
    (_branch(batch_size_schedule=[{"start": 0, "batch": 8}]), "batch_size_schedule[0]"),
    (_branch(batch_size_schedule=[[0, 8.5]]), "batch_size_schedule[0][1]"),
    (_branch(batch_size_schedule=[[0, "8"]]), "batch_size_schedule[0][1]"),
    (_branch(batch_size_schedule=[[0, 16.9], [10.5, 32]]), "batch_size_schedule[0][1]"),
    (_branch(batch_size_schedule=[[0, 8, 2]]), "batch_size_schedule[0]"),
    (_branch(batch_size_schedule=[[0, 0]]), "batch_size_schedule[0][1]"),
    (_branch(batch_size_schedule=[[0, True]]), "batch_size_schedule[0][1]"),
    (_branch(batch_size_schedule="8"), "batch_size_schedule"),
    (_branch(batch_size_schedule=[[8, 16]]), "first stage must start at 0"),
    (_branch(batch_size_schedule=[[0, 16], [0, 32]]), "starts must increase"),
    (_branch(batch_size_schedule=[[0, 16], [64, 8]]), "smaller than the 16 before it"),
    (_branch(schedule_alpha="abc"), "schedule_alpha"),
    (_branch(schedule_alpha=-1), "schedule_alpha"),
    (_branch(schedule_alpha=True), "schedule_alpha"),
    (_branch(budget_samples=-5), "budget_samples"),
    (_branch(budget_samples=0), "budget_samples"),
    (_branch(trunk=[16, 0.001]), "trunk must be an object"),
    (_branch(trunk={"peak_lr": "high"}), "trunk.peak_lr"),
    (_branch(trunk={"warmup_steps": -1}), "trunk.warmup_steps"),
    (_branch(tokens_per_sample=0), "tokens_per_sample"),
    (json.dumps({"recommendation": {"alpha": 0.5}}), "recommendation has no batch_size"),
    (json.dumps({"recommendation": {"batch_size": None}}), "recommendation.batch_size"),
    (json.dumps({"recommendation": [256]}), "recommendation must be an object"),
    (json.dumps({"prediction": {"batch_size": None, "refusal": "too few rungs"}}), "prediction has no batch_size"),
    (json.dumps({"prediction": {"batch_size_schedule": [[0, 8]]}}), "prediction.batch_size_schedule"),
    (json.dumps({"method": "branch"}), "holds neither"),
]


@pytest.mark.parametrize("text, field", HOSTILE, ids=[f"{i}:{t[:30]}" for i, (t, _) in enumerate(HOSTILE)])
def test_a_malformed_summary_is_one_schedule_error_naming_the_file_and_the_field(tmp_path, text, field):
    path = write(tmp_path, text)
    with pytest.raises(ScheduleError) as raised:
        BatchSizeSchedule.from_summary(path)
    message = str(raised.value)
    assert str(path) in message and field in message and "\n" not in message


def test_a_decreasing_schedule_is_read_only_when_allowed(tmp_path):
    path = write(tmp_path, _branch(batch_size_schedule=[[0, 16], [64, 8]]))
    s = BatchSizeSchedule.from_summary(path, allow_decrease=True)
    assert [st.batch_size for st in s.stages] == [16, 8]


def test_a_fifo_a_folder_without_a_summary_and_an_oversized_file_are_never_read(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # opening it would block forever
    with pytest.raises(ScheduleError, match="not a regular file"):
        BatchSizeSchedule.from_summary(fifo)
    with pytest.raises(ScheduleError, match="cannot read a summary.json"):
        BatchSizeSchedule.from_summary(tmp_path / "empty-folder-does-not-exist")
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(65 * 2**20)  # sparse: no 65 MiB written
    with pytest.raises(ScheduleError, match="more than a summary.json's"):
        BatchSizeSchedule.from_summary(big)


def test_a_fifo_swapped_in_after_a_check_is_never_opened_blocking(tmp_path, monkeypatch):
    # The race: the path is a regular file when checked and a FIFO when opened. Checking by a stat of the path
    # (here made to see a regular file) and then opening it blocked forever; the check on the open descriptor
    # refuses it at once.
    regular = tmp_path / "regular.json"
    regular.write_text("{}")
    fifo = tmp_path / "summary.json"
    os.mkfifo(fifo)
    real_stat = os.stat
    monkeypatch.setattr(pathlib.Path, "stat", lambda self, **kw: real_stat(regular if self == fifo else self, **kw))
    outcome: list = []

    def read() -> None:
        try:
            BatchSizeSchedule.from_summary(fifo)
        except ScheduleError as e:
            outcome.append(str(e))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # release the blocked open before failing
        with open(fifo, "wb"):
            pass
        reader.join(timeout=5)
        pytest.fail("from_summary blocked opening a FIFO")
    assert outcome and "not a regular file" in outcome[0] and str(fifo) in outcome[0]


def test_stage_starts_are_deferred_to_the_next_valid_boundary_with_one_warning(caplog):
    ramp = BatchSizeSchedule([(0, 8), (32, 12), (64, 16), (96, 20), (128, 24)])
    assert [s.start_samples for s in ramp.stages] == [0, 32, 68, 100, 140]  # step boundaries of the stage before
    with caplog.at_level(logging.WARNING, logger="cbs_ray.integrations.schedule"):
        deferred = ramp.for_trainers()
    # Each start is a step boundary of the stage before and a multiple of its own batch: 48 (8 and 12 | 48),
    # 96 = 48 + 4·12 (16 | 96), 160 = 96 + 4·16 (20 | 160), 240 = 160 + 4·20 (24 | 240).
    assert [s.start_samples for s in deferred.stages] == [0, 48, 96, 160, 240]
    assert [s.start_samples % s.batch_size for s in deferred.stages] == [0] * 5
    assert len(caplog.records) == 1 and "stage 1 (batch 12) from sample 32 to 48" in caplog.records[0].getMessage()


@pytest.mark.parametrize("kind, expected, starts", [("linear", [8, 12, 16, 20, 24], [0, 24, 48, 80, 120]),
                                                    ("geometric", [8, 16, 32], [0, 64, 128])])
def test_ramp_rounds_batches_and_reaches_the_top_by_over_samples(kind, expected, starts, recwarn):
    # Issue 58, finding 11: the docs' ramp(8, 24, over_samples=128, multiple_of=4) deferred every start and reached
    # 24 only at sample 240. Each start is now the latest valid boundary at or before its nominal start (0, 32, 64,
    # 96, 128): 24 (8 | 24, 12 | 24), 48 = 24 + 2·12 (16 | 48), 80 = 48 + 2·16 (20 | 80), 120 = 80 + 2·20 (24 | 120).
    end = 24 if kind == "linear" else 32
    ramp = BatchSizeSchedule.ramp(8, end, 128, kind=kind, multiple_of=4, budget_samples=512 if kind == "geometric"
                                  else 504)
    assert [s.batch_size for s in ramp.stages] == expected
    assert [s.start_samples for s in ramp.stages] == starts
    assert all(s.start_samples % s.batch_size == 0 for s in ramp.stages)  # HF Trainer and Lightning can train it
    assert ramp.for_trainers(warn=False).stages == ramp.stages  # as built: nothing left to defer
    plain = BatchSizeSchedule.ramp(8, 24, 128, multiple_of=4, boundaries="step")  # a plain loop: step boundaries only
    assert [s.start_samples for s in plain.stages] == [0, 32, 56, 88, 128]
    assert not recwarn.list  # neither stretched nor past its budget: nothing said
    with pytest.raises(ScheduleError, match="ramp goes up"):
        BatchSizeSchedule.ramp(24, 8, 128)


def test_a_ramp_that_cannot_reach_the_top_by_over_samples_says_so():
    with pytest.warns(UserWarning, match=r"ramp\(8, 24, over_samples=16\): batch 24 starts at sample 120, not by "
                                         r"16.*fewer stages"):
        stretched = BatchSizeSchedule.ramp(8, 24, 16, multiple_of=4)
    assert stretched.stages[-1].start_samples == 120  # each stage trains at least one step at a multiple of its batch


def test_a_budget_that_ends_inside_a_step_is_said_not_overrun_silently():
    # Issue 58, finding 11: the docs' ramp over a 320-sample budget ran 336 samples without a word.
    with pytest.warns(UserWarning, match=r"budget_samples 320 ends inside step 17 \(batch 24, samples 312 to 336\).*"
                                         r"16 past the budget.*\(312 or 336\)"):
        ramp = BatchSizeSchedule.ramp(8, 24, over_samples=128, multiple_of=4, budget_samples=320)
    assert ramp.optimizer_steps() == 18 and ramp.samples_before_step(18) == 336
    with pytest.warns(UserWarning, match=r"budget_samples 100 ends inside step 10 \(batch 16, samples 96 to 112\)"):
        BatchSizeSchedule([(0, 8), (64, 16)], budget_samples=100)  # 64 + 3 × 16 = 112


def test_the_summaries_cbs_ray_writes_carry_the_warmup_from_summary_returns():
    # The golden reports (tests/golden/expected) are what the code writes: a from-scratch recommendation carries
    # its warmup in samples, a ladder's carried branch schedule the trunk's peak LR.
    golden = pathlib.Path(__file__).resolve().parents[1] / "golden" / "expected"
    scratch = BatchSizeSchedule.from_summary(golden / "scratch" / "summary.json")
    written = json.loads((golden / "scratch" / "summary.json").read_text())["recommendation"]
    assert written["warmup_samples"] == written["warmup_steps"] * written["batch_size"]
    assert scratch.warmup_samples == written["warmup_samples"] and scratch.peak_lr == written["peak_lr"]
    ladder = BatchSizeSchedule.from_summary(golden / "ladder" / "summary.json")
    assert [s.batch_size for s in ladder.stages] == [16, 32, 128] and ladder.peak_lr == 0.001


def test_warmup_steps_is_an_int_hf_takes_even_where_no_warmup_is_recorded():
    # Issue 58, finding 22: the docs' `TrainingArguments(warmup_steps=schedule.warmup_steps)` raised a TypeError on
    # None (a hand-built schedule, the golden branch summary, whose trunk records no warmup).
    golden = pathlib.Path(__file__).resolve().parents[1] / "golden" / "expected" / "branch" / "summary.json"
    no_trunk_warmup = BatchSizeSchedule.from_summary(golden)
    assert no_trunk_warmup.warmup_samples is None and no_trunk_warmup.warmup_steps == 0
    by_hand = BatchSizeSchedule([(0, 8), (64, 16)])
    assert by_hand.warmup_steps == 0 and isinstance(by_hand.warmup_steps, int)
    assert BatchSizeSchedule([(0, 8)], warmup_samples=12).warmup_steps == 2  # rounded up, in steps of B0
    transformers = pytest.importorskip("transformers")
    args = transformers.TrainingArguments(output_dir="unused", max_steps=4, warmup_steps=by_hand.warmup_steps,
                                          use_cpu=True, report_to="none")
    assert args.get_warmup_steps(4) == 0


@pytest.mark.parametrize("given", [None, {"batch_size_schedule": [[0, 8]]}, 3, b"summary.json"],
                         ids=["None", "dict", "int", "bytes"])
def test_from_summary_of_something_not_a_path_is_one_schedule_error(given):
    with pytest.raises(ScheduleError, match="from_summary takes the path of a summary.json") as refused:
        BatchSizeSchedule.from_summary(given)
    assert "\n" not in str(refused.value)
