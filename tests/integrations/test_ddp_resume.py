"""Under 2-process DDP (torchrun, gloo), issue 48: exact HF resume (from checkpoints in stages 0, 1 and 2 of
8 → 16 → 32, every later step trains the uninterrupted run's global samples at its LR) and the HF noise callback's
known answer at accumulation 2 (B_small = one process's micro-batch of 4, B_big = the global 16)."""


import pytest
from torchrun_launch import run_two_processes

pytest.importorskip("accelerate")
pytestmark = [pytest.mark.slow, pytest.mark.multiproc]  # two processes: run under the CPU lock



@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return run_two_processes("ddp_resume_script.py", tmp_path_factory.mktemp("ddp"))


def test_hf_resume_under_two_process_ddp_matches_the_uninterrupted_run(result):
    assert result["world_size"] == 2
    assert [n for n, _ in result["full"]] == [8] * 8 + [16] * 8 + [32] * 4
    for checkpoint in (4, 12, 18):
        resumed, expected = result[str(checkpoint)], result["full"][checkpoint:]
        assert [n for n, _ in resumed] == [n for n, _ in expected], checkpoint
        assert [lr for _, lr in resumed] == pytest.approx([lr for _, lr in expected], rel=1e-12), checkpoint


def test_hf_noise_callback_under_ddp_at_accumulation_2_reads_the_known_answer(result):
    noise = result["noise"]
    assert noise["steps"] == 300 and noise["batch_size"] == 16
    assert noise["grad_sq"] == pytest.approx(1.0, rel=0.10)
    assert noise["b_simple"] == pytest.approx(64.0, rel=0.10)
