"""From token ids to model inputs: truncation, [CLS] A [SEP] B [SEP], padding, tensors.

The rules are Hugging Face's (its Rust `tokenizers` post-processing, as transformers drives it), so
that every combination of `truncation`, `max_length`, `stride`, overflow and `padding` gives the
same rows as `transformers.BertTokenizer`:

- the special tokens' share of `max_length` is taken first (2 for one text, 3 for a pair); a
  `max_length` smaller than that share turns truncation off, one equal to it empties both texts;
- "longest_first" keeps the shorter text whole when it fits in half, else splits the budget evenly;
  "only_first"/"only_second" cut one text and fail when that one is too short;
- with `stride`, what is cut off becomes overflow windows that overlap by `stride` tokens, and a
  pair's overflow rows are every (window of A, window of B) combination, main row first;
- padding goes to the longest row of the batch or to `max_length`, rounded up to `pad_to_multiple_of`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bertkit.errors import InputError

Offsets = list[tuple[int, int]]


@dataclass
class Row:
    """One model input row (an encoded text or pair) before conversion to a batch dict."""

    input_ids: list[int]
    token_type_ids: list[int]
    attention_mask: list[int]
    special_tokens_mask: list[int]
    offsets: Offsets | None
    overflow: list[Row] = field(default_factory=list)


@dataclass(frozen=True)
class Specials:
    """The ids the template and padding insert."""

    cls_id: int
    sep_id: int
    pad_id: int | None


def windows(length: int, keep: int, stride: int, side: str) -> list[tuple[int, int]]:
    """[start, stop) of the kept part first, then of each overflow window (Rust `Encoding::truncate`)."""
    if keep >= length:
        return [(0, length)]
    if keep == 0:
        return [(0, 0), (0, length)]
    if stride >= keep:
        raise InputError(f"stride ({stride}) must be smaller than the tokens kept per text ({keep}); "
                         "max_length shrinks by the special tokens ([CLS], [SEP]) first")
    step = keep - stride
    parts = []
    if side == "right":
        for start in range(0, length, step):
            stop = min(start + keep, length)
            parts.append((start, stop))
            if stop == length:
                break
    else:
        for stop in range(length, 0, -step):
            start = max(0, stop - keep)
            parts.append((start, stop))
            if start == 0:
                break
    return parts


def truncation_windows(len_a: int, len_b: int | None, max_length: int, strategy: str, stride: int,
                       side: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]] | None]:
    """Windows of A and of B for one pair (Rust `truncate_encodings`); the first window is the kept one."""
    def whole(n: int | None) -> list[tuple[int, int]] | None:
        return None if n is None else [(0, n)]

    if max_length == 0:
        return windows(len_a, 0, stride, side), None if len_b is None else windows(len_b, 0, stride, side)
    to_remove = len_a + (len_b or 0) - max_length
    if to_remove <= 0:
        return whole(len_a), whole(len_b)
    if strategy == "longest_first":
        if len_b is None:
            return windows(len_a, max_length, stride, side), None
        n1, n2 = sorted((len_a, len_b))
        n2 = n1 if n1 > max_length else max(n1, max_length - n1)
        if n1 + n2 > max_length:
            n1 = max_length // 2
            n2 = n1 + max_length % 2
        keep_a, keep_b = (n2, n1) if len_a > len_b else (n1, n2)
        return windows(len_a, keep_a, stride, side), windows(len_b, keep_b, stride, side)
    if strategy == "only_second" and len_b is None:
        raise InputError("truncation='only_second' needs a second text (text_pair)")
    target = len_a if strategy == "only_first" else len_b
    if target <= to_remove:
        which = "first" if strategy == "only_first" else "second"
        raise InputError(f"truncation={strategy!r}: the {which} text ({target} tokens) is too short to bring "
                         f"the input down to max_length by cutting only it")
    if strategy == "only_first":
        return windows(len_a, len_a - to_remove, stride, side), whole(len_b)
    return whole(len_a), windows(len_b, len_b - to_remove, stride, side)


def _template(a: tuple[list[int], Offsets | None], b: tuple[list[int], Offsets | None] | None,
              specials: Specials, add_special_tokens: bool) -> Row:
    """[CLS] A [SEP] (B [SEP]) with token types 0 for the first part and 1 for the second."""
    ids_a, offsets_a = a
    with_offsets = offsets_a is not None
    if add_special_tokens:
        ids = [specials.cls_id, *ids_a, specials.sep_id]
        special = [1] + [0] * len(ids_a) + [1]
        offsets = [(0, 0), *offsets_a, (0, 0)] if with_offsets else None
    else:
        ids, special = list(ids_a), [0] * len(ids_a)
        offsets = list(offsets_a) if with_offsets else None
    types = [0] * len(ids)
    if b is not None:
        ids_b, offsets_b = b
        tail = [specials.sep_id] if add_special_tokens else []
        ids += ids_b + tail
        special += [0] * len(ids_b) + [1] * len(tail)
        types += [1] * (len(ids_b) + len(tail))
        if with_offsets:
            offsets += list(offsets_b) + [(0, 0)] * len(tail)
    return Row(ids, types, [1] * len(ids), special, offsets)


def build_row(a: tuple[list[int], Offsets | None], b: tuple[list[int], Offsets | None] | None,
              specials: Specials, add_special_tokens: bool = True, truncation: str | None = None,
              max_length: int | None = None, stride: int = 0, side: str = "right") -> Row:
    """Truncate (keeping overflow windows) and add special tokens for one text or pair."""
    ids_a, offsets_a = a
    if truncation is None or max_length is None:
        return _template(a, b, specials, add_special_tokens)
    budget = max_length
    if add_special_tokens:
        added = 2 if b is None else 3
        if max_length < added:  # the Rust tokenizer turns truncation off here (its budget wraps around)
            return _template(a, b, specials, add_special_tokens)
        budget = max_length - added
    windows_a, windows_b = truncation_windows(len(ids_a), None if b is None else len(b[0]), budget,
                                              truncation, stride, side)

    def part(sequence: tuple[list[int], Offsets | None], window: tuple[int, int]):
        start, stop = window
        ids, offsets = sequence
        return ids[start:stop], None if offsets is None else offsets[start:stop]

    def make(window_a: tuple[int, int], window_b: tuple[int, int] | None) -> Row:
        return _template(part(a, window_a), None if b is None else part(b, window_b), specials,
                         add_special_tokens)

    first_b = None if windows_b is None else windows_b[0]
    row = make(windows_a[0], first_b)
    for window_a in windows_a[1:]:
        row.overflow.append(make(window_a, first_b))
        row.overflow += [make(window_a, window_b) for window_b in (windows_b or [])[1:]]
    row.overflow += [make(windows_a[0], window_b) for window_b in (windows_b or [])[1:]]
    return row


def pad_rows(rows: list[Row], length: int, specials: Specials, side: str = "right") -> None:
    """Pad every row (and its overflow rows) in place to `length` tokens; longer rows are left alone."""
    for row in rows:
        pad_rows(row.overflow, length, specials, side)
        missing = length - len(row.input_ids)
        if missing <= 0:
            continue
        pad = {"input_ids": [specials.pad_id] * missing, "token_type_ids": [0] * missing,
               "attention_mask": [0] * missing, "special_tokens_mask": [1] * missing}
        for name, values in pad.items():
            current = getattr(row, name)
            setattr(row, name, current + values if side == "right" else values + current)
        if row.offsets is not None:
            blanks = [(0, 0)] * missing
            row.offsets = row.offsets + blanks if side == "right" else blanks + row.offsets
