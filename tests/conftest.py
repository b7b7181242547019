import os

# Tests never reach a model hub: an unknown model name must fail at once, not after retries.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
