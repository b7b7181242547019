#!/usr/bin/env bash
# Everything a GPU session checks, in one go (a device lease is minutes): the GPU tests, then the
# BERT-base probe / MFU / accumulation bench. Writes logs to $OUT (or ./gpu-out).
set -o pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$out/gpu.txt"
timeout 240 python3 -m pytest -m gpu -p no:cacheprovider -q tests/test_gpu.py 2>&1 | tee "$out/pytest_gpu.log"
timeout 300 python3 bench/gpu_bert_base.py --steps 20 2>&1 | tee "$out/gpu_bert_base.log"
