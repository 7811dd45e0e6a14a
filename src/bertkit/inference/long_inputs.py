"""Texts longer than the model's positions, read whole instead of cut: the text's tokens in overlapping windows
that each fit the model, each window encoded on its own, and the windows' vectors pooled into one.

    window_spans(40, size=14, overlap=4)               # [(0, 14), (10, 24), (20, 34), (30, 40)]
    windows, counts = split_rows(rows, max_length=16, overlap=4)
    vectors = pool_rows(outputs, windows, counts, "mean")   # one vector per row of `rows`

A window is [CLS] + a slice of the text's tokens + [SEP], as the text alone would be read; consecutive windows
share `overlap` tokens, so no token is read only at a window's edge. "mean" pools the windows' vectors weighted
by the number of the text's tokens each holds (a short last window counts less), "first" keeps the first
window's. A text that fits one window is that one row, unchanged, and its pooled vector is its own vector (not a
mean of one, which could differ in the last bit): turning chunking on changes nothing for the texts that fit.

`bertkit encode --long-inputs chunk` and `bertkit serve --long-inputs chunk` both window and pool through these
functions. The vectors pooled are the raw ones; a caller that normalizes does so after pooling.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bertkit.errors import InputError
from bertkit.inference.batching import EncodedText
from bertkit.models.sentence_files import CHUNK_POOLINGS, FIRST, MEAN

SPECIALS = 2  # [CLS] and [SEP] around every window of a single text


def window_size(max_length: int) -> int:
    """The text's tokens one window holds: the model's positions less [CLS] and [SEP]."""
    return max_length - SPECIALS


def default_overlap(max_length: int) -> int:
    """The tokens consecutive windows share when none is given: a quarter of a window."""
    return window_size(max_length) // 4


def check_overlap(overlap: int | None, max_length: int, name: str = "chunk_stride") -> int:
    """The overlap to use (the default for None), or an InputError: a window must move on by at least a token."""
    if overlap is None:
        return default_overlap(max_length)
    size = window_size(max_length)
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < size:
        raise InputError(f"{name} must be a whole number from 0 to {size - 1} (a window holds {size} tokens of "
                         f"the text: {max_length} positions less [CLS] and [SEP]), got {overlap!r}")
    return overlap


def check_pooling(pooling: str) -> str:
    if pooling not in CHUNK_POOLINGS:
        raise InputError(f"chunk pooling must be one of {CHUNK_POOLINGS}, not {pooling!r}")
    return pooling


def window_spans(length: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """[start, stop) of each window over `length` tokens: `size` tokens each, each starting `size - overlap` after
    the one before, the last ending at the text's end (and so perhaps shorter). Zero tokens: one empty window."""
    if size < 1 or not 0 <= overlap < size:
        raise InputError(f"a window needs at least one token and an overlap smaller than itself; got size {size}, "
                         f"overlap {overlap}")
    step = size - overlap
    spans = [(0, min(size, length))]
    while spans[-1][1] < length:
        start = spans[-1][0] + step
        spans.append((start, min(start + size, length)))
    return spans


def split_row(row: EncodedText, max_length: int, overlap: int) -> list[EncodedText]:
    """The windows of one tokenized single text ([CLS] ... [SEP]): the row itself when it fits `max_length`."""
    if len(row.input_ids) <= max_length:
        return [row]
    first, body, last = row.input_ids[0], row.input_ids[1:-1], row.input_ids[-1]
    token_type = row.token_type_ids[0]
    return [EncodedText([first, *body[start:stop], last], [token_type] * (stop - start + SPECIALS))
            for start, stop in window_spans(len(body), window_size(max_length), overlap)]


def split_rows(rows: Sequence[EncodedText], max_length: int, overlap: int) -> tuple[list[EncodedText], list[int]]:
    """Every row's windows in one flat list, and how many windows each row has (in the order of `rows`)."""
    windows: list[EncodedText] = []
    counts: list[int] = []
    for row in rows:
        parts = split_row(row, max_length, overlap)
        windows += parts
        counts.append(len(parts))
    return windows, counts


def pool_windows(vectors: Sequence[np.ndarray], weights: Sequence[int], pooling: str = MEAN) -> np.ndarray:
    """One text's vector from its windows' vectors: their mean weighted by `weights` (the text's tokens in each
    window), or the first window's (`pooling="first"`). One window: its vector itself."""
    check_pooling(pooling)
    if len(vectors) == 1 or pooling == FIRST:
        return vectors[0]
    # summed in float64: the windows' vectors are float32, and the weights can be several hundred
    mean = np.average(np.stack(vectors).astype(np.float64), axis=0, weights=np.asarray(weights, dtype=np.float64))
    return mean.astype(vectors[0].dtype)


def pool_rows(outputs: Sequence[np.ndarray], windows: Sequence[EncodedText], counts: Sequence[int],
              pooling: str = MEAN) -> list[np.ndarray]:
    """The vector of each text from the outputs of its windows (`split_rows`' windows and counts, in order)."""
    pooled = []
    start = 0
    for count in counts:
        parts = range(start, start + count)
        pooled.append(pool_windows([outputs[k] for k in parts],
                                   [len(windows[k].input_ids) - SPECIALS for k in parts], pooling))
        start += count
    return pooled
