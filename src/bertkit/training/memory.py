"""Keeping freed memory for reuse: on CPU, training with batches of changing shapes otherwise spends a
large share of its time in the kernel.

PyTorch's CPU tensors come from the C library's malloc. glibc serves a request above its mmap threshold
(128 KiB to start, adapting up to 32 MiB) with fresh pages from the kernel and gives them back on free,
so the next step's tensors fault their pages in again, one 4 KiB page at a time, each zeroed by the
kernel. Length-grouped batches change shape every step, which defeats glibc's adaptation. Measured on a
translation Transformer (bf16, one thread, 60 steps): 5.2 M page faults, 8.8 s of system time against
16.8 s of user time, 0.60 s/step; with the thresholds raised, 0.3 M faults, 0.5 s, 0.41 s/step.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
_applied: bool | None = None


def keep_freed_memory(threshold: int = 1 << 30) -> bool:
    """Serve allocations below `threshold` bytes from malloc's heap and keep freed memory for the next one.

    The process's resident memory then stays near its peak instead of shrinking between steps. Applied once
    per process; returns whether it took effect (False where the C library is not glibc).
    """
    global _applied
    if _applied is None:
        _applied = False
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name) if name else None
        except OSError:
            libc = None
        if libc is not None and hasattr(libc, "mallopt") and hasattr(libc, "gnu_get_libc_version"):
            _applied = bool(libc.mallopt(M_MMAP_THRESHOLD, threshold)) and bool(
                libc.mallopt(M_TRIM_THRESHOLD, threshold))
    return _applied
