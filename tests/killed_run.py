"""Test helper: a training command killed with SIGKILL once a given checkpoint is on disk, for exact-resume tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def kill_at_checkpoint(argv: list[str], out: Path, checkpoint: str = "checkpoint-8", timeout: float = 240) -> None:
    """Run `python -m bertkit *argv` on one thread and SIGKILL it as soon as `out/checkpoint` exists; the run must
    not have finished by then."""
    proc = subprocess.Popen([sys.executable, "-m", "bertkit", *argv], env={**os.environ, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    while not (out / checkpoint).exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "model.safetensors").exists(), "the run ended before it was killed"
