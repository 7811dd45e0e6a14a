"""Inference's machinery: inputs checked, tokenized unpadded, sorted by length, run in batches padded only to their
own longest row, results back in input order; the errors and warnings encode and predict give.

Every call tokenizes its texts once, sorts them by length and cuts the sorted list into batches, each padded only
to its own longest row: a batch of short texts then costs what short texts cost, instead of being padded to the one
long text that happened to share its batch. A batch whose rows are all the same length has no padding at all, and
the model runs attention without a mask, its fastest path. `benchmarks/bench_inference.py` measures the gain.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from bertkit.errors import DataError, InputError
from bertkit.utils.constants import GPU_BATCH_TOKENS
from bertkit.utils.devices import to_device
from bertkit.utils.visible import is_blank

PROGRESS_MIN_TEXTS = 1000  # progress=None: fewer texts than this finish before a progress bar would tell anything
CHUNK_TEXTS = 16_384  # texts tokenized, sorted by length and run together: memory stays bounded for any number
# A GPU's forward over a batch of short texts costs about what launching its kernels costs: BERT-base over 64
# headlines (~1,300 tokens) is well under a millisecond of an H200's arithmetic, and about 6 ms of the host's time.
# There a batch of short texts grows past `batch_size` while its padded tokens (rows x longest row) stay within
# GPU_BATCH_TOKENS (utils.constants). A CPU computes every token whatever the batch: its batches stay at
# `batch_size`.
AUTO = "auto"


class TruncationWarning(UserWarning):
    """Some texts were longer than the model's positions (or max_length) and were cut to fit."""


class EmptyTextWarning(UserWarning):
    """Some texts have no visible character (empty, white space, invisible characters): they have no tokens, so their
    results mean nothing."""


class InputTooLongError(InputError):
    """A text is longer than the model's positions (or max_length) and truncation is off."""


class NonFiniteOutputError(DataError, FloatingPointError):
    """The model's output for a text holds NaN or infinite values: no prediction is made from it (a trainer
    evaluating a diverging model catches it as the FloatingPointError it is)."""


@dataclass
class InputFindings:
    """What a run over texts found that makes its results mean less: texts that are empty and texts cut to fit,
    by their index among all texts of the run. A run over many chunks says each kind once, after the last chunk."""

    name: str = "texts"
    total: int = 0                                              # texts seen so far (the next chunk's first index)
    empty: list[int] = field(default_factory=list)
    invisible: bool = False                                     # some empty text holds invisible characters
    # (index, tokens before cutting; None for a text found too long from its beginning, `tokenizer.beginnings`)
    cut: list[tuple[int, int | None]] = field(default_factory=list)
    limit_name: str = ""
    max_length: int = 0

    def warn(self, stacklevel: int = 3) -> None:
        if self.empty:
            several = len(self.empty) > 1
            what = (f"{'are' if several else 'is'} empty or only white space" if not self.invisible else
                    f"{'have' if several else 'has'} no visible character (empty, white space, or invisible "
                    "characters such as U+200B ZERO WIDTH SPACE)")
            warnings.warn(f"{len(self.empty):,} of {self.total:,} {self.name} {what} (the first is "
                          f"{self.name}[{self.empty[0]}]): with no tokens, each gets what [CLS] [SEP] alone gets",
                          EmptyTextWarning, stacklevel=stacklevel)
        if self.cut:
            index = min(self.cut)[0]
            lengths = [n for _, n in self.cut]
            longest = "" if None in lengths else f"up to {max(lengths)} tokens; "  # a long text was read in part
            warnings.warn(f"{len(self.cut):,} of {self.total:,} texts are longer than {self.limit_name} ({longest}"
                          f"the first is text {index}): truncated to {self.max_length} tokens", TruncationWarning,
                          stacklevel=stacklevel)


def in_chunks(items: Sequence, size: int | None = None) -> Iterator[Sequence]:
    """`items` in consecutive slices of `size` (CHUNK_TEXTS): how encode and predict cut a list, and how a file is
    streamed."""
    size = size or CHUNK_TEXTS
    for start in range(0, len(items), size):
        yield items[start:start + size]


@dataclass
class EncodedText:
    """One tokenized input, unpadded: ids, token types and (for tagging) character offsets per token."""

    input_ids: list[int]
    token_type_ids: list[int]
    offsets: list[tuple[int, int]] | None = None


# ---- inputs --------------------------------------------------------------------------------------

def check_texts(texts: Any, name: str = "texts", content: bool = True) -> list[str]:
    """`texts` as a list of str, or a clear error for an empty batch or an item that is not text (with `content`,
    also for an empty one: `check_text_content`)."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        raise InputError(f"{name} must be a list of str, not {type(texts).__name__}")
    texts = list(texts)
    if not texts:
        raise InputError(f"{name} is empty: give at least one text")
    bad = next((i for i, text in enumerate(texts) if not isinstance(text, str)), None)
    if bad is not None:
        raise InputError(f"{name}[{bad}] is {type(texts[bad]).__name__} ({texts[bad]!r:.40}), not str: "
                         f"every item must be a text")
    if content:
        check_text_content(texts, name)
    return texts


def check_text_content(texts: Sequence[str | None], name: str = "texts", findings: InputFindings | None = None,
                       offset: int = 0) -> None:
    """Count the texts with no visible character (empty, white space, invisible characters such as U+200B: they have
    no tokens, so what is made for them is made from [CLS] and [SEP] alone, the same for every such text) into
    `findings`, or without findings say them now in an EmptyTextWarning; a text holding lone surrogates (undecoded
    bytes, which no tokenizer reads) is an error. `offset` is the index of texts[0] among all texts of the run."""
    empty = [offset + i for i, text in enumerate(texts) if text is not None and is_blank(text)]
    invisible = any(texts[i - offset].strip() for i in empty)  # blank, yet not white space: invisible characters
    if findings is not None:
        findings.empty += empty
        findings.invisible = findings.invisible or invisible
    elif empty:
        InputFindings(name, total=len(texts), empty=empty, invisible=invisible).warn(stacklevel=4)
    for i, text in enumerate(texts):
        if text is None:
            continue
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                raise InputError(f"{name}[{offset + i}] is not valid text: it holds undecoded bytes (lone surrogate "
                                 f"{text[err.start]!r} at character {err.start}); decode it with its encoding "
                                 "first") from None


def check_text_pairs(pairs: Any, count: int) -> list[str | None] | None:
    """`pairs` as a list of one str (or None) for each of `count` texts, or None for no pairs; a ValueError that says
    what is wrong otherwise."""
    if pairs is None:
        return None
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
        raise InputError(f"text_pairs must be a list of str (or None), not {type(pairs).__name__}")
    pairs = list(pairs)
    if len(pairs) != count:
        raise InputError(f"{count} texts but {len(pairs)} text_pairs: give one pair per text (None for no pair)")
    bad = next((i for i, pair in enumerate(pairs) if pair is not None and not isinstance(pair, str)), None)
    if bad is not None:
        raise InputError(f"text_pairs[{bad}] is {type(pairs[bad]).__name__}, not str or None")
    check_text_content(pairs, "text_pairs")
    return pairs


def encoder_of(model: nn.Module) -> nn.Module:
    """The encoder that makes the hidden states: the model itself, or the one inside a task model (under its family's
    prefix: a BERT's `bert`, a ModernBERT's `model`)."""
    return getattr(model, getattr(model, "base_model_prefix", "bert") or "bert", model)


def input_limit(model: nn.Module, max_length: int | None) -> tuple[int, str]:
    """The longest input the model takes, and how to name that limit in messages."""
    positions = encoder_of(model).config.max_position_embeddings
    if max_length is None or max_length >= positions:
        return positions, f"the model's {positions} positions"
    if max_length < 2:
        raise InputError(f"max_length must be at least 2 ([CLS] and [SEP]), got {max_length}")
    return max_length, f"max_length {max_length}"


def tokenize(tokenizer: Any, texts: list[str], text_pairs: list[str | None] | None = None, *,
             max_length: int, truncation: bool = True, offsets: bool = False, limit_name: str | None = None,
             findings: InputFindings | None = None, offset: int = 0) -> list[EncodedText]:
    """Tokenize unpadded; texts over `max_length` tokens are cut (counted into `findings`, or without findings said
    now in one TruncationWarning), or refused. `offset` is the index of texts[0] among all texts of the run."""
    limit_name = limit_name or f"max_length {max_length}"
    out: list[EncodedText | None] = [None] * len(texts)
    too_long: list[tuple[int, int]] = []  # (input index, tokens)
    groups = {False: [i for i in range(len(texts)) if text_pairs is None or text_pairs[i] is None]}
    groups[True] = [i for i in range(len(texts)) if text_pairs is not None and text_pairs[i] is not None]
    for has_pair, indices in groups.items():
        if not indices:
            continue
        pairs = [text_pairs[i] for i in indices] if has_pair else None
        if hasattr(tokenizer, "encode_cut"):  # bertkit's tokenizers: cut and measured in one pass
            cut_rows, lengths = tokenizer.encode_cut([texts[i] for i in indices], pairs,
                                                     max_length=max_length if truncation else None, offsets=offsets)
            rows = [EncodedText(row.input_ids, row.token_type_ids, row.offsets) for row in cut_rows]
            too_long += [(offset + indices[k], n) for k, n in enumerate(lengths) if n is None or n > max_length]
            for i, row in zip(indices, rows):
                out[i] = row
            continue
        encoding = tokenizer([texts[i] for i in indices], pairs, truncation=False, return_offsets_mapping=offsets,
                             verbose=False)
        rows = [_row(encoding, k, offsets) for k in range(len(indices))]
        long = [k for k, row in enumerate(rows) if len(row.input_ids) > max_length]
        too_long += [(offset + indices[k], len(rows[k].input_ids)) for k in long]
        if long and truncation:  # only the few long texts are tokenized again, with truncation on
            cut = tokenizer([texts[indices[k]] for k in long], [pairs[k] for k in long] if has_pair else None,
                            truncation=True, max_length=max_length, return_offsets_mapping=offsets, verbose=False)
            for j, k in enumerate(long):
                rows[k] = _row(cut, j, offsets)
        for i, row in zip(indices, rows):
            out[i] = row
    if too_long:
        too_long.sort()
        index, length = too_long[0]
        if not truncation:
            raise InputTooLongError(
                f"text {index} has {length} tokens, more than {limit_name} ({len(too_long)} of {len(texts)} texts "
                f"are too long); shorten it, or turn truncation on")
        if findings is not None:
            findings.cut += too_long
            findings.limit_name, findings.max_length = limit_name, max_length
        else:
            InputFindings(total=len(texts), cut=too_long, limit_name=limit_name, max_length=max_length).warn(4)
    return out  # type: ignore[return-value]


def _row(encoding: Any, k: int, offsets: bool) -> EncodedText:
    return EncodedText(list(encoding["input_ids"][k]), list(encoding["token_type_ids"][k]),
                       [tuple(span) for span in encoding["offset_mapping"][k]] if offsets else None)


# ---- length-sorted batches -----------------------------------------------------------------------

def batch_tokens_for(device: torch.device | str, batch_tokens: int | str | None) -> int | None:
    """The padded tokens a batch of short texts may grow to (`sorted_batches`): "auto" is GPU_BATCH_TOKENS on a GPU
    and None (batches of `batch_size`) elsewhere; a number is itself; None is None."""
    if batch_tokens == AUTO:
        return GPU_BATCH_TOKENS if torch.device(device).type == "cuda" else None
    if batch_tokens is not None and (not isinstance(batch_tokens, int) or isinstance(batch_tokens, bool)
                                     or batch_tokens < 1):
        raise InputError(f"batch_tokens must be a positive int, 'auto' or None, got {batch_tokens!r}")
    return batch_tokens


def sorted_batches(lengths: Sequence[int], batch_size: int, batch_tokens: int | None = None) -> list[list[int]]:
    """Input indices in batches of `batch_size`, longest first, so each batch's rows have similar lengths.

    With `batch_tokens`, a batch of short texts takes more than `batch_size` of them, as many as fit in
    `batch_tokens` padded tokens (rows x its longest row, its first): batches of long texts stay at `batch_size`."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size must be a positive int, got {batch_size!r}")
    order = sorted(range(len(lengths)), key=lengths.__getitem__, reverse=True)  # stable: ties keep input order
    if batch_tokens is None:
        return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    batches, start = [], 0
    while start < len(order):
        size = max(batch_size, batch_tokens // max(1, lengths[order[start]]))
        batches.append(order[start:start + size])
        start += size
    return batches


def collate(rows: Sequence[EncodedText], pad_token_id: int, device: torch.device | str = "cpu"
            ) -> tuple[Tensor, Tensor, Tensor]:
    """(input_ids, attention_mask, token_type_ids), each (B, T) with T the batch's own longest row, on `device` (to a
    GPU through pinned memory, copied without waiting: the next batch is padded while this one is copied)."""
    longest = max(len(row.input_ids) for row in rows)
    ids = np.full((len(rows), longest), pad_token_id, dtype=np.int64)
    types = np.zeros((len(rows), longest), dtype=np.int64)
    mask = np.zeros((len(rows), longest), dtype=np.int64)
    for b, row in enumerate(rows):
        n = len(row.input_ids)
        ids[b, :n], types[b, :n], mask[b, :n] = row.input_ids, row.token_type_ids, 1
    return tuple(to_device(torch.from_numpy(array), device) for array in (ids, mask, types))  # type: ignore[return-value]


@contextmanager
def _eval_mode(model: nn.Module):
    """Dropout off while predicting; the model's own mode restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def show_progress(progress: bool | None, count: int) -> bool:
    """progress=True/False as given; None (the command line's choice): on for long inputs drawn to a terminal."""
    if progress is not None:
        return bool(progress)
    return count >= PROGRESS_MIN_TEXTS and sys.stderr is not None and sys.stderr.isatty()


def run_sorted(model: nn.Module, rows: Sequence[EncodedText], forward: Callable[[Tensor, Tensor, Tensor], Sequence],
               *, batch_size: int, pad_token_id: int | None, progress: bool | None = False,
               desc: str = "inference", bar: Any = None, offset: int = 0,
               batch_tokens: int | str | None = None) -> list:
    """`forward(input_ids, attention_mask, token_type_ids)` -> one result per row, over length-sorted batches;
    the results come back in the order of `rows`. A progress bar only when asked for (`show_progress`), or `bar`,
    one a caller running several chunks keeps; `offset` is the index of rows[0] among all texts of the run.
    `batch_tokens`: how far a batch of short texts may grow past `batch_size` (`batch_tokens_for`; "auto": on a GPU).

    `forward` may give a tensor (a row each) where it leaves the result on a GPU: it is copied back while the next
    batch is padded and queued (`_read_back`), so the GPU is not left idle between batches."""
    device = next(model.parameters()).device
    batches = sorted_batches([len(row.input_ids) for row in rows], batch_size, batch_tokens_for(device, batch_tokens))
    results: list = [None] * len(rows)
    own = bar is None
    if own:
        bar = tqdm(total=len(rows), unit="text", desc=desc, disable=not show_progress(progress, len(rows)))

    def keep(chosen: list[int], outputs: Callable[[], Sequence]) -> None:
        batch = outputs()
        # one check of a batch's array (a row each) where it is one; a row at a time only to name the one that failed
        whole = isinstance(batch, np.ndarray) and _finite(batch)
        for i, result in zip(chosen, batch, strict=True):
            if not whole and not _finite(result):
                low = next(model.parameters()).dtype in (torch.bfloat16, torch.float16)
                raise NonFiniteOutputError(
                    f"the model's output for text {offset + i} is not finite (NaN or infinite values): its "
                    + ("activations overflowed in its 16-bit number format (try fp32)" if low else
                       "weights or activations overflowed (a diverged model?)")
                    + ", so there is no prediction to give")
            results[i] = result
        bar.update(len(chosen))

    try:
        with _eval_mode(model), torch.inference_mode():
            pending = None
            for chosen in batches:
                outputs = _read_back(forward(*collate([rows[i] for i in chosen], pad_token_id or 0, device)))
                if pending is not None:  # the last batch's results, copied while this one was queued
                    keep(*pending)
                pending = (chosen, outputs)
            if pending is not None:
                keep(*pending)
    finally:
        if own:
            bar.close()
    return results


def _read_back(outputs: Any) -> Callable[[], Sequence]:
    """A batch's results, to take once the next batch is queued: a forward's own sequence as it is, a tensor as its
    rows in NumPy. A GPU tensor's copy into pinned memory is queued now, without waiting, and waited for when they
    are taken: the next batch's work, queued after the copy, runs meanwhile."""
    if not isinstance(outputs, Tensor):
        return lambda: outputs
    if not outputs.is_cuda:
        return outputs.numpy
    host = torch.empty(outputs.shape, dtype=outputs.dtype, pin_memory=True)
    host.copy_(outputs, non_blocking=True)
    copied = torch.cuda.Event()
    copied.record()

    def rows() -> Sequence:
        copied.synchronize()
        return host.numpy()
    return rows


def _finite(result: Any) -> bool:
    """Whether every float array in a result (an array, or a tuple of them: one row's, or a batch's) is finite."""
    parts = result if isinstance(result, tuple) else (result,)
    return all(not (isinstance(part, np.ndarray) and np.issubdtype(part.dtype, np.floating))
               or bool(np.isfinite(part).all()) for part in parts)


class ChunkedRun:
    """One encode or predict call over chunks of texts: its progress bar over all of them, the texts' checks and
    tokenization with their indices among all texts, and what it found (empty and cut texts) said once, at the end.

        run = ChunkedRun(total, progress, "encode")
        for chunk in chunks:
            rows = run.tokenize(tokenizer, run.check(chunk), max_length=..., truncation=..., limit_name=...)
            yield run.results(model, rows, forward, batch_size, pad_token_id)
        run.finish()
    """

    def __init__(self, total: int | None, progress: bool | None, desc: str,
                 batch_tokens: int | str | None = None) -> None:
        self.findings = InputFindings()
        self.batch_tokens = batch_tokens  # how far a batch of short texts grows past batch_size (run_sorted)
        self.bar = tqdm(total=total, unit="text", desc=desc, disable=not show_progress(progress, total or 0))

    def check(self, texts: Any, name: str = "texts") -> list[str]:
        """A chunk's texts, checked (`check_texts`); the empty ones counted."""
        texts = check_texts(texts, name, content=False)
        check_text_content(texts, name, findings=self.findings, offset=self.findings.total)
        return texts

    def tokenize(self, tokenizer: Any, texts: list[str], pairs: list[str | None] | None = None,
                 **options: Any) -> list[EncodedText]:
        """`tokenize` with the chunk's place in the run: cut texts counted, a refused one named by its index."""
        return tokenize(tokenizer, texts, pairs, findings=self.findings, offset=self.findings.total, **options)

    def results(self, model: nn.Module, rows: Sequence[EncodedText], forward: Callable, batch_size: int,
                pad_token_id: int | None, texts: int | None = None) -> list:
        """`run_sorted` over the chunk's rows, on the run's progress bar; the next chunk's indices follow on.
        `texts`: how many texts the rows stand for, where a long text's windows are rows of their own."""
        results = run_sorted(model, rows, forward, batch_size=batch_size, pad_token_id=pad_token_id, bar=self.bar,
                             offset=self.findings.total, batch_tokens=self.batch_tokens)
        self.findings.total += len(rows) if texts is None else texts
        return results

    def finish(self) -> None:
        self.bar.close()
        self.findings.warn()
