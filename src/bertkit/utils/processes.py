"""The one way bertkit starts worker processes: a pool, forked where forking is safe, spawned elsewhere."""

from __future__ import annotations

import multiprocessing
import multiprocessing.pool
import sys
import warnings
from collections.abc import Callable
from typing import Any


def process_pool(processes: int, initializer: Callable[..., Any] | None = None,
                 initargs: tuple = ()) -> multiprocessing.pool.Pool:
    """A `multiprocessing` pool of `processes` workers, each started with `initializer(*initargs)`.

    Forked on Linux: the workers start at once, and a script that calls this needs no `if __name__ ==
    "__main__"` guard. Spawned elsewhere (macOS forks unsafely). A caller's workers must run only numpy and the
    tokenizer, never torch: then the threads the parent holds (torch's) cannot hang a forked worker, and the
    DeprecationWarning that Python 3.12+ gives for forking a process with threads is silenced here for that reason."""
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
        return multiprocessing.get_context(method).Pool(processes, initializer, initargs)
