#!/usr/bin/env bash
# Everything a GPU session checks, in one go (a device lease is minutes): the GPU tests, the trial loop's
# own MFU and accumulation overhead, then the BERT-base probe / MFU / accumulation bench. Writes logs to
# $OUT (or ./gpu-out).
#   bash bench/gpu_session.sh            # the tests, the trial loop, then the bench eager: the real probe,
#                                        # MFU, accumulation 2 and 4, the per-kernel profile (~8 min at most)
#   bash bench/gpu_session.sh quick      # the tests, the trial loop, the probe and eager MFU only
#   bash bench/gpu_session.sh compiled [2048]  # no tests: torch.compile MFU and accumulation at a known
#                                              # micro-batch (each shape compiles: minutes)
#   bash bench/gpu_session.sh 2048       # the tests, then the bench at a known micro-batch (no probe), also
#                                        # without dropout
#   bash bench/gpu_session.sh autotune [2048]  # no tests: MFU compiled with max-autotune (autotuning
#                                              # takes minutes), dropout 0, at a known micro-batch
# Check the benches themselves on a CPU first: python bench/gpu_bert_base.py --smoke;
# python bench/gpu_trial_loop.py --smoke (both are default tests)
set -o pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD HF_HUB_OFFLINE=1
timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
timeout 30 python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$out/gpu.txt"
if [ "$1" = autotune ]; then
  timeout 540 python3 bench/gpu_bert_base.py --steps 20 --micro "${2:-2048}" --dropout 0 --no-accumulation \
    --compile-mode max-autotune-no-cudagraphs 2>&1 | tee "$out/gpu_bert_base_autotune.log"
  exit
fi
if [ "$1" = compiled ]; then
  timeout 540 python3 bench/gpu_bert_base.py --steps 20 --micro "${2:-2048}" 2>&1 | tee "$out/gpu_bert_base_compiled.log"
  exit
fi
# Each mode's timeouts add up to under 600 s, one device command's limit, with room to spare.
timeout 150 python3 -m pytest -m gpu -p no:cacheprovider -q tests/train/test_gpu.py 2>&1 | tee "$out/pytest_gpu.log" | tail -30
if [ "$1" = quick ] || [ -z "$1" ]; then
  timeout 150 python3 bench/gpu_trial_loop.py --micro "${MICRO:-2048}" 2>&1 | grep -v "^trial:" | tee "$out/gpu_trial_loop.log"
fi
if [ "$1" = quick ]; then
  timeout 120 python3 bench/gpu_bert_base.py --steps 20 --no-compile --no-accumulation 2>&1 | tee "$out/gpu_bert_base.log"
elif [ -z "$1" ]; then
  timeout 150 python3 bench/gpu_bert_base.py --steps 20 --no-compile --profile 2>&1 | tee "$out/gpu_bert_base.log"
else
  timeout 190 python3 bench/gpu_bert_base.py --steps 20 --micro "$1" 2>&1 | tee "$out/gpu_bert_base.log"
  timeout 190 python3 bench/gpu_bert_base.py --steps 20 --micro "$1" --dropout 0 --no-accumulation 2>&1 | tee "$out/gpu_bert_base_nodropout.log"
fi
