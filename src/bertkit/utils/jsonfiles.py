"""JSON from files the user gives, read so that no JSON text, however deeply nested, escapes its reader's message.

Python's parser recurses once per level of nested arrays and objects and gives up near 1,000 levels with a
RecursionError, which is no ValueError: a reader that says in one line that a file is not JSON would let it through
as a traceback. `loads` raises it as the json.JSONDecodeError of any other JSON it cannot read, with where the
deepest nesting is, so every reader's own message about bad JSON covers it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# a JSON string (possibly unterminated) or one bracket: the brackets outside strings give the nesting
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.DOTALL)


def dumps(obj: Any, **options: Any) -> str:
    """`json.dumps(obj, **options)` that writes JSON every reader takes: a NaN or infinite float (a score of data
    that gives none: Spearman of constant scores) is written as null, where Python's json writes `NaN`, which
    is no JSON (a strict parser, JavaScript's, jq, refuses the whole file)."""
    return json.dumps(_finite(obj), allow_nan=False, **options)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: _finite(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(value) for value in obj]
    return obj


def loads(text: str | bytes | bytearray) -> Any:
    """`json.loads(text)`; nesting too deep to read is a json.JSONDecodeError naming its depth and place."""
    try:
        return json.loads(text)
    except RecursionError:
        if not isinstance(text, str):
            text = bytes(text).decode("utf-8", "replace")
        depth, position = deepest(text)
        raise json.JSONDecodeError(f"arrays or objects nested {depth:,} deep, too deep to read", text,
                                   position) from None


def deepest(text: str) -> tuple[int, int]:
    """(the deepest nesting of arrays and objects in `text`, the position of the bracket that first reaches it)."""
    depth = best = position = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > best:
                best, position = depth, match.start()
        elif token in "]}":
            depth -= 1
    return best, position
