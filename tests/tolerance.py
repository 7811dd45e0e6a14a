"""Test helper: parity comparisons with a tolerance that scales with the reference's magnitude.

fp32 matrix products on different CPUs sum in different orders (oneDNN picks AMX, AVX-512 or AVX2 kernels, MKL
its own blocking), so the same model on the same inputs gives results that differ by a few ulps of the values'
magnitude, and that absolute difference grows with the magnitude. An absolute tolerance on activations of
magnitude 11 is therefore a test of the CPU; a tolerance relative to the reference's magnitude is a test of the
model.
"""

from __future__ import annotations

import numpy as np
import torch


def _as_float64(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().to(torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def allowed_difference(scale: float, rtol: float = 1e-5) -> float:
    """The largest difference assert_close lets pass for a reference of magnitude `scale`: rtol · max(1, scale).

    At magnitudes up to 1 this is the absolute bound rtol; above 1 it grows with the magnitude, as rounding does."""
    return rtol * max(1.0, float(scale))


def assert_close(actual, expected, rtol: float = 1e-5, msg: str | None = None) -> None:
    """Assert max |actual - expected| <= rtol · max(1, scale), where scale = max |expected| over the compared tensor.

    `actual` and `expected` are torch tensors, NumPy arrays or numbers of the same shape (no broadcasting);
    they are compared in float64. The scale is the reference's (`expected`'s) largest magnitude over the whole
    tensor, not each element's own: a matmul's rounding error in one output is a few ulps of the magnitudes it
    summed, which show in the tensor's largest values, so an output that happens to be near zero carries the
    same absolute error as its large neighbours, and a per-element relative bound would fail on it. Taking the
    reference's magnitude (not the larger of the two) keeps a wrong `actual` from widening its own bound. Below
    magnitude 1 the bound is the plain absolute rtol (1e-5 by default: the project's fp32 parity bar).
    Non-finite values must match exactly (same positions, same values)."""
    a, e = _as_float64(actual), _as_float64(expected)
    prefix = f"{msg}: " if msg else ""
    if a.shape != e.shape:
        raise AssertionError(f"{prefix}shapes differ: {a.shape} against expected {e.shape}")
    if a.size == 0:
        return
    finite = np.isfinite(e)
    if not np.array_equal(np.isfinite(a), finite) or not np.array_equal(a[~finite], e[~finite]):
        raise AssertionError(f"{prefix}non-finite values differ: {np.count_nonzero(~np.isfinite(a))} in actual, "
                             f"{np.count_nonzero(~finite)} in expected")
    diff = np.abs(np.where(finite, a, 0.0) - np.where(finite, e, 0.0))       # equal non-finite values: no difference
    scale = float(np.abs(e[finite]).max()) if finite.any() else 0.0
    allowed = allowed_difference(scale, rtol)
    worst = float(diff.max())
    if not worst <= allowed:
        where = np.unravel_index(int(np.argmax(diff)), diff.shape)
        index = tuple(int(i) for i in where)
        raise AssertionError(
            f"{prefix}max |actual - expected| = {worst:.4g} at index {index} (actual {a[where]:.8g}, expected "
            f"{e[where]:.8g}) > allowed {allowed:.4g} = rtol {rtol:g} x max(1, scale {scale:.4g}); "
            f"scale = max |expected| over {e.size} values")
