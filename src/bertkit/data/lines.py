"""Text files read a block of whole lines at a time: the one reading path of every file bertkit reads by lines.

`line_blocks` reads a file (gzipped or not, a pipe or standard input as well) in blocks, never whole, and hands on
the whole lines of each block, the line cut by the block's end waiting for the next. The rules every reader shares
live here, so that a file is text, or not, the same way for every command:

- a line ends at b"\\n", b"\\r\\n" or a lone b"\\r" (old Mac files): the lines handed on end in b"\\n" alone, and a
  b"\\r\\n" split by a block's end is one line end, not two;
- a file with NUL bytes in its first 64 KiB is not text (an image, a model, UTF-16 read as UTF-8): a NotTextError
  naming it, at once;
- a token store's files (store.json, store.ids, ...) are not text either: a NotTextError saying that the store's
  directory is what `pretrain --corpus` takes;
- a UTF-8 byte-order mark is no text;
- UTF-16 and UTF-32, whose line break is not the byte b"\\n", are decoded here and handed on as UTF-8
  (`LineBlock.encoding` says which encoding the lines are in);
- a line longer than the block size (at least MAX_LINE_BYTES) is handed on in parts, each cut after a space or
  between two characters, so that no line is held whole: memory stays bounded whatever a line's length. A line
  that means nothing in parts (a JSON record, a data file's row: `records=True`) is cut only past MAX_RECORD_BYTES.
  One DataWarning per file counts the lines cut;
- a file where most lines do not decode is not text in that encoding (`check_decoded`): skipping every line would
  only hide the reason. The readers count the few undecodable lines of a text file and go on.

Nothing seeks or asks a file's position: a pipe or standard input reads as a file does.
"""

from __future__ import annotations

import codecs
import gzip
import re
import stat
import warnings
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import DataError, InputError

NUL_WINDOW = 1 << 16        # the bytes looked at for NULs
MAX_LINE_BYTES = 1 << 20    # a line longer than this, or than the block if that is larger, is handed on in parts
MAX_RECORD_BYTES = 1 << 26  # the same for lines read whole (a JSON record, a row of a data file)
UTF8_BOM = b"\xef\xbb\xbf"
_LONE_CR = re.compile(rb"\r(?!\n)")  # a line end of its own (an old Mac file), not the start of b"\r\n"
# A token store's files (data/store.py's META and FILES), and how its store.json begins
STORE_FILES = ("store.json", "store.ids", "store.sentences", "store.documents", "store.word_starts")
STORE_FORMAT = b'"bertkit-token-store"'
RECORD_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz")  # JSON lines: a record cannot be cut


class NotTextError(DataError):
    """A file that is not text in the encoding it is read with: binary data, or most lines undecodable."""


class DataWarning(UserWarning):
    """Lines or rows of a data file were skipped (or cut); the message counts them and names the first few."""


@dataclass
class LineBlock:
    """Whole lines of a file, each ended by b"\\n"; or, where `continued`, one part of a line too long to hold whole,
    ended by b"\\n" as well, whose line goes on in the next block (which has the same `first_line`)."""

    first_line: int   # the file's number (from 1) of the first of them
    lines: bytes
    size: int         # bytes of the file read for them (compressed bytes for a .gz): for progress bars
    encoding: str     # the encoding of `lines`: the file's, or UTF-8 where the file's is UTF-16 or UTF-32
    continued: bool = False


def input_path(spec: str | Path) -> Path:
    """A data argument as a path: "-" is standard input (/dev/stdin), read as a stream like any file."""
    return Path("/dev/stdin") if str(spec) == "-" else Path(spec)


def readable(path: str | Path) -> bool:
    """Whether `path` is something to read lines from: a file, or a stream (a named pipe, /dev/stdin, a terminal),
    which every reader of lines reads as a file, a block at a time."""
    try:
        mode = Path(path).stat().st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def is_empty_file(path: str | Path) -> bool:
    """A regular file of no bytes (a stream's size says nothing: it is read to know)."""
    found = Path(path).stat()
    return stat.S_ISREG(found.st_mode) and found.st_size == 0


def check_example_file(path: Path, purpose: str, kinds: str, named: Sequence[str]) -> None:
    """Refuse a user's file of examples that cannot be read: a directory, a missing file or an empty one, naming
    what to give instead: a file of `kinds` ("TSV, CSV or JSONL"), or one of the `named` datasets. `purpose` says
    what the examples are for ("to train on")."""
    if path.is_dir():
        raise InputError(f"{path} is a directory; give a file ({kinds}) or a named dataset ({', '.join(named)})")
    if not readable(path):
        raise FileNotFoundError(f"{path}: no such file, and not a named dataset ({', '.join(named)})")
    if is_empty_file(path):
        raise InputError(f"{path} is empty: no examples {purpose}")


def is_wide(encoding: str) -> bool:
    """Whether an encoding's line break is not the byte b"\\n" (UTF-16, UTF-32): its lines are found after decoding."""
    return "\n".encode(encoding) != b"\n"


# the first bytes of compressed files and archives: a compressed file's bytes are no text in any encoding
COMPRESSED = {b"\x1f\x8b": ("gzip", "gzip -dc {} > out.txt"), b"BZh": ("bzip2", "bzip2 -dc {} > out.txt"),
              b"\xfd7zXZ\x00": ("xz", "xz -dc {} > out.txt"), b"(\xb5/\xfd": ("zstd", "zstd -dc {} > out.txt"),
              b"PK\x03\x04": ("zip", "unzip {}"), b"7z\xbc\xaf'\x1c": ("7z", "7z x {}")}


def check_not_binary(path: str | Path, head: bytes, encoding: str) -> None:
    """A NotTextError naming `path` when its first bytes `head` are a compressed file's (gzip, zip, ...) or hold a
    NUL (binary data; UTF-16 and UTF-32 text have them too)."""
    for magic, (kind, tool) in COMPRESSED.items():
        if head.startswith(magic):
            raise NotTextError(f"{path} is a {kind}-compressed file, not text: decompress it first (e.g. "
                               f"{tool.format(path)}), then give the text file")
    if b"\x00" in head[:NUL_WINDOW] and not is_wide(encoding):
        raise NotTextError(f"{path} is not a text file: it holds NUL bytes (binary data, or UTF-16 text: then give "
                           "its encoding, e.g. --encoding utf-16)")


def check_not_store(path: str | Path, head: bytes) -> None:
    """A NotTextError when `path` is a file of a token store (its first bytes `head`): a store's description (what
    its store.json begins with, whatever the file's name), or one of its arrays (named as a store names them, and
    binary or beside a store.json)."""
    path = Path(path)
    description = head[:512].lstrip().startswith(b"{") and STORE_FORMAT in head[:512]
    array = path.name in STORE_FILES[1:] and (b"\x00" in head[:NUL_WINDOW] or (path.parent / STORE_FILES[0]).is_file())
    if description or array:
        inside = path.name in STORE_FILES or (path.parent / STORE_FILES[1]).is_file()  # in the store's directory
        raise NotTextError(f"{path} is a file of a token store, not text: a store is a corpus already tokenized; give "
                           f"its directory to pretrain --corpus" + (f" ({path.parent})" if inside else ""))


def check_decoded(path: str | Path, encoding: str, failed: list[int], lines: int) -> None:
    """A NotTextError naming `path` when most of its `lines` (those numbered in `failed`) did not decode."""
    if failed and len(failed) * 2 > lines:
        hint = "GBK or GB18030 text? give --encoding gbk" if encoding.lower() in ("utf-8", "utf8") else \
            "give its encoding with --encoding"
        raise NotTextError(f"{path} is not {encoding} text: {len(failed):,} of {lines:,} lines do not decode (the "
                           f"first is line {failed[0]}); {hint}")


def line_blocks(path: str | Path, encoding: str = "utf-8", block_bytes: int = 1 << 20, compressed: bool = False,
                records: bool | None = None) -> Iterator[LineBlock]:
    """The file's lines a block (about `block_bytes`) at a time, in order; `compressed`: the file is gzipped.

    The lines are bytes, in `LineBlock.encoding`: decoding them is the caller's (a worker process's, for a corpus),
    so one bad byte costs one line. A last line without a line break gets one; an empty file gives no block.

    A line longer than the block size (at least MAX_LINE_BYTES) comes in parts, a block each (`LineBlock.continued`),
    each cut after a space or between characters; a part of white space only is left out (it holds no text, and as a
    line of its own it would read as a blank line). `records`: the lines are records that mean nothing in parts (a
    JSON line, a row of a data file), cut only past MAX_RECORD_BYTES; by default, those of a JSON lines file
    (RECORD_SUFFIXES)."""
    wide = is_wide(encoding)
    if records is None:
        records = str(path).lower().endswith(RECORD_SUFFIXES)
    max_line_bytes = MAX_RECORD_BYTES if records else max(block_bytes, MAX_LINE_BYTES)
    encoding_out = "utf-8" if wide else encoding
    cut_lines: list[int] = []
    with open(path, "rb") as file:
        raw = _Counted(file)
        stream = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
        reader = codecs.getreader(encoding)(stream) if wide else None
        carry = bytearray()   # the start of a line whose end is not read yet (never a b"\n")
        line, position, first, held = 1, 0, True, False
        while True:
            # the first read takes at least what the NUL check and the byte-order mark need
            block = _read(path, stream, reader, encoding, max(block_bytes, NUL_WINDOW) if first else block_bytes)
            if first:
                check_not_store(path, block)
                if not wide:
                    check_not_binary(path, block, encoding)
                block, first = block.removeprefix(UTF8_BOM), False
            end = not block
            if held:  # the b"\r" that ended the block before: b"\r\n" cut in two is one line end
                block, held = b"\r" + block, False
            if b"\r" in block:
                if block.endswith(b"\r") and not end:
                    block, held = block[:-1], True
                if _LONE_CR.search(block):
                    block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
                else:  # a Windows file: every b"\r" is one of b"\r\n" (deleting them is twice as fast as replacing)
                    block = block.translate(None, b"\r")
            last = block.rfind(b"\n")
            if last < 0:
                carry += block
            elif len(carry) + (ends := block.find(b"\n")) > max_line_bytes:
                # the line begun in an earlier block ends in this one, too long to hand on whole: its parts first
                carry += memoryview(block)[:ends]
                block, last = block[ends:], last - ends
            while len(carry) > max_line_bytes:
                cut = _character_boundary(carry, max_line_bytes, encoding_out)
                if not cut_lines or cut_lines[-1] != line:
                    cut_lines.append(line)
                if not carry[:cut].isspace():
                    yield LineBlock(line, bytes(carry[:cut]) + b"\n", raw.count - position, encoding_out, True)
                    position = raw.count
                del carry[:cut]
            if last >= 0:
                lines = b"".join((carry, memoryview(block)[:last + 1]))
                yield LineBlock(line, lines, raw.count - position, encoding_out)
                line += block.count(b"\n", 0, last + 1)
                carry, position = bytearray(memoryview(block)[last + 1:]), raw.count
            if end:
                break
        if carry:
            yield LineBlock(line, bytes(carry) + b"\n", raw.count - position, encoding_out)
    if cut_lines:
        _warn_cut(path, cut_lines, max_line_bytes)


class _Counted:
    """A file's bytes read so far (`count`), without asking its position: a pipe has none."""

    def __init__(self, file) -> None:
        self.file, self.count = file, 0

    def read(self, size: int = -1) -> bytes:
        data = self.file.read(size)
        self.count += len(data)
        return data


def _read(path: str | Path, stream, reader, encoding: str, block_bytes: int) -> bytes:
    """The next block of the file: its bytes, or (a wide encoding) its text as UTF-8."""
    try:
        return reader.read(max(1, block_bytes // 2)).encode("utf-8") if reader else stream.read(block_bytes)
    except UnicodeDecodeError as err:
        raise NotTextError(f"{path} is not {encoding} text: {err.reason} at byte {err.start} of a block; give its "
                           "encoding with --encoding") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:  # a .gz cut off (a copy that did not finish), or damaged
        raise NotTextError(f"{path} cannot be read as gzip: {err}") from None


def _character_boundary(data: bytearray, limit: int, encoding: str) -> int:
    """A cut at most `limit` bytes in, after a space (in the second half), else not inside a character: in UTF-8 not
    before a continuation byte; in another encoding (GBK, Big5, Latin-1...) where its decoder has no byte pending."""
    space = data.rfind(b" ", limit // 2, limit)
    if space >= 0:
        return space + 1
    if codecs.lookup(encoding).name == "utf-8":
        cut = limit
        while cut > limit - 3 and 0x80 <= data[cut] < 0xC0:  # a continuation byte: still inside a character
            cut -= 1
        return cut
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    decoder.decode(bytes(data[:limit]), final=False)
    return max(1, limit - len(decoder.getstate()[0]))


def _warn_cut(path: str | Path, numbers: list[int], limit: int) -> None:
    count = len(numbers)
    size = f"{limit / (1 << 20):g} MiB" if limit >= 1 << 20 else f"{limit:,} bytes"
    shown = ", ".join(map(str, numbers[:5])) + (f" and {count - 5} more" if count > 5 else "")
    warnings.warn(f"{path}: {count:,} line{'s' if count != 1 else ''} longer than {size} "
                  f"{'were' if count != 1 else 'was'} cut into parts of at most {size}, each read as a line of its own "
                  f"(line{'s' if count != 1 else ''} {shown})", DataWarning, stacklevel=3)
