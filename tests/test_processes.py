"""bertkit.utils.processes: the one pool the token store and the packing plan start their workers with."""

from __future__ import annotations

import os
import sys
import warnings

from bertkit.utils.processes import process_pool

_started: list[str] = []


def _start(tag: str) -> None:
    _started.append(tag)


def _report(_: int) -> tuple[int, list[str]]:
    return os.getpid(), list(_started)


def test_a_pool_runs_its_initializer_in_each_worker_and_does_not_warn_about_forking():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # Python 3.12+ warns when a process with threads forks
        pool = process_pool(1, _start, ("ready",))
    with pool:
        pid, started = pool.apply(_report, (0,))
    assert pid != os.getpid() and started == ["ready"] and _started == []
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    assert pool._ctx.get_start_method() == method
