"""Entities in tag sequences: BIO, BIOES and BMES tags read into (type, start, end) runs, seqeval's way.

Decoding entities is what a tagger's predictions and its gold data share: `bertkit.inference` turns
predicted tags into spans with it, and `bertkit.training.metrics` scores entity matches with it.
"""

from __future__ import annotations

from collections.abc import Sequence

from bertkit.errors import InputError

__all__ = ["get_entities"]

# A tag is "O" or PREFIX-TYPE with PREFIX in B, I, E, S (BIOES) or B, M, E, S (BMES; M means I).
# An entity is a maximal run (type, start, end) read with seqeval's chunk rules: it starts at B or S,
# at an I/E that follows O, E or S, or at any tag whose type differs from the previous one; so
# "I-PER I-PER" without B- is one PER entity, as in seqeval's default mode and conlleval.


def _split_tag(tag: str) -> tuple[str, str]:
    if tag == "O":
        return "O", "_"
    prefix, sep, kind = tag.partition("-")
    if not sep or prefix not in ("B", "I", "M", "E", "S") or not kind:
        raise InputError(f"invalid entity tag {tag!r}: expected 'O' or B-/I-/M-/E-/S- followed by a type")
    return ("I" if prefix == "M" else prefix), kind


def _chunk_ends(prev: str, tag: str, prev_type: str, kind: str) -> bool:
    return (prev in ("E", "S")
            or (prev in ("B", "I") and tag in ("B", "S", "O"))
            or (prev != "O" and prev_type != kind))


def _chunk_starts(prev: str, tag: str, prev_type: str, kind: str) -> bool:
    return (tag in ("B", "S")
            or (prev in ("E", "S", "O") and tag in ("I", "E"))
            or (tag != "O" and prev_type != kind))


def get_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Entities of one tag sequence as (type, start, end) with `end` inclusive, seqeval's way."""
    entities, start = [], 0
    prev, prev_type = "O", ""
    for i, label in enumerate([*tags, "O"]):
        tag, kind = _split_tag(label)
        if _chunk_ends(prev, tag, prev_type, kind):
            entities.append((prev_type, start, i - 1))
        if _chunk_starts(prev, tag, prev_type, kind):
            start = i
        prev, prev_type = tag, kind
    return entities
