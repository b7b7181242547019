"""The micro-batch planner's arithmetic with a fake memory function that fails above a threshold."""

import pytest

from cbs_ray.train.memory_planner import (
    ProbeCache,
    _probe_step,
    cpu_fits,
    extrapolated_peak,
    plan_micro_batch,
    probe_key,
)
from helpers.memory import ScriptedMemory


def memory(limit_samples):
    calls = []

    def fits(m):
        calls.append(m)
        return m <= limit_samples
    return fits, calls


@pytest.mark.parametrize("limit,expected", [
    (100, 64),    # 128 / 0.9 = 143 does not fit; 64 / 0.9 = 72 does
    (150, 128),   # 143 fits
    (142, 64),    # one short of 143
    (1, 0),       # even 1 / 0.9 -> 2 does not fit
    (2, 1),
])
def test_plan_is_the_largest_power_of_two_that_fits_with_a_10_percent_margin(limit, expected):
    fits, calls = memory(limit)
    if expected == 0:
        with pytest.raises(MemoryError):
            plan_micro_batch(fits)
        return
    assert plan_micro_batch(fits) == expected
    assert len(calls) == expected.bit_length() + 1  # doubling only: log2(p) + 2 tries, the last one fails


def test_the_probe_stops_at_its_limit_and_does_not_depend_on_a_trials_share():
    fits, calls = memory(10 ** 9)
    assert plan_micro_batch(fits, upper=1024) == 1024
    assert max(calls) == 1138  # 1024 / 0.9 rounded up: the margin is probed, not assumed


def test_cache_round_trip_and_keys(tmp_path):
    cache = ProbeCache(tmp_path / "probe.json")
    key = probe_key({"name": "bert-base-uncased"}, 128, "bf16", "NVIDIA H200")
    assert cache.get(key, 512) is None
    cache.put(key, 256, 512)  # probed up to 512: 256 is the device's ceiling (512 / 0.9 did not fit)
    again = ProbeCache(tmp_path / "probe.json")
    assert (again.get(key, 512), again.get(key, 4096), again.get(key, 128)) == (256, 256, 128)
    cache.put(key, 512, 512)  # reached its limit: says nothing about 1024
    assert (cache.get(key, 512), cache.get(key, 64), cache.get(key, 1024)) == (512, 64, None)
    assert probe_key({"config": {"b": 1, "a": 2}}, 128, "bf16", "x") == probe_key({"config": {"a": 2, "b": 1}}, 128, "bf16", "x")
    assert key != probe_key({"name": "bert-base-uncased"}, 256, "bf16", "NVIDIA H200")
    with_checkpointing = probe_key({"name": "bert-base-uncased"}, 128, "bf16", "NVIDIA H200", training="adamw+checkpointing")
    assert with_checkpointing.endswith("|adamw+checkpointing") and with_checkpointing != key


def test_extrapolated_peak_scales_the_largest_runs_memory_above_the_baseline():
    assert extrapolated_peak(100, [], 8) is None                 # nothing run yet: the first size runs unseen
    assert extrapolated_peak(100, [(4, 300)], 8) == 500          # 200 above baseline at 4 -> 400 at 8
    assert extrapolated_peak(100, [(2, 150), (4, 300)], 16) == 900  # from the largest run: 200 * 16 / 4
    assert extrapolated_peak(100, [(4, 90)], 8) == 100           # measured below the baseline: no growth


def tiny_model():
    """The default tiny BERT with a 100-word vocabulary, for probe steps at sequence length 16."""
    from cbs_ray.sources.model import build_model, model_config
    from cbs_ray.spec.schema import TINY_BERT

    config = model_config({"config": TINY_BERT}, "sequence-classification", vocab_size=100, num_labels=2,
                          pad_id=0, max_seq_length=16)
    return build_model({"config": TINY_BERT}, "sequence-classification", config)


def test_cpu_probe_refuses_sizes_expected_over_the_limit_without_running_them():
    import torch

    model = tiny_model()
    # baseline 1000; steps at 2, 3, 5 peak at 1200, 1300, 1500. At 9 the expected peak is
    # 1000 + 500 * 9 / 5 = 1900 > 1600: refused unseen. Plan: 4 (4 / 0.9 -> 5 fits, 8 / 0.9 -> 9 does not).
    memory = ScriptedMemory([1000, 1200, 1300, 1500])
    lines = []
    fits = cpu_fits(model, lambda: torch.optim.AdamW(model.parameters()), seq_len=16, vocab_size=100,
                    task="sequence-classification", dtype=None, limit_bytes=1600, memory=memory, log=lines.append)
    assert plan_micro_batch(fits) == 4
    assert memory.read == 4 and not memory.readings  # the baseline and three steps: 9 was never run
    assert "micro-batch 9:" in lines[-1] and "not run" in lines[-1]


def test_cpu_probe_says_no_when_a_measured_step_goes_over():
    import torch

    model = tiny_model()
    memory = ScriptedMemory([1000, 1700])  # the first step (micro-batch 2) already peaks over 1600
    fits = cpu_fits(model, lambda: torch.optim.AdamW(model.parameters()), seq_len=16, vocab_size=100,
                    task="sequence-classification", dtype=None, limit_bytes=1600, memory=memory)
    with pytest.raises(MemoryError):
        plan_micro_batch(fits)


def test_a_probe_step_runs_its_second_forward_beside_the_optimizers_state():
    """Training holds Adam's state through every forward and backward after the first step; a probe that
    stepped once would measure without it."""
    import torch

    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters())
    states_at_forward = []
    model.register_forward_pre_hook(lambda module, args: states_at_forward.append(len(optimizer.state)))
    _probe_step(model, optimizer, 2, seq_len=16, vocab_size=100, task="sequence-classification", dtype=None)
    assert states_at_forward == [0, len(list(model.parameters()))]


def test_the_nothing_fits_message_is_found_in_a_trials_error_text():
    from cbs_ray.tune.nothing_fits import nothing_fits_in

    error = ("Failure # 1 (occurred at 2026-11-30_06-16-45)\nTraceback (most recent call last):\n  File ...\n"
             "MemoryError: not even a micro-batch of 1 fits in memory (cpu<=0.001GiB, sequence length 32, fp32)\n")
    assert nothing_fits_in(error) == \
        "not even a micro-batch of 1 fits in memory (cpu<=0.001GiB, sequence length 32, fp32)"
    assert nothing_fits_in("Failure # 1\nRuntimeError: worker died\n") is None


@pytest.mark.parametrize("reason, advice", [
    ("not even a micro-batch of 1 fits in memory (cpu<=0.001GiB, sequence length 32, fp32)",
     "raise training.memory_limit_gb, shorten data.max_seq_length"),
    ("not even a micro-batch of 1 fits in memory (NVIDIA H200, sequence length 8192, bf16)",
     "use GPUs with more free memory (another process may hold some), shorten data.max_seq_length"),
])
def test_the_nothing_fits_error_says_what_to_change_on_that_device(reason, advice):
    from cbs_ray.tune.runner import DoesNotFit, _raise_if_nothing_fits

    _raise_if_nothing_fits(None, "/x")  # nothing to say
    with pytest.raises(DoesNotFit) as info:
        _raise_if_nothing_fits(reason, "/x/exp")
    assert str(info.value).startswith(reason + ": the search stopped at the first trial") and advice in str(info.value)


@pytest.mark.parametrize("error, fits", [
    (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"), False),
    (RuntimeError("CUDA error: out of memory"), False),
    (RuntimeError("mat1 and mat2 shapes cannot be multiplied"), "raises"),
])
def test_the_cuda_probe_reads_an_out_of_memory_runtime_error_as_does_not_fit(monkeypatch, error, fits):
    """cuBLAS or a CUDA call that runs out of memory raises a RuntimeError, not OutOfMemoryError: that is
    "does not fit" too; any other error is a real one and propagates."""
    import torch

    import cbs_ray.train.memory_planner as planner

    def failing_step(*args, **kwargs):
        raise error

    monkeypatch.setattr(planner, "_probe_step", failing_step)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    probe = planner.cuda_fits(None, lambda: torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1),
                              seq_len=8, vocab_size=10, task="sequence-classification", dtype=None)
    if fits == "raises":
        with pytest.raises(RuntimeError, match="shapes"):
            probe(4)
    else:
        assert probe(4) is False


def test_concurrent_puts_keep_every_entry(tmp_path):
    # Issue 40: put was a read-modify-write through one fixed .tmp name with no lock; trials on one node lost
    # each other's entries.
    import multiprocessing

    path = tmp_path / "probe.json"
    ctx = multiprocessing.get_context("fork")
    writers = [ctx.Process(target=_put_many, args=(str(path), w)) for w in range(4)]
    for p in writers:
        p.start()
    for p in writers:
        p.join(timeout=60)
    assert all(p.exitcode == 0 for p in writers)
    cache = ProbeCache(path)
    assert all(cache.get(f"w{w}-k{k}", 64) == 8 for w in range(4) for k in range(25))
    assert not list(tmp_path.glob("*.tmp"))


def _put_many(path: str, writer: int) -> None:
    cache = ProbeCache(path)
    for k in range(25):
        cache.put(f"w{writer}-k{k}", 8, 64)
