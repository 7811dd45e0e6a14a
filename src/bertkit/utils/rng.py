"""The one counter-based random source: splitmix64's step and finaliser (Steele, Lea and Flood, 2014).

A random number here is a pure function of integers (a seed, an epoch, an index, what it chooses), not the next
output of a generator whose state advances: so what an example or a document gets does not depend on the number
of processes, the order the work is done in, or a resume. `mix` works on Python integers, `draw` on numpy arrays
(many documents at once); for the same inputs both give the same 64 bits. The trainer's collation seeds and the
packing rule's choices are both made here, and runs are reproducible only while these outputs stay the same
(tests/test_rng.py holds them to fixed values)."""

from __future__ import annotations

import numpy as np

GOLDEN, M1, M2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # splitmix64's constants
MASK64 = (1 << 64) - 1


def _mix_int(h: int) -> int:
    h = (h + GOLDEN) & MASK64
    h = ((h ^ (h >> 30)) * M1) & MASK64
    h = ((h ^ (h >> 27)) * M2) & MASK64
    return h ^ (h >> 31)


def mix(key: int, *values: int) -> int:
    """64 random bits (an int in [0, 2**64)): `key` (0 to start, or an earlier result) with `values` mixed in one
    after another; a negative value counts as itself modulo 2**64."""
    for value in values:
        key = _mix_int(key ^ value)
    return key


def draw(key, *values) -> np.ndarray:
    """64 random bits per element: `key` (0 to start, or an earlier draw) with `values` (integers, arrays
    broadcast) mixed in one after another by splitmix64. So `draw(draw(0, seed, entry, k), CUT)` equals
    `draw(0, seed, entry, k, CUT)`: one key of (seed, entry, instance) serves every choice of that instance. Plain
    integers are mixed in Python while they can be, the rest with numpy, whose unsigned arithmetic wraps as the
    mixing wants."""
    h, k = key, 0
    while isinstance(h, int) and k < len(values) and isinstance(values[k], int | np.integer):
        h = _mix_int(h ^ int(values[k]))
        k += 1
    if k == len(values):
        return np.atleast_1d(np.asarray(h, np.uint64))
    rest = [np.asarray(v) for v in values[k:]]
    out = np.empty(np.broadcast_shapes(np.shape(h), *(a.shape for a in rest)), np.uint64)
    out[...] = h
    for value in rest:
        out ^= value.astype(np.uint64, copy=False)
        out += np.uint64(GOLDEN)
        out ^= out >> np.uint64(30)
        out *= np.uint64(M1)
        out ^= out >> np.uint64(27)
        out *= np.uint64(M2)
        out ^= out >> np.uint64(31)
    return np.atleast_1d(out)
