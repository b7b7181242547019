"""The repository's root, for tests that read its files (examples/, search_spaces/, bench/, cluster.yaml)
wherever under tests/ they live."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEARCH_SPACES = ROOT / "search_spaces"
