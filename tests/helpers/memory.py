"""A scripted peak-memory meter for the micro-batch probe's tests (no device needed)."""


class ScriptedMemory:
    """A peak-memory meter that reads back a script: the baseline, then one peak per step run."""

    def __init__(self, readings):
        self.readings, self.read = list(readings), 0

    def reset(self):
        pass

    def bytes(self):
        self.read += 1
        return self.readings.pop(0)
