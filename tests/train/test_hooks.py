"""A method's hooks in the loop (``train.hooks.TrainingHooks``): called in the order their docstring gives, what
they return reported; and a plan pickled in the earlier flat form (a restored experiment's callbacks hold some)
read back with its schedule and LR."""

import dataclasses
import pickle

import pytest

from cbs_ray.spec.load import load_spec
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.hooks import TrainingHooks
from cbs_ray.train.loop import train_loop
from cbs_ray.train.run_plan import LrSchedule, RunPlan
from cbs_ray.tune.api import prepare
from helpers.training import SMALL, RecordingSession

CALLS: list = []


@dataclasses.dataclass(frozen=True)
class Recording(TrainingHooks):
    """Records every call; its ``start`` hands the run a second object, which records under its own name."""

    name: str = "plan's"

    def title(self, plan):
        CALLS.append((self.name, "title"))
        return "recorded"

    def start(self, trial):
        CALLS.append((self.name, "start", trial.progress.samples, trial.restarted))
        return Recording("run's")

    def after_step(self, trial):
        CALLS.append((self.name, "after_step", trial.progress.samples))

    def at_evaluation(self, trial, evaluate):
        CALLS.append((self.name, "at_evaluation", trial.progress.samples))
        return {"again_accuracy": evaluate(trial.parts.forward)["accuracy"]}

    def report_fields(self, plan, train_loss_ema):
        CALLS.append((self.name, "report_fields", train_loss_ema is not None))
        return {"role": "recorded", "train_loss_ema": train_loss_ema}

    def at_checkpoint(self, trial):
        CALLS.append((self.name, "at_checkpoint", trial.progress.samples))

    def at_end(self, trial):
        CALLS.append((self.name, "at_end", trial.progress.samples))


def test_the_loop_calls_the_hooks_in_their_documented_order_and_reports_what_they_return():
    spec = load_spec(None, SMALL)
    ready = prepare(spec)
    cfg = TrialConfig.from_tune(spec, {"log2_batch": 5, "alpha": 1.0, "warmup_fraction": 0.0},
                                budget_samples=ready.budget_samples, model_config=ready.model_config)
    cfg = dataclasses.replace(cfg, plan=dataclasses.replace(cfg.plan, hooks=Recording()))
    CALLS.clear()
    session = RecordingSession()
    train_loop(cfg, ready.data, session)
    # B=32 over 256 samples: 8 steps, reports at 128 and 256
    reports = [[*(("run's", "after_step", s) for s in range(stop - 96, stop + 1, 32)), ("run's", "at_evaluation", stop),
                ("run's", "report_fields", True), ("run's", "at_checkpoint", stop)] for stop in (128, 256)]
    assert CALLS == [("plan's", "title"), ("plan's", "start", 0, False), *reports[0], *reports[1],
                     ("run's", "at_end", 256)]
    for report in session.reports:
        assert report["again_accuracy"] == report["accuracy"] and report["role"] == "recorded"
        assert report["train_loss_ema"] > 0


def test_a_plan_pickled_in_the_flat_form_reads_back_with_its_schedule_and_lr_and_no_hooks():
    lr = LrSchedule(batch=8, alpha=0.5, peak=1e-3, warmup_steps=6, total_steps=64, decay="cosine",
                    warmup_fraction=0.1, in_samples=True)
    plan = RunPlan(batch_schedule=((128, 16),), start_samples=128, stop_samples=192, report_at=(192,), lr=lr,
                   seed_offset=1, largest_batch=32, fixes_micro_batch=True,
                   noise_scale_off="not measured on a branch-mode branch run (the trunk's is plotted)")
    flat = {"role": "branch", "lr_batch": 8, "batch_schedule": ((128, 16),), "start_samples": 128,
            "stop_samples": 192, "report_at": (192,), "save_at": (), "checkpoint_dir": "/x/trunk", "alpha": 0.5,
            "lr_peak": 1e-3, "lr_warmup_steps": 6, "lr_total_steps": 64, "lr_decay": "cosine", "seed_offset": 1,
            "control": None, "resets_optimizer": False, "eval_subset": None, "largest_batch": 32,
            "warmup_fraction": 0.1, "averages_iterates": False, "publishes_checkpoints": False,
            "starts_from_checkpoint": True, "lr_in_samples": True, "fixes_micro_batch": True,
            "measures_noise_scale": False,
            "noise_scale_note": "not measured on a branch-mode branch run (the trunk's is plotted)",
            "reports_train_loss_ema": True}
    stored = RunPlan.__new__(RunPlan)
    stored.__dict__.update(flat)  # what unpickling the earlier class's instance gives: its fields as they were
    read = pickle.loads(pickle.dumps(stored))
    assert read == plan and read.lr_at(176, 16) == pytest.approx(plan.lr_at(176, 16), rel=1e-15)
    assert pickle.loads(pickle.dumps(plan)) == plan  # today's form reads back as it is
