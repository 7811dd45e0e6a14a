"""Making a token store (store.py holds its format): a corpus tokenized once, in parallel, into a store's files.

Worker processes on every core tokenize (`prepare_store`): the main process reads the inputs in blocks of whole
lines (corpus_stream.py), workers decode, split and tokenize them, and the main process appends their arrays in
order (`StoreWriter`). The files are written in a staging directory and moved into place; store.json is written
last, so a store without it is incomplete.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bertkit.data.lines import check_decoded
from bertkit.data.pretraining import corpus_stream
from bertkit.data.pretraining.corpus_stream import CorpusInput, Tokenized, corpus_inputs
from bertkit.data.pretraining.store import FILES, FORMAT, META, VERSION, TokenStore, tokenizer_identity
from bertkit.data.readers import Skips
from bertkit.errors import InputError
from bertkit.utils.atomic import atomic_write_text, fsync_directory
from bertkit.utils.processes import process_pool

INLINE_BYTES = 8 << 20    # inputs smaller than this are tokenized in this process: starting workers costs more


class StoreWriter:
    """Appends tokenized chunks, in order, to a store's files in `directory`."""

    def __init__(self, directory: Path, dtype: str, whole_word: bool) -> None:
        self.directory, self.dtype, self.whole_word = directory, np.dtype(dtype), whole_word
        names = [n for n in FILES if whole_word or n != "word_starts"]
        self.files = {name: open(directory / FILES[name], "wb") for name in names}
        self.files["sentences"].write(np.zeros(1, np.int64).tobytes())
        self.files["documents"].write(np.zeros(1, np.int64).tobytes())
        self.tokens = self.sentences = self.documents = self.unknown = self.open_sentences = 0
        self.bits = np.zeros(0, dtype=bool)  # word-start bits not yet a whole byte
        self.digest = hashlib.sha256()       # of the ids and the sentence and document ends: the content's identity

    def add(self, part: Tokenized) -> None:
        ids = part.ids.astype(self.dtype, copy=False).tobytes()
        self.files["ids"].write(ids)
        ends = self.tokens + np.cumsum(part.sentence_lengths, dtype=np.int64)
        self.files["sentences"].write(ends.tobytes())
        self.digest.update(ids)
        self.digest.update(ends.tobytes())
        position = self.sentences
        for run in part.documents:  # counts join the open document; None ends it
            if run is None:
                self.end_document(position)
            else:
                position += run
                self.open_sentences += run
        self.sentences += len(part.sentence_lengths)
        self.tokens += len(part.ids)
        self.unknown += part.unknown
        if self.whole_word:
            bits = np.concatenate([self.bits, part.word_starts])
            whole = len(bits) // 8 * 8
            self.files["word_starts"].write(np.packbits(bits[:whole]).tobytes())
            self.bits = bits[whole:]

    def end_document(self, position: int | None = None) -> None:
        """End the open document (at the end of an input, or a blank line); one without sentences is dropped."""
        if self.open_sentences:
            end = self.sentences if position is None else position
            self.files["documents"].write(np.array([end], np.int64).tobytes())
            self.digest.update(b"D" + np.array([end], np.int64).tobytes())
            self.documents += 1
        self.open_sentences = 0

    def counts(self) -> dict:
        """What store.json says of the arrays written."""
        return {"format": FORMAT, "version": VERSION, "tokens": self.tokens, "sentences": self.sentences,
                "documents": self.documents, "unknown_tokens": self.unknown, "dtype": self.dtype.name,
                "whole_word": self.whole_word, "content_sha256": self.digest.hexdigest()}

    def close(self) -> None:
        if self.whole_word and len(self.bits):
            self.files["word_starts"].write(np.packbits(self.bits).tobytes())
        for handle in self.files.values():
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()


def default_workers() -> int:
    """Worker processes for tokenizing: one per core this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def prepare_store(specs: list[str], tokenizer, out: str | os.PathLike, *, whole_word: bool = False,
                  encoding: str = "utf-8", workers: int | None = None, progress: bool = True,
                  key: str | None = None, inputs: list[CorpusInput] | None = None) -> TokenStore:
    """Tokenize the corpus `specs` (files, directories, corpus names) into a store in `out` and open it.

    `inputs`: `corpus_inputs(specs)` where the caller listed them already (a directory is walked, and its hidden
    files said, once).

    `workers` processes tokenize (default: one per core; none for inputs under INLINE_BYTES). Undecodable lines are
    skipped and counted in a DataWarning per file; a file that is not text is a NotTextError naming it.
    """
    from tqdm.auto import tqdm

    inputs = corpus_inputs(specs) if inputs is None else inputs
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    staging = out / f".store.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    file_bytes = sum(os.path.getsize(i.name) for i in inputs if i.kind != "corpus")
    if workers is None:
        workers = default_workers() if file_bytes >= INLINE_BYTES else 0
    dtype = "uint16" if len(tokenizer) <= 1 << 16 else "uint32"
    identities = [item.identity() for item in inputs]
    started = time.perf_counter()
    try:
        writer = StoreWriter(staging, dtype, whole_word)
        bar = tqdm(total=file_bytes or None, unit="B", unit_scale=True, desc="prepare", disable=not progress,
                   dynamic_ncols=True)
        with bar, _tokenizing(tokenizer, whole_word, dtype, workers) as tokenize:
            stream = ((index, chunk) for index, item in enumerate(inputs)
                      for chunk in corpus_stream.chunks(item, encoding))
            current, seen = -1, _FileCounts("")
            for index, part in tokenize(stream):
                if index != current:
                    _end_input(writer, seen, encoding)
                    current, seen = index, _FileCounts(inputs[index].name, writer.documents)
                writer.add(part)
                seen.add(part)
                bar.update(part.size)
            _end_input(writer, seen, encoding)
        writer.close()
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if writer.tokens == 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise InputError(f"the corpus {' '.join(specs)} holds no text")
    meta = {**writer.counts(), "key": key, "encoding": encoding, "tokenizer": tokenizer_identity(tokenizer),
            "inputs": identities, "corpus": list(specs), "input_bytes": file_bytes,
            "seconds": round(time.perf_counter() - started, 3)}
    # a store replaced: its store.json goes first, so that no store.json but the new one ever describes the new arrays
    (out / META).unlink(missing_ok=True)
    for name in writer.files:
        os.replace(staging / FILES[name], out / FILES[name])
    shutil.rmtree(staging, ignore_errors=True)
    fsync_directory(out)
    atomic_write_text(out / META, json.dumps(meta, indent=2, ensure_ascii=False) + "\n")  # last: the store is whole
    return TokenStore.open(out)


class _FileCounts:
    """An input's lines, skipped lines and documents, for its warning and the not-text rule."""

    def __init__(self, name: str, documents_before: int = 0) -> None:
        self.name, self.documents_before, self.lines = name, documents_before, 0
        self.skips = Skips(name)

    def add(self, part: Tokenized) -> None:
        self.lines += part.lines
        for reason, numbers in part.skipped.items():
            for number in numbers:
                self.skips.add(reason, number)


def _end_input(writer: StoreWriter, seen: _FileCounts, encoding: str) -> None:
    """An input ends a document; most of its lines undecodable make it not text (data/lines.py's rule, as for every
    file read by lines)."""
    writer.end_document()
    if not seen.name:
        return
    check_decoded(seen.name, encoding, seen.skips.lines.get("undecodable bytes", []), seen.lines)
    seen.skips.warn(writer.documents - seen.documents_before)


@contextlib.contextmanager
def _tokenizing(tokenizer, whole_word: bool, dtype: str, workers: int) -> Iterator:
    """A function from (index, chunk) pairs to (index, Tokenized) pairs in the same order: in `workers` processes,
    a few chunks ahead of the writer (never the whole input in memory), or in this one."""
    settings = (tokenizer, whole_word, dtype)
    if workers <= 0:
        corpus_stream.start_worker(*settings, single_thread=False)
        yield lambda stream: ((index, corpus_stream.tokenize_chunk(chunk)) for index, chunk in stream)
        return
    with _worker_pool(workers, settings) as pool:
        def ordered(stream):
            waiting: deque = deque()
            for index, chunk in stream:
                waiting.append((index, pool.apply_async(corpus_stream.tokenize_chunk, (chunk,))))
                if len(waiting) >= 2 * workers:
                    index, result = waiting.popleft()
                    yield index, result.get()
            while waiting:
                index, result = waiting.popleft()
                yield index, result.get()

        yield ordered


def _worker_pool(workers: int, settings: tuple):
    """Processes that tokenize (utils.processes.process_pool: forked where that is safe; they run only the tokenizer
    and numpy). The tokenizer's own threads are off in them (TOKENIZERS_PARALLELISM, set before the fork so that it
    does not warn about them either)."""
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        return process_pool(workers, corpus_stream.start_worker, settings)
    finally:
        if before is None:
            del os.environ["TOKENIZERS_PARALLELISM"]
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before
