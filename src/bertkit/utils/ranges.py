"""The one check of a number against its range: training options (their field metadata), TrainingArguments and the
command line's numeric flags all state and refuse ranges through it, so they say the same thing the same way.

    check_number("--batch-size", 0, minimum=1)      # InputError: --batch-size must be at least 1, got 0
    out_of_range(math.inf, above=0)                 # "a finite number above 0"

`minimum` / `maximum` are inclusive, `above` / `below` exclusive; a float must be finite.
"""

from __future__ import annotations

import math

from bertkit.errors import InputError


def stated_range(minimum: float | None = None, above: float | None = None, maximum: float | None = None,
                 below: float | None = None) -> str | None:
    """How a range reads ("at least 1", "in [0, 1)", "above 0"), or None for no range."""
    low = f"[{minimum}" if minimum is not None else f"({above}" if above is not None else None
    high = f"{maximum}]" if maximum is not None else f"{below})" if below is not None else None
    if low and high:
        return f"in {low}, {high}"
    if low:
        return ("at least " if low[0] == "[" else "above ") + low[1:]
    if high:
        return ("at most " if high[-1] == "]" else "below ") + high[:-1]
    return None


def out_of_range(value: float, minimum: float | None = None, above: float | None = None,
                 maximum: float | None = None, below: float | None = None) -> str | None:
    """None when `value` lies in the range; else what it must be ("at least 1", "a finite number above 0")."""
    finite = not isinstance(value, float) or math.isfinite(value)
    inside = finite and all((minimum is None or value >= minimum, above is None or value > above,
                             maximum is None or value <= maximum, below is None or value < below))
    if inside:
        return None
    return " ".join(part for part in ("" if finite else "a finite number",
                                      stated_range(minimum, above, maximum, below) or "") if part)


def check_number(label: str, value: float, minimum: float | None = None, above: float | None = None,
                 maximum: float | None = None, below: float | None = None) -> None:
    """An InputError naming `label` and the range when `value` lies outside it (or is NaN or infinite)."""
    stated = out_of_range(value, minimum, above, maximum, below)
    if stated is not None:
        raise InputError(f"{label} must be {stated}, got {value}")
