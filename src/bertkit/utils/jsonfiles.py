"""JSON from files the user gives, read so that no JSON text, however deeply nested, escapes its reader's message.

Python's parser recurses once per level of nested arrays and objects and gives up near 1,000 levels with a
RecursionError, which is no ValueError: a reader that says in one line that a file is not JSON would let it through
as a traceback. `loads` raises it as the json.JSONDecodeError of any other JSON it cannot read, with where the
deepest nesting is, so every reader's own message about bad JSON covers it.
"""

from __future__ import annotations

import json
import re
from typing import Any

# a JSON string (possibly unterminated) or one bracket: the brackets outside strings give the nesting
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.DOTALL)


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
