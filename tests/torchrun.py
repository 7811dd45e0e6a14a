"""Running a command under `torchrun --standalone --nproc_per_node N` from a test, and telling why it did not end."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


def loopback_works() -> bool:
    """Whether a socket on 127.0.0.1 accepts a connection; torchrun and gloo need it, and with the loopback
    interface down (a bare network namespace) they wait forever instead of failing."""
    try:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            with socket.create_connection(server.getsockname(), timeout=5):
                return True
    except OSError:
        return False


def pids_mentioning(text: str) -> list[int]:
    """Processes whose command line contains `text` (Linux /proc; none elsewhere)."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(entry.name))
        except OSError:  # ended meanwhile, or not ours to read
            pass
    return pids


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def run_torchrun(args: list[str], out: Path, log: Path, processes: int = 2, timeout: float = 240) -> str:
    """Run `python -m torch.distributed.run --standalone --nproc_per_node N *args` (its workers write to `out`), and
    return what it printed; the test fails with that output if it exits non-zero or does not end in `timeout` s,
    and is skipped where the loopback network is down."""
    if not loopback_works():
        pytest.skip("the loopback network is down here (bring it up: `ip link set lo up`); torchrun needs it")
    # --standalone: the launcher binds a free port itself and keeps it (choosing one here and passing it on leaves a
    # moment in which another process can take it)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes),
               *args]
    # Output to a file, not a pipe: a worker left behind cannot then keep the test waiting for its end.
    with log.open("w") as written:
        launched = subprocess.Popen(command, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"},
                                    stdout=written, stderr=subprocess.STDOUT, start_new_session=True)
        try:  # normally 6-25 s; the long limit is for a machine shared with other jobs
            launched.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # The workers run in sessions of their own: find them by their output directory, have each print
            # where it waits (faulthandler), then end them and the launcher.
            workers = [pid for pid in pids_mentioning(str(out)) if pid != launched.pid]
            signal_all(workers, signal.SIGUSR1)
            time.sleep(2)
            signal_all([launched.pid, *workers], signal.SIGKILL)
            launched.wait()
            pytest.fail(f"torchrun did not finish in {timeout:.0f} s; workers {workers}; it printed:\n"
                        f"{log.read_text()[-6000:]}")
    output = log.read_text()
    assert launched.returncode == 0, output[-3000:]
    return output
