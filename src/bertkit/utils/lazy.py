"""A package that exports its modules' public names lazily (PEP 562): `from bertkit.models.bert import BertModel`
works, yet importing the package imports nothing, so `bertkit.models.bert.configuration` stays free of torch."""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Sequence
from typing import Any


def lazy_modules(package: str, modules: Sequence[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(`__getattr__`, `__dir__`) for `package`: a name is looked up in its `modules`, in order, each imported only
    when a name is asked for and not found in the ones before it; names a module merely imports do not count."""
    def own(module: types.ModuleType, name: str) -> bool:
        value = getattr(module, name, None)
        return (value is not None and not name.startswith("_") and not isinstance(value, types.ModuleType)
                and getattr(value, "__module__", module.__name__) == module.__name__)

    def __getattr__(name: str) -> Any:
        for short in modules:
            module = importlib.import_module(f"{package}.{short}")
            if own(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        names = set()
        for short in modules:
            module = importlib.import_module(f"{package}.{short}")
            names |= {name for name in vars(module) if own(module, name)}
        return sorted(names)

    return __getattr__, __dir__
