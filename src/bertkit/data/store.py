"""A token store: a corpus tokenized once, in parallel, into flat arrays on disk that training memory-maps.

A store is a directory:

    store.json           what it holds (counts, dtype, [UNK] count), what it was made from, and its key
    store.ids            every sentence's token ids, one after another (uint16 when the vocabulary fits, else uint32)
    store.sentences      int64, sentences + 1: where each sentence starts in store.ids (the last: the end)
    store.documents      int64, documents + 1: where each document starts, in sentences
    store.word_starts    (whole-word masking only) one bit per token: does a jieba word start there
    store.plans/         the instance plans of runs on it (data/packing.py), one per packing setting

Training reads it through np.memmap, so a corpus of any size costs the pages a batch touches, not the corpus.
Without whole-word masking no word bits are kept: a word starts wherever a token is not a "##" piece, which the
vocabulary says. Empty sentences and documents are dropped when the store is made.

A store is made by worker processes on every core (`prepare_store`): the main process reads the inputs in blocks of
whole lines (data/corpus_stream.py), workers decode, split and tokenize them, and the main process appends their
arrays in order. store.json is written last, so a store without it is incomplete. A store made for a run from text
(`cached_store`) lives in $BERTKIT_HOME/stores/KEY, KEY a hash of the inputs (a file's path, size and modification
time; a named corpus's package hashes), the tokenizer (its vocabulary and settings), whole-word masking and the
encoding: a second run, or a resumed one, finds it and tokenizes nothing ($BERTKIT_STORES moves them elsewhere).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.data import corpus_stream
from bertkit.data.corpus_stream import CorpusInput, Tokenized, corpus_inputs
from bertkit.data.lines import check_decoded
from bertkit.data.readers import Skips
from bertkit.data.sources import home
from bertkit.errors import DataError, InputError
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_write_text, fsync_directory
from bertkit.utils.locking import locked
from bertkit.utils.processes import process_pool

FORMAT, VERSION = "bertkit-token-store", 1
TEXT_VERSION = 1          # how text becomes sentences (data/corpus.py, corpus_stream.py): a change makes new keys
META = "store.json"
FILES = {"ids": "store.ids", "sentences": "store.sentences", "documents": "store.documents",
         "word_starts": "store.word_starts"}
PLANS = "store.plans"
INLINE_BYTES = 8 << 20    # inputs smaller than this are tokenized in this process: starting workers costs more


class StoreError(DataError):
    """A store that cannot be used: incomplete, truncated, damaged, made with another vocabulary, or an input changed
    after it was made. The message names the file."""


def tokenizer_identity(tokenizer) -> dict:
    """What decides a tokenizer's ids: its vocabulary (hashed, in id order) and its settings."""
    vocab = tokenizer.get_vocab()
    digest = hashlib.sha256("\n".join(sorted(vocab, key=vocab.__getitem__)).encode("utf-8")).hexdigest()
    return {"vocab_sha256": digest, "tokens": len(tokenizer), "lowercase": tokenizer.do_lower_case,
            "strip_accents": tokenizer.strip_accents, "tokenize_chinese_chars": tokenizer.tokenize_chinese_chars,
            "clean_text": tokenizer.clean_text, "special_tokens": tokenizer.all_special_tokens,
            "max_input_chars_per_word": tokenizer.max_input_chars_per_word}


def store_key(inputs: list[CorpusInput], tokenizer, whole_word: bool, encoding: str) -> str:
    """The cache key of a store: its inputs' identities, the tokenizer's, whole-word masking and the encoding."""
    described = {"format": VERSION, "text": TEXT_VERSION, "inputs": [item.identity() for item in inputs],
                 "tokenizer": tokenizer_identity(tokenizer), "whole_word": whole_word, "encoding": encoding}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode("utf-8")).hexdigest()[:24]


# ---- reading a store -----------------------------------------------------------------------------

class FileReader:
    """Reads runs of items from a file with pread. A batch reads a few hundred bytes at random places: through a
    memory map each read would fault in (and keep in the process's resident memory) the pages around it, about 64
    KiB each; a read keeps nothing, and the operating system's cache serves it all the same."""

    def __init__(self, path: Path, dtype: str | np.dtype) -> None:
        self.path, self.dtype = path, np.dtype(dtype)
        self._fd: int | None = None

    def read(self, start: int, count: int) -> np.ndarray:
        """Items start..start+count (a read-only array of their own)."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        size = self.dtype.itemsize
        if hasattr(os, "pread"):
            data = os.pread(self._fd, count * size, start * size)
        else:  # Windows: no pread; seek and read (the reader is not shared between threads)
            os.lseek(self._fd, start * size, os.SEEK_SET)
            data = os.read(self._fd, count * size)
        return np.frombuffer(data, self.dtype)

    def __getstate__(self) -> dict:  # a spawned process opens its own file
        return {**self.__dict__, "_fd": None}

    def __del__(self, close=os.close) -> None:  # `close` bound now: at exit the module's names may be gone
        if self._fd is not None:
            close(self._fd)


@dataclass
class TokenStore:
    """A store opened for reading: its arrays memory-mapped, checked against store.json (`open`)."""

    path: Path
    meta: dict
    ids: np.ndarray
    sentence_offsets: np.ndarray      # memory-mapped
    document_offsets: np.ndarray      # memory-mapped
    word_bits: np.ndarray | None      # memory-mapped, packed
    readers: dict[str, FileReader] = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, path: str | os.PathLike) -> TokenStore:
        """Open the store in `path`; a StoreError names what is wrong (not a store, truncated, damaged)."""
        path = Path(path)
        meta_path = path / META
        try:
            meta = jsonfiles.loads(meta_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise StoreError(f"{path} holds no {META}: it is not a token store, or its preparation did not finish "
                             "(prepare it again: bertkit prepare)") from None
        except (OSError, ValueError) as err:
            raise StoreError(f"{meta_path} cannot be read as a store's description ({err}); prepare it again") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise StoreError(f"{meta_path} does not describe a bertkit token store")
        if meta.get("version") != VERSION:
            raise StoreError(f"{meta_path}: store version {meta.get('version')}, this bertkit reads version "
                             f"{VERSION}; prepare it again")
        try:
            counts = {"ids": (meta["tokens"], meta["dtype"]), "sentences": (meta["sentences"] + 1, "int64"),
                      "documents": (meta["documents"] + 1, "int64")}
            if meta["whole_word"]:
                counts["word_starts"] = ((meta["tokens"] + 7) // 8, "uint8")
        except (KeyError, TypeError):
            raise StoreError(f"{meta_path} lacks the store's counts: it is damaged; prepare it again") from None
        arrays = {name: mapped_array(path / FILES[name], n, dtype) for name, (n, dtype) in counts.items()}
        documents, sentences = arrays["documents"], arrays["sentences"]
        ordered = _increasing(FileReader(path / FILES["documents"], "int64"), len(documents))
        if not ordered or documents[0] != 0 or documents[-1] != meta["sentences"]:
            raise StoreError(f"{path / FILES['documents']} does not hold the document offsets {META} describes: the "
                             "store is damaged; prepare it again")
        if sentences[0] != 0 or sentences[-1] != meta["tokens"]:
            raise StoreError(f"{path / FILES['sentences']} does not hold the sentence offsets {META} describes: the "
                             "store is damaged; prepare it again")
        return cls(path, meta, arrays["ids"], sentences, documents, arrays.get("word_starts"))

    def check_offsets(self) -> None:
        """A StoreError unless every sentence starts after the one before (no sentence is empty): `open` checks only
        the ends, this reads the whole file, as planning does (data/packing.py calls it there)."""
        path = self.path / FILES["sentences"]
        if not _increasing(FileReader(path, "int64"), len(self.sentence_offsets)):
            raise StoreError(f"{path} does not hold the sentence offsets {META} describes: the store is damaged; "
                             "prepare it again")

    @property
    def num_documents(self) -> int:
        return len(self.document_offsets) - 1

    @property
    def num_tokens(self) -> int:
        return int(self.meta["tokens"])

    def _reader(self, name: str, dtype: str) -> FileReader:
        if name not in self.readers:
            self.readers[name] = FileReader(self.path / FILES[name], dtype)
        return self.readers[name]

    def read_ids(self, start: int, stop: int) -> np.ndarray:
        """Token ids start..stop, read (not mapped: see FileReader), for a batch."""
        return self._reader("ids", self.meta["dtype"]).read(start, stop - start)

    def word_starts(self, start: int, stop: int) -> np.ndarray:
        """Whether a word starts at each of tokens start..stop (whole-word masking stores only)."""
        first, last = start // 8, (stop + 7) // 8
        bits = np.unpackbits(self._reader("word_starts", "uint8").read(first, last - first))
        return bits[start - 8 * first:stop - 8 * first].astype(bool)

    def check_tokenizer(self, tokenizer, vocab: str) -> None:
        """A StoreError unless the store was made with this tokenizer: ids from another vocabulary mean nothing."""
        if self.meta.get("tokenizer") != tokenizer_identity(tokenizer):
            raise StoreError(f"{self.path} was prepared with another tokenizer than {vocab} (its vocabulary or "
                             f"settings differ); prepare the corpus again with --vocab {vocab}")

    def check_inputs(self) -> None:
        """A StoreError naming an input file that is still there but changed after the store was made (a file that
        is gone is fine: a store stands without its text)."""
        for item in self.meta.get("inputs", []):
            if "path" not in item or not os.path.exists(item["path"]):
                continue
            stat = os.stat(item["path"])
            if (stat.st_size, stat.st_mtime_ns) != (item["size"], item["mtime_ns"]):
                raise StoreError(f"{item['path']} changed after it was prepared into {self.path} (its size or time "
                                 "differ): the store no longer holds that text; prepare it again, or put the file "
                                 "back as it was")


def _increasing(reader: FileReader, count: int, block: int = 1 << 16) -> bool:
    """Whether the `count` numbers of a file increase strictly: read (not mapped) in blocks overlapping by one."""
    return all(np.all(np.diff(reader.read(first, min(block + 1, count - first))) > 0)
               for first in range(0, max(count - 1, 0), block))


def mapped_array(path: Path, count: int, dtype: str) -> np.ndarray:
    """The `count` records of `dtype` in `path`, memory-mapped read-only; a StoreError when the file is missing or
    its size is not exactly that (a store's arrays, a plan's rows)."""
    expected = count * np.dtype(dtype).itemsize
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise StoreError(f"{path} is missing: the store is incomplete; prepare it again") from None
    if size != expected:
        raise StoreError(f"{path} has {size:,} bytes, the store says {expected:,}: it is truncated or damaged; "
                         "prepare it again")
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,)) if count else np.zeros(0, dtype=dtype)


# ---- writing a store -----------------------------------------------------------------------------

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

    def add(self, part: Tokenized) -> None:
        self.files["ids"].write(part.ids.astype(self.dtype, copy=False).tobytes())
        ends = self.tokens + np.cumsum(part.sentence_lengths, dtype=np.int64)
        self.files["sentences"].write(ends.tobytes())
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
            self.documents += 1
        self.open_sentences = 0

    def counts(self) -> dict:
        """What store.json says of the arrays written."""
        return {"format": FORMAT, "version": VERSION, "tokens": self.tokens, "sentences": self.sentences,
                "documents": self.documents, "unknown_tokens": self.unknown, "dtype": self.dtype.name,
                "whole_word": self.whole_word}

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
                  key: str | None = None) -> TokenStore:
    """Tokenize the corpus `specs` (files, directories, corpus names) into a store in `out` and open it.

    `workers` processes tokenize (default: one per core; none for inputs under INLINE_BYTES). Undecodable lines are
    skipped and counted in a DataWarning per file; a file that is not text is a NotTextError naming it.
    """
    from tqdm.auto import tqdm

    inputs = corpus_inputs(specs)
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


# ---- the cache of stores made for runs -----------------------------------------------------------

def stores_home() -> Path:
    """Where stores made for runs live: `$BERTKIT_STORES`, else $BERTKIT_HOME/stores (read at each call)."""
    env = os.environ.get("BERTKIT_STORES")
    return Path(env).expanduser() if env else home() / "stores"


def cached_store(specs: list[str], tokenizer, *, whole_word: bool = False, encoding: str = "utf-8",
                 progress: bool = True) -> TokenStore:
    """The store of `specs` in $BERTKIT_HOME/stores, made on first use (concurrent callers wait for one maker)."""
    key = store_key(corpus_inputs(specs), tokenizer, whole_word, encoding)
    directory = stores_home() / key
    with locked(directory.parent, key):
        if (directory / META).exists():
            return TokenStore.open(directory)
        return prepare_store(specs, tokenizer, directory, whole_word=whole_word, encoding=encoding,
                             progress=progress, key=key)

