"""What several test modules share, importable as ``helpers`` (``pythonpath = ["tests"]`` in pyproject.toml):
test modules import from here, never from one another nor from conftest."""
