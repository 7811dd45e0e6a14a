"""A restricted unpickler for data files: plain containers in, nothing executed.

Pickle is a small program for a stack machine; its GLOBAL/STACK_GLOBAL opcodes import any callable and
REDUCE calls it, which is how a pickle runs `os.system`. Plain containers (list, tuple, dict, str, int,
float, bool, None) never need either, so `find_class` refuses every name and the result is checked to be
made of those types only (pickle's own opcodes can still build sets or bytes, which data files here never
hold).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

PLAIN_TYPES = (list, tuple, dict, str, int, float, bool, type(None))


class UnsafePickleError(pickle.UnpicklingError):
    """A pickle asked for something other than plain containers (a class, a function, a set, bytes...)."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise UnsafePickleError(f"pickle refers to {module}.{name}; only plain containers "
                                f"({', '.join(t.__name__ for t in PLAIN_TYPES)}) are allowed")

    def persistent_load(self, pid):
        raise UnsafePickleError(f"pickle uses a persistent id ({pid!r}); only plain containers are allowed")


def _check_plain(obj: object) -> None:
    # iterative, so a deeply nested (hostile) structure cannot blow the recursion limit
    stack = [obj]
    while stack:
        item = stack.pop()
        if type(item) not in PLAIN_TYPES:
            raise UnsafePickleError(f"pickle holds a {type(item).__name__}; only plain containers are allowed")
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
