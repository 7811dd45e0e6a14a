"""A token store: a corpus tokenized once into flat arrays on disk, and how a run reads it (memory-mapped).

A store is a directory:

    store.json           what it holds (counts, dtype, [UNK] count), what it was made from, and its key
    store.ids            every sentence's token ids, one after another (uint16 when the vocabulary fits, else uint32)
    store.sentences      int64, sentences + 1: where each sentence starts in store.ids (the last: the end)
    store.documents      int64, documents + 1: where each document starts, in sentences
    store.word_starts    (whole-word masking only) one bit per token: does a jieba word start there
    store.plans/         the instance plans of runs on it (plans.py), one per packing setting

Training reads it through np.memmap, so a corpus of any size costs the pages a batch touches, not the corpus.
Without whole-word masking no word bits are kept: a word starts wherever a token is not a "##" piece, which the
vocabulary says. Empty sentences and documents are dropped when the store is made.

This module is the format and its reader. store_writer.py makes a store (store.json written last, so a store
without it is incomplete); store_cache.py keeps the stores made for runs from text.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.data.sources import home
from bertkit.errors import DataError, InputError
from bertkit.tokenizer.bpe import BPETokenizer
from bertkit.tokenizer.bpe_files import tokenizer_json
from bertkit.utils import jsonfiles

FORMAT, VERSION = "bertkit-token-store", 1
META = "store.json"
FILES = {"ids": "store.ids", "sentences": "store.sentences", "documents": "store.documents",
         "word_starts": "store.word_starts"}
PLANS = "store.plans"


def is_store(spec: str) -> bool:
    """Whether a --corpus value is a prepared token store: a directory holding store.json, or the arrays of a store
    whose store.json is gone (its preparation did not finish: TokenStore.open says so)."""
    return (Path(spec) / META).is_file() or (Path(spec) / FILES["ids"]).is_file()


class StoreError(DataError):
    """A store that cannot be used: incomplete, truncated, damaged, made with another vocabulary, or an input changed
    after it was made. The message names the file."""


def tokenizer_identity(tokenizer) -> dict:
    """What decides a tokenizer's ids: its vocabulary (hashed, in id order) and its settings (WordPiece's
    normalisation; byte-level BPE's merges, added tokens and steps, all of its tokenizer.json, hashed)."""
    vocab = tokenizer.get_vocab()
    digest = hashlib.sha256("\n".join(sorted(vocab, key=vocab.__getitem__)).encode("utf-8")).hexdigest()
    if isinstance(tokenizer, BPETokenizer):
        pipeline = json.dumps(tokenizer_json(tokenizer), sort_keys=True, ensure_ascii=False).encode("utf-8")
        return {"vocab_sha256": digest, "tokens": len(tokenizer), "special_tokens": tokenizer.all_special_tokens,
                "tokenizer_json_sha256": hashlib.sha256(pipeline).hexdigest()}
    return {"vocab_sha256": digest, "tokens": len(tokenizer), "lowercase": tokenizer.do_lower_case,
            "strip_accents": tokenizer.strip_accents, "tokenize_chinese_chars": tokenizer.tokenize_chinese_chars,
            "clean_text": tokenizer.clean_text, "special_tokens": tokenizer.all_special_tokens,
            "max_input_chars_per_word": tokenizer.max_input_chars_per_word}


# What store.json holds: each field's JSON type. A field that is missing or of another type is named.
INT, TEXT = ("a whole number", int), ("text", str)
META_FIELDS = {"format": TEXT, "version": INT, "tokens": INT, "sentences": INT, "documents": INT,
               "unknown_tokens": INT, "dtype": TEXT, "whole_word": ("true or false", bool), "encoding": TEXT,
               "key": ("text or null", (str, type(None))), "tokenizer": ("an object", dict),
               "inputs": ("a list", list), "corpus": ("a list", list), "input_bytes": INT,
               "seconds": ("a number", (int, float)), "content_sha256": TEXT}
# Fields a run does not need (or that older stores lack): checked when they are there.
OPTIONAL = {"encoding", "key", "corpus", "input_bytes", "seconds", "content_sha256", "tokenizer", "inputs"}
DTYPES = ("uint16", "uint32")


def check_meta(meta, meta_path: Path) -> None:
    """A StoreError naming the first field of store.json that is missing, mistyped or out of range."""
    path = meta_path.parent
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise StoreError(f"{meta_path} does not describe a bertkit token store")
    if meta.get("version") != VERSION:
        raise StoreError(f"{meta_path}: store version {meta.get('version')!r}, this bertkit reads version {VERSION}; "
                         f"{remedy(path)}")
    for name, (what, kind) in META_FIELDS.items():
        value = meta.get(name, ...)
        if value is ... and name in OPTIONAL:
            continue
        wrong = value is ... or not isinstance(value, kind) or (kind is int and isinstance(value, bool))
        if not wrong and kind is int and value < 0:
            what, wrong = "a whole number, at least 0", True
        if wrong:
            found = "is missing" if value is ... else f"is {json.dumps(value)[:40]}"
            raise StoreError(f"{meta_path}: the field {name!r} {found}, where the store needs {what}: the store is "
                             f"damaged; {remedy(path)}")
    if meta["dtype"] not in DTYPES:
        raise StoreError(f"{meta_path}: the field 'dtype' is {meta['dtype']!r}, where the store needs one of "
                         f"{', '.join(DTYPES)}: the store is damaged; {remedy(path)}")
    if not meta["documents"] <= meta["sentences"] <= meta["tokens"] or meta["unknown_tokens"] > meta["tokens"]:
        raise StoreError(f"{meta_path}: its counts cannot all be right ({meta['tokens']} tokens, {meta['sentences']} "
                         f"sentences, {meta['documents']} documents, {meta['unknown_tokens']} unknown tokens): the "
                         f"store is damaged; {remedy(path)}")
    for item in meta.get("inputs", []):
        files = isinstance(item, dict) and "path" in item
        if not isinstance(item, dict) or files and not (isinstance(item["path"], str) and all(
                isinstance(item.get(k), int) and not isinstance(item.get(k), bool) for k in ("size", "mtime_ns"))):
            raise StoreError(f"{meta_path}: an entry of 'inputs' is {json.dumps(item)[:60]}, where the store needs "
                             f"a file's path, size and mtime_ns or a corpus name: the store is damaged; "
                             f"{remedy(path)}")


def stores_home() -> Path:
    """Where stores made for runs live: `$BERTKIT_STORES`, else $BERTKIT_HOME/stores (read at each call)."""
    env = os.environ.get("BERTKIT_STORES")
    directory = Path(env).expanduser() if env else home() / "stores"
    if directory.exists() and not directory.is_dir():
        raise InputError(f"{'BERTKIT_STORES' if env else 'the stores directory'} {directory} is a file; it names "
                         "the directory where stores made for runs are kept")
    return directory


def remedy(path: Path) -> str:
    """What to do about a store that cannot be used: one made for a run (in `stores_home`) is deleted, and the next
    run makes it again from its text; one the user prepared is prepared again."""
    try:
        cached = Path(path).resolve().parent == stores_home().resolve()
    except (OSError, InputError):
        cached = False
    if cached:
        return f"delete {path} (a store bertkit made for a run): the next run makes it again from its text"
    return "prepare it again (bertkit prepare)"


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
        """Open the store in `path`; a StoreError names what is wrong (not a store, a field of store.json missing or
        mistyped, an array truncated or damaged) and what to do (`remedy`)."""
        path = Path(path)
        meta_path = path / META
        try:
            meta = jsonfiles.loads(meta_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise StoreError(f"{path} holds no {META}: it is not a token store, or its preparation did not finish; "
                             f"{remedy(path)}") from None
        except (OSError, ValueError, RecursionError) as err:
            raise StoreError(f"{meta_path} cannot be read as a store's description ({type(err).__name__}: {err}); "
                             f"{remedy(path)}") from None
        check_meta(meta, meta_path)
        counts = {"ids": (meta["tokens"], meta["dtype"]), "sentences": (meta["sentences"] + 1, "int64"),
                  "documents": (meta["documents"] + 1, "int64")}
        if meta["whole_word"]:
            counts["word_starts"] = ((meta["tokens"] + 7) // 8, "uint8")
        arrays = {name: mapped_array(path / FILES[name], n, dtype) for name, (n, dtype) in counts.items()}
        documents, sentences = arrays["documents"], arrays["sentences"]
        ordered = _increasing(FileReader(path / FILES["documents"], "int64"), len(documents))
        if not ordered or documents[0] != 0 or documents[-1] != meta["sentences"]:
            raise StoreError(f"{path / FILES['documents']} does not hold the document offsets {META} describes: the "
                             f"store is damaged; {remedy(path)}")
        if sentences[0] != 0 or sentences[-1] != meta["tokens"]:
            raise StoreError(f"{path / FILES['sentences']} does not hold the sentence offsets {META} describes: the "
                             f"store is damaged; {remedy(path)}")
        return cls(path, meta, arrays["ids"], sentences, documents, arrays.get("word_starts"))

    def check_offsets(self) -> None:
        """A StoreError unless every sentence starts after the one before (no sentence is empty): `open` checks only
        the ends, this reads the whole file, as planning does (plans.py calls it there)."""
        path = self.path / FILES["sentences"]
        if not _increasing(FileReader(path, "int64"), len(self.sentence_offsets)):
            raise StoreError(f"{path} does not hold the sentence offsets {META} describes: the store is damaged; "
                             f"{remedy(self.path)}")

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
                                 f"differ): the store no longer holds that text; {remedy(self.path)}, or put the file "
                                 "back as it was")


def _increasing(reader: FileReader, count: int, block: int = 1 << 16) -> bool:
    """Whether the `count` numbers of a file increase strictly: read (not mapped) in blocks overlapping by one."""
    return all(np.all(np.diff(reader.read(first, min(block + 1, count - first))) > 0)
               for first in range(0, max(count - 1, 0), block))


def mapped_array(path: Path, count: int, dtype: str, fix: str | None = None) -> np.ndarray:
    """The `count` records of `dtype` in `path`, memory-mapped read-only; a StoreError when the file is missing or
    its size is not exactly that (a store's arrays, a plan's rows); `fix` says what to do (a store's: `remedy`)."""
    fix = fix or remedy(path.parent)
    expected = count * np.dtype(dtype).itemsize
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise StoreError(f"{path} is missing: the store is incomplete; {fix}") from None
    if not path.is_file():  # a directory (or a pipe) of the array's name: no bytes of the store at all
        raise StoreError(f"{path} is a {'directory' if path.is_dir() else 'special file'}, not the store's array "
                         f"file: the store is damaged; {fix}")
    if size != expected:
        raise StoreError(f"{path} has {size:,} bytes, the store says {expected:,}: it is truncated or damaged; {fix}")
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,)) if count else np.zeros(0, dtype=dtype)
