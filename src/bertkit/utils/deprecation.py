"""Names that moved or were renamed keep working for a while, with a DeprecationWarning naming the new one.

    __getattr__ = moved_names(__name__, {"CheckpointError": "bertkit.training.checkpointing:TrainingCheckpointError"})
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def moved_names(module: str, renames: dict[str, str]) -> Callable[[str], Any]:
    """A module-level `__getattr__` that hands out each old name's new object ("module:name") with a warning."""
    def __getattr__(name: str) -> Any:
        if name not in renames:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        target, _, new = renames[name].partition(":")
        warnings.warn(f"{module}.{name} is now {target}.{new}; the old name will go in a later release",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(target), new)

    return __getattr__
