"""One way the integrations' two-process tests launch their scripts: ``torchrun --standalone --nproc-per-node 2``
(gloo, one thread a process), with this folder and tests/ on the path, the script writing its records to a JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def run_two_processes(script: str, tmp_path: Path) -> Any:
    """Run ``script`` (a file beside this one) under torchrun with 2 processes; its ``result.json``, parsed.
    A failure shows the traceback the processes printed."""
    out = tmp_path / "result.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parents[1]),
                                                        os.environ.get("PYTHONPATH", "")]), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(HERE / script), str(out), str(tmp_path / "hf")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    start = done.stderr.find("Traceback")
    assert done.returncode == 0, done.stderr[start:start + 4000] if start >= 0 else done.stderr[-4000:]
    return json.loads(out.read_text())
