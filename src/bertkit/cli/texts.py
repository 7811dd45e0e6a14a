"""Text typed on the command line or piped to standard input, decoded in one place: as the bytes were meant
(`--encoding`), or refused in one line naming the argument or line that does not decode or holds no text; and the
texts `predict` and `encode` run, from TEXT arguments or an --input file read as a stream."""

from __future__ import annotations

import argparse
import collections
import os
import sys
import warnings
from collections.abc import Sequence

from bertkit.errors import InputError
from bertkit.utils.visible import blank_message, is_blank


def add_encoding_option(p: argparse.ArgumentParser, what: str = "texts and input files") -> None:
    p.add_argument("--encoding", default="utf-8", type=_encoding,
                   help=f"the encoding of the {what}, e.g. gbk or gb18030 (default: utf-8)")


def _encoding(name: str) -> str:
    import codecs

    try:
        return codecs.lookup(name).name
    except LookupError:
        raise argparse.ArgumentTypeError(f"unknown encoding {name!r} (e.g. utf-8, gbk, gb18030, big5)") from None


def _decoded(raw: bytes, encoding: str, where: str) -> str:
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as err:
        bad = raw[err.start:err.start + 4]
        hint = " (GBK or GB18030 text? give --encoding gbk)" if encoding == "utf-8" else ""
        raise InputError(f"{where} is not valid {encoding} text: bytes {bad!r} at byte {err.start} do not decode"
                        f"{hint}") from None


def command_line_texts(values: Sequence[str], encoding: str = "utf-8", what: str = "text") -> list[str]:
    """Texts typed on the command line as their bytes were meant: the one place where argument text is decoded.

    The operating system hands arguments over as bytes; Python decodes them as UTF-8 and keeps bytes that are not
    UTF-8 as lone surrogates, which no tokenizer can read. Here each argument's bytes are decoded as `encoding`,
    and one that does not decode, or is empty, is a InputError naming it ("text 2 is not valid utf-8 text: ...")."""
    texts = []
    for n, value in enumerate(values, start=1):
        where = f"{what} {n}" if len(values) > 1 else f"the {what}"
        text = value if encoding == "utf-8" and value.isascii() else _decoded(os.fsencode(value), encoding, where)
        if (empty := blank_message(where, text)) is not None:  # no visible character: the one rule for all
            raise InputError(empty)
        texts.append(text)
    return texts


def stdin_lines(encoding: str = "utf-8") -> list[str]:
    """The lines of standard input that have a visible character, decoded as `encoding` (a line that does not decode
    is a InputError naming its number), without their line breaks. Blank lines are skipped and said to be (a warning
    naming them, as a file's are): one output a kept line then no longer lines up with the input's lines unsaid."""
    data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode("utf-8")
    lines = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    if lines and not lines[-1].strip():  # what follows the last line break is no line
        lines = lines[:-1]
    texts, blank = [], []
    for n, raw in enumerate(lines, start=1):
        text = _decoded(raw.rstrip(b"\r"), encoding, f"line {n} of standard input")
        if is_blank(text):
            blank.append(n)
        else:
            texts.append(text)
    if blank and texts:
        shown = ", ".join(map(str, blank[:5])) + (" ..." if len(blank) > 5 else "")
        warnings.warn(f"standard input: skipped {len(blank)} blank line{'s' if len(blank) > 1 else ''} (line"
                      f"{'s' if len(blank) > 1 else ''} {shown}), kept {len(texts)}: one output for each kept line, "
                      "in order", stacklevel=2)
    return texts


# ---- the texts a command runs: TEXT arguments, or --input read as a stream ---------------------------

def add_text_inputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("texts", nargs="*", metavar="TEXT", help="texts to run (or use --input)")
    p.add_argument("--input", metavar="FILE", help="one text per line (in a .tsv file: text<TAB>pair) "
                                                        "(default: the TEXT arguments)")


def text_inputs(args: argparse.Namespace, count: bool = False):
    """(chunks of (texts, pairs or None), the number of texts or None): the TEXT arguments as one chunk, or --input
    read as a stream (counted first when `count`, or when a progress bar may be drawn)."""
    from bertkit.inference import PROGRESS_MIN_TEXTS, show_progress
    from bertkit.pipelines.predict import InputFile

    if args.input and args.texts:
        raise InputError("give texts on the command line or --input FILE, not both")
    if args.input:
        source = InputFile(args.input, encoding=args.encoding)
        # a progress bar needs the count, and is drawn only for long inputs to a terminal
        total = source.count() if count or show_progress(None, PROGRESS_MIN_TEXTS) else None
        return source.chunks(), total
    if not args.texts:
        raise InputError("give one or more texts, or --input FILE")
    texts = command_line_texts(args.texts, args.encoding)
    return [(texts, None)], len(texts)


def with_pairs(chunks, total: int | None, given: list[str] | None):
    """The chunks with --pair applied: one pair for every text, or one per text."""
    if not given:
        yield from chunks
        return
    if len(given) not in (1, total):
        raise InputError(f"{len(given)} --pair for {total} texts: give one for all, or one per text")
    start = 0
    for texts, pairs in chunks:
        if pairs is not None:
            raise InputError("--pair and a .tsv --input with pairs both give pairs; use one")
        yield texts, given * len(texts) if len(given) == 1 else given[start:start + len(texts)]
        start += len(texts)


def kept_chunks(chunks, kept: collections.deque):
    """The chunks, each also put in `kept`: a stream consumer yields one result per chunk, and the printer takes
    the chunk back from `kept` to show its texts beside their results."""
    for chunk in chunks:
        kept.append(chunk)
        yield chunk


def single_texts(chunks, source: str | None):
    """The texts of each chunk; a chunk with text pairs is an error (encode takes single texts)."""
    for texts, pairs in chunks:
        if pairs is not None:
            raise InputError(f"{source} has text pairs (a second column); encode takes single texts")
        yield texts
