"""A restricted unpickler for data files: plain containers in, nothing executed.

Pickle is a small program for a stack machine; its GLOBAL/STACK_GLOBAL opcodes import any callable and
REDUCE calls it, which is how a pickle runs `os.system`. Plain containers (list, tuple, dict, str, int,
float, bool, None) never need either, so `find_class` refuses every name and the result is checked to be
made of those types only (pickle's own opcodes can still build sets or bytes, which data files here never
hold).

NumPy arrays of numbers (`load_arrays`) need exactly three names: `numpy.core.multiarray._reconstruct`, called
as `_reconstruct(ndarray, (0,), b"b")` to make an empty array, `numpy.dtype`, called as `dtype("f4", 0, 1)`,
and `numpy.ndarray` as the former's first argument; BUILD then fills both from the stored state. Only those
calls are allowed (`ndarray` cannot be called itself, `dtype` makes numbers only), and the result may hold
plain containers and arrays of booleans, integers and floats only.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

from bertkit.errors import BertkitError

PLAIN_TYPES = (list, tuple, dict, str, int, float, bool, type(None))
NUMBER_KINDS = "biuf"  # numpy dtype kinds of booleans, signed and unsigned integers, floats


class UnsafePickleError(BertkitError, pickle.UnpicklingError):
    """A pickle asked for something other than plain containers (a class, a function, a set, bytes...)."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise UnsafePickleError(f"pickle refers to {module}.{name}; only plain containers "
                                f"({', '.join(t.__name__ for t in PLAIN_TYPES)}) are allowed")

    def persistent_load(self, pid):
        raise UnsafePickleError(f"pickle uses a persistent id ({pid!r}); only plain containers are allowed")


def _check_plain(obj: object, arrays: bool = False) -> None:
    # iterative, so a deeply nested (hostile) structure cannot blow the recursion limit
    stack = [obj]
    while stack:
        item = stack.pop()
        if arrays and _is_number_array(item):
            continue
        if type(item) not in PLAIN_TYPES:
            allowed = "plain containers and arrays of numbers" if arrays else "plain containers"
            raise UnsafePickleError(f"pickle holds a {type(item).__name__}; only {allowed} are allowed")
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def loads_plain(data: bytes) -> object:
    """Unpickle bytes that may hold only list, tuple, dict, str, int, float, bool and None."""
    obj = _PlainUnpickler(io.BytesIO(data)).load()
    _check_plain(obj)
    return obj


def load_plain(path: str | Path) -> object:
    """Unpickle a file that may hold only plain containers; anything else raises UnsafePickleError."""
    with open(path, "rb") as f:
        obj = _PlainUnpickler(f).load()
    _check_plain(obj)
    return obj


# ---- NumPy arrays of numbers ----------------------------------------------------------------------

class _NdarrayName:
    """What the name `numpy.ndarray` unpickles to: a token `_reconstruct` accepts, which nothing can call."""

    def __call__(self, *args, **kwargs):
        raise UnsafePickleError("pickle calls numpy.ndarray itself; only numpy's own array reconstruction is allowed")


_NDARRAY = _NdarrayName()
_RECONSTRUCT_NAMES = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct")}


def _number_dtype(spec, align=0, copy=0):
    """`numpy.dtype` for numbers only: an object or structured dtype could smuggle anything else in."""
    import numpy as np

    dtype = np.dtype(spec, bool(align), bool(copy))
    if dtype.kind not in NUMBER_KINDS or dtype.names is not None or dtype.subdtype is not None:
        raise UnsafePickleError(f"pickle asks for a numpy dtype {dtype!r}; only numbers are allowed")
    return dtype


def _reconstruct(subtype, shape, typecode):
    """`numpy.core.multiarray._reconstruct` for plain ndarrays only (no subclass's constructor runs)."""
    import numpy as np

    if subtype is not _NDARRAY:
        raise UnsafePickleError(f"pickle reconstructs an array of type {subtype!r}; only numpy.ndarray is allowed")
    return np._core.multiarray._reconstruct(np.ndarray, shape, typecode)


def _is_number_array(item: object) -> bool:
    import numpy as np

    return (type(item) is np.ndarray and item.dtype.kind in NUMBER_KINDS and item.dtype.names is None
            and not item.dtype.hasobject)


class _ArrayUnpickler(_PlainUnpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _RECONSTRUCT_NAMES:
            return _reconstruct
        if (module, name) == ("numpy", "ndarray"):
            return _NDARRAY
        if (module, name) == ("numpy", "dtype"):
            return _number_dtype
        raise UnsafePickleError(f"pickle refers to {module}.{name}; only plain containers and numpy arrays of "
                                "numbers are allowed")


def loads_arrays(data: bytes, encoding: str = "ASCII") -> object:
    """Unpickle bytes that may hold plain containers and numpy arrays of numbers only; anything else raises
    UnsafePickleError. A Python 2 pickle of arrays needs encoding="latin1" (its byte strings hold the data)."""
    obj = _ArrayUnpickler(io.BytesIO(data), encoding=encoding).load()
    _check_plain(obj, arrays=True)
    return obj
