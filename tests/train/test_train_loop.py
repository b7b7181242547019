"""The per-worker loop without Ray: a recording session stands in for Tune/Train reporting."""

import json
import math
import shutil

import pytest
import torch

from cbs_ray.spec.load import load_spec
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.loop import train_loop
from cbs_ray.train.optimizer import make_optimizer
from cbs_ray.train.sessions import LocalSession
from cbs_ray.tune.api import prepare
from helpers.training import SMALL, RecordingSession
from helpers.training import train_small as run


def test_reports_land_on_exact_sample_milestones():
    reports, setup = run(batch=32)
    assert [r["samples_seen"] for r in reports] == [128, 256]
    assert [r["steps"] for r in reports] == [4, 8]
    last = reports[-1]
    assert last["peak_lr"] == pytest.approx(2e-3 * 32 / 16) # linear rule from B0=16
    assert last["warmup_steps"] == 2 and last["micro_batch"] == 32 and last["accumulation"] == 1
    assert 0.0 <= last["accuracy"] <= 1.0 and last["samples_per_s"] > 0 and not last["diverged"]
    assert last["node_id"] == ""  # outside Ray: no node, and no crash asking for one


def test_micro_batch_cap_accumulates_to_the_same_effective_batch():
    reports, _ = run(["training.micro_batch_size=8"], batch=32)
    assert (reports[-1]["micro_batch"], reports[-1]["accumulation"]) == (8, 4)
    assert reports[-1]["samples_seen"] == 256


def test_huge_lr_diverges_and_says_so():
    reports, _ = run(["training.base_lr=1e6", "training.grad_clip_norm=null", "training.weight_decay=0.0"])
    assert len(reports) == 1 and reports[0]["diverged"] is True
    assert reports[0]["accuracy"] == 0.0 and reports[0]["samples_seen"] < 128 # worst metric, stopped early


def test_causal_lm_reports_eval_loss():
    reports, _ = run(["task=causal-lm", "search.metric=eval_loss", "search.mode=min",
                      "model.config={model_type: gpt2, n_embd: 32, n_layer: 1, n_head: 2, n_positions: 64}"])
    assert "accuracy" not in reports[-1]
    assert math.isfinite(reports[-1]["eval_loss"]) and reports[-1]["perplexity"] > 1


def test_weight_decay_skips_biases_and_norms():
    spec = load_spec(None, SMALL)
    prepared = prepare(spec)
    _, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    setup = TrialConfig.from_tune(spec, {"log2_batch": 4, "alpha": 1.0, "warmup_fraction": 0.0},
                                  budget_samples=budget, model_config=config)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    groups = make_optimizer(model, setup.spec.training, 1e-3, model_config=setup.model_config).param_groups
    assert [len(g["params"]) for g in groups] == [1, 3] and groups[1]["weight_decay"] == 0.0


def test_noise_scale_from_accumulation_on_one_worker():
   # B=128 as 8 micro-batches of 16, 4096 samples (32 steps): micro-batch vs accumulated gradient.
    reports, _ = run(["training.micro_batch_size=16", "training.budget_samples=4096", "training.eval_every_samples=512",
                      "asha.grace_period_samples=512", "data.builtin_train_examples=4096",
                      "search.batch_sizes=[16, 128]"], batch=128)
    last = reports[-1]
    assert last["b_small"] == 16 and math.isfinite(last["b_simple"]) and last["b_simple"] > 0
    assert last["trace_sigma"] > 0 and last["grad_sq"] > 0


def test_noise_scale_not_measurable_with_one_worker_and_no_accumulation():
    reports, _ = run(batch=32)
    assert math.isnan(reports[-1]["b_simple"])
    assert "not measurable" in reports[-1]["noise_scale_note"]


def test_exploding_but_finite_loss_counts_as_diverged():
   # lr × 1000 with AdamW: the loss goes to ~15 (chance is 0.69) without a NaN ever appearing.
    reports, _ = run(["training.base_lr=2.0", "training.grad_clip_norm=null"], batch=16)
    assert len(reports) == 1 and reports[0]["diverged"] is True and reports[0]["accuracy"] == 0.0
    assert math.isfinite(reports[0]["train_loss"]) and reports[0]["train_loss"] > 10 * 0.69
    assert not run(["training.base_lr=2.0", "training.divergence_factor=1000"], batch=16)[0][-1]["diverged"]


def test_micro_batch_probe_is_skipped_on_cpu_without_a_memory_limit(capsys):
    reports, _ = run(["training.probe_micro_batch=true", "training.micro_batch_size=8"], batch=32)
    out = capsys.readouterr().out
    assert "micro-batch probe skipped: not on a GPU and no training.memory_limit_gb" in out
    assert "trial: B=32 = 8 micro × 4 accum × 1 workers" in out
    assert (reports[-1]["micro_batch"], reports[-1]["accumulation"]) == (8, 4)


def test_cpu_probe_within_a_memory_limit_plans_and_trains_as_an_unprobed_trial(capsys, tmp_path, monkeypatch):
    """The probe really steps the model on the CPU (peaks measured, plan cached); its steps and random
    batches are undone, so the trial trains exactly as the same plan given by hand."""
    from cbs_ray.spec.schema import TINY_BERT
    from cbs_ray.train.memory_planner import ProbeCache

    monkeypatch.setenv("HOME", str(tmp_path)) # a fresh probe cache
   # With dropout, training draws from the RNG the probe's random batches also draw from.
    dropout = ["model.config=" + json.dumps({**TINY_BERT, "hidden_dropout_prob": 0.1})]
    probed, _ = run(dropout + ["training.probe_micro_batch=true", "training.micro_batch_size=null",
                               "training.memory_limit_gb=64"], batch=32)
    out = capsys.readouterr().out
    assert "micro-batch probe: micro-batch 2: peak" in out and "micro-batch probe: micro-batch 36: peak" in out
    assert "trial: B=32 = 32 micro × 1 accum × 1 workers" in out # everything fits: up to the search's largest
   # Evaluation is not trusted beyond what the probe saw fit (a causal LM's fp32 logits grow with it).
    assert "eval batch 32 (memory)" in out
    (key,) = ProbeCache(tmp_path / ".cache" / "cbs_ray" / "micro_batch.json")._load()
    assert "cpu<=64.0GiB" in key and key.endswith("|adamw") # the optimizer's state is part of a step's memory
    by_hand, _ = run(dropout + ["training.micro_batch_size=32"], batch=32)
    assert [r["train_loss"] for r in probed] == [r["train_loss"] for r in by_hand]
   # The same sums in batches of 32 instead of 256.
    assert [r["eval_loss"] for r in probed] == pytest.approx([r["eval_loss"] for r in by_hand], rel=1e-5)
    assert [r["accuracy"] for r in probed] == [r["accuracy"] for r in by_hand]


def test_where_memory_bounds_the_probe_training_accumulates_and_evaluation_batches_shrink(capsys, tmp_path,
                                                                                            monkeypatch):
    from helpers.memory import ScriptedMemory

    monkeypatch.setenv("HOME", str(tmp_path))
    gib = 2 ** 30
   # Baseline 0.5 GiB; steps at 2, 3, 5, 9 peak at 0.55, 0.6, 0.7, 0.9 GiB. 18 is expected at
   # 0.5 + 0.4 * 18 / 9 = 1.3 GiB > 1 GiB: not run. Plan 8 (9 fits), below the probe's upper limit 32.
    script = ScriptedMemory([int(f * gib) for f in (0.5, 0.55, 0.6, 0.7, 0.9)])
    monkeypatch.setattr("cbs_ray.train.memory_planner.PeakResidentMemory", lambda: script)
    bounded, _ = run(["training.probe_micro_batch=true", "training.micro_batch_size=null",
                      "training.memory_limit_gb=1"], batch=32)
    out = capsys.readouterr().out
    assert "micro-batch 18: 1331 MiB expected, over the 1024 MiB limit; not run" in out
    assert "trial: B=32 = 8 micro × 4 accum × 1 workers" in out and "eval batch 8 (memory)" in out
    unbounded, _ = run(["training.micro_batch_size=8"], batch=32) # same plan, evaluated in batches of 256
    assert "eval batch" not in capsys.readouterr().out
    for a, b in zip(bounded, unbounded):
        assert a["train_loss"] == b["train_loss"]
        assert a["eval_loss"] == pytest.approx(b["eval_loss"], rel=1e-5) # the same sums, batched differently
        assert a["accuracy"] == b["accuracy"]


def test_a_memory_limit_below_what_the_worker_holds_fails_the_trial_with_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(MemoryError, match=r"not even a micro-batch of 1 fits in memory \(cpu<=0.001GiB"):
        run(["training.probe_micro_batch=true", "training.memory_limit_gb=0.001"], batch=32)


def train_and_restart(setup, data, directory, *, from_report: int):
    """Train the trial once, keeping the checkpoint of report ``from_report`` in ``directory``; then train it
    again as a restart hands it that checkpoint. Returns both sessions (whole run, restarted run)."""
    from ray.train import Checkpoint

    class Keeping(RecordingSession):
        def report(self, metrics, checkpoint_dir):
            super().report(metrics, checkpoint_dir)
            if len(self.reports) == from_report:
                shutil.copytree(checkpoint_dir, directory)

    class Restarted(RecordingSession):
        def get_checkpoint(self):
            return Checkpoint.from_directory(str(directory))

    whole, again = Keeping(), Restarted()
    train_loop(setup, data, whole)
    train_loop(setup, data, again)
    return whole, again


def test_a_restarted_trial_continues_from_its_checkpoint(tmp_path):
    """What a dead worker or a resumed experiment hands the loop: the last checkpoint. It reports that
    checkpoint's milestone row again (issue 47: a SIGKILL between the checkpoint and its row lost the row), then
    continues at the next milestone, with its clocks, and says where it resumed from."""
    spec = load_spec(None, SMALL)
    prepared = prepare(spec)
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    setup = TrialConfig.from_tune(spec, {"log2_batch": 4, "alpha": 1.0, "warmup_fraction": 0.25},
                                  budget_samples=budget, model_config=config)
    first, again = train_and_restart(setup, data, tmp_path / "first", from_report=1)
    assert [r["samples_seen"] for r in first.reports] == [128, 256]
    assert [r["samples_seen"] for r in again.reports] == [128, 256]  # not from zero; its checkpoint's row first
    assert again.checkpoints[0] is None  # the same row (NaN fields included), no new checkpoint
    assert json.dumps(again.reports[0], sort_keys=True) == json.dumps(first.reports[0], sort_keys=True)
    assert again.reports[1]["resumed_from_samples"] == 128 and first.reports[0]["resumed_from_samples"] == 0
    assert again.reports[1]["steps"] == 16
    assert again.reports[1]["wall_time_s"] >= first.reports[0]["wall_time_s"] # the clock continues


@pytest.mark.parametrize("micro, fp16_overflow", [(16, False), (32, False), (16, True)])
def test_a_restarted_trial_ends_where_an_uninterrupted_one_does(tmp_path, monkeypatch, micro, fp16_overflow):
    """The restart continues the data order at the micro-batch where its checkpoint left it (not a fresh
    shuffle) and dropout's random stream, so it ends as the uninterrupted trial does. 560 training
    examples: 35 micro-batches of 16 per epoch (B=32 as 2 × 16, so step 18 straddles the epoch boundary)
    or 17 of 32; the checkpoint at 512 samples (step 16) sits mid-epoch either way. In fp16, the first
    step overflows and is skipped: its two micro-batches were drawn without a step being taken."""
    import cbs_ray.sources.builtin as loop  # the built-in source's summed loss

    overrides = ["data.builtin_train_examples=560", "data.builtin_eval_examples=128",
                 "training.budget_samples=1280", "training.eval_every_samples=256",
                 "asha.grace_period_samples=256", "search.batch_sizes=[32]",
                 "model.config.hidden_dropout_prob=0.1", f"training.micro_batch_size={micro}"]
    if fp16_overflow:
        overrides.append("training.precision=fp16")
        from helpers.training import NonFiniteGradient as _NonFiniteGradient

        real, calls = loop.summed_loss, []

        def first_call_overflows(*args): # a finite loss, an infinite gradient: what an fp16 overflow is
            calls.append(1)
            return _NonFiniteGradient.apply(real(*args)) if len(calls) == 1 else real(*args)

        monkeypatch.setattr(loop, "summed_loss", first_call_overflows)
    spec = load_spec(None, overrides)
    prepared = prepare(spec)
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    setup = TrialConfig.from_tune(spec, {"log2_batch": 5, "alpha": 1.0, "warmup_fraction": 0.25},
                                  budget_samples=budget, model_config=config)
    whole, again = train_and_restart(setup, data, tmp_path / "second", from_report=2)
    if fp16_overflow:
        assert whole.reports[-1]["steps"] == 40 and len(calls) == 2 * 41 + 2 * 24 # one step was skipped
    assert [r["samples_seen"] for r in again.reports] == [512, 768, 1024, 1280]  # its checkpoint's row first
    trained = again.reports[1:]
    assert trained[0]["resumed_from_samples"] == 512 and trained[0]["micro_batch"] == micro
    for ours, theirs in zip(trained, whole.reports[2:]):
        assert ours["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-5)
        assert ours["eval_loss"] == pytest.approx(theirs["eval_loss"], rel=1e-5)


@pytest.mark.slow  # 31 s in a fresh venv (Inductor compiles C++ on a cold cache): the slow tier CI runs (issue 25)
@pytest.mark.skipif(shutil.which("g++") is None, reason="torch.compile on a CPU needs a C++ compiler")
def test_compiled_model_trains_as_the_eager_one():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    eager, _ = run(batch=32)
    assert not counters["stats"]["unique_graphs"]
    compiled, _ = run(["training.compile=true"], batch=32)
   # The forward passes went through torch.compile: one graph for training, one for evaluation (no
   # grad), and no recompilation after the first step (the config's problem_type is set up front).
    assert counters["stats"]["unique_graphs"] == 2
   # The default tiny model has no dropout, so the two differ only by kernel fusion's rounding.
    for a, b in zip(eager, compiled):
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-3)
        assert b["eval_loss"] == pytest.approx(a["eval_loss"], rel=1e-3)
    torch._dynamo.reset()


def test_ray_per_report_log_lines_are_quietened():
    """The logger names must be the ones Ray's modules really log through, else the console fills with a
    line per report per rank again after a Ray upgrade."""
    import logging

    import ray.train._internal.storage as tune_storage
    import ray.train.v2._internal.execution.context as train_context
    import ray.train.v2._internal.execution.storage as train_storage

    from cbs_ray.train.sessions import per_report_loggers, quiet_per_report_logs

    modules = (tune_storage, train_storage, train_context)
    assert sorted(per_report_loggers()) == sorted(m.logger.name for m in modules)
    quiet_per_report_logs()
    for module in modules:
        assert not module.logger.isEnabledFor(logging.INFO)
        assert module.logger.isEnabledFor(logging.WARNING)


def test_the_probe_measures_a_model_in_training_mode_even_if_it_came_in_eval_mode(tmp_path, monkeypatch):
    """A pretrained model comes in eval mode (no dropout, and no gradient checkpointing in transformers):
    the probe must measure the model as it will train."""
    import cbs_ray.sources.model as model_module
    import cbs_ray.train.memory_planner as planner

    monkeypatch.setenv("HOME", str(tmp_path))
    built = model_module.build_model
    monkeypatch.setattr(model_module, "build_model", lambda *args: built(*args).eval()) # as from_pretrained
    real_step, modes = planner._probe_step, []

    def recording_step(model, *args, **kwargs):
        modes.append(model.training)
        return real_step(model, *args, **kwargs)

    monkeypatch.setattr(planner, "_probe_step", recording_step)
    run(["training.probe_micro_batch=true", "training.micro_batch_size=null", "training.memory_limit_gb=64"], batch=32)
    assert modes and all(modes)


@pytest.mark.parametrize("precision, autocast", [("bf16", True), ("fp32", False)])
def test_evaluation_runs_in_the_training_precision(precision, autocast):
    """As it trains: under bf16 autocast when training is (it ran in full fp32: slower on a GPU, and not
    the model that trains)."""
    from types import SimpleNamespace

    from cbs_ray.sources.builtin import evaluate

    spec = load_spec(None, SMALL + [f"training.precision={precision}"])
    prepared = prepare(spec)
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    setup = TrialConfig.from_tune(spec, {"log2_batch": 4, "alpha": 1.0, "warmup_fraction": 0.0},
                                  budget_samples=budget, model_config=config)
    seen = []

    class Recording(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            seen.append(torch.is_autocast_enabled("cpu"))
            return SimpleNamespace(logits=torch.zeros(len(input_ids), 2))

    metrics = evaluate(Recording(), LocalSession(), data, setup)
    assert seen and set(seen) == {autocast} and metrics["accuracy"] >= 0


def test_reports_before_the_last_evaluate_the_subset_and_the_last_all_of_the_evaluation_set():
    """training.eval_subset_examples: 128 eval examples in SMALL; a subset of 32 for the report at 128 samples,
    all 128 at the last (256), where the answer is read. The subset is the set's first 32: the same for every
    trial, so two trials' intermediate reports stay paired."""
    reports, _ = run(["training.eval_subset_examples=32"], batch=32)
    assert [r["eval_examples"] for r in reports] == [32, 128]
    whole, _ = run(["training.eval_subset_examples=null"], batch=32)
    assert [r["eval_examples"] for r in whole] == [128, 128]
    assert reports[-1]["accuracy"] == whole[-1]["accuracy"]  # the same training; only the first report differs
