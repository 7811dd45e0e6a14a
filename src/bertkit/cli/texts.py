"""Text typed on the command line or piped to standard input, decoded in one place: as the bytes were meant
(`--encoding`), or refused in one line naming the argument or line that does not decode or holds no text."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

from bertkit.cli.common import UserError
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
        raise UserError(f"{where} is not valid {encoding} text: bytes {bad!r} at byte {err.start} do not decode"
                        f"{hint}") from None


def command_line_texts(values: Sequence[str], encoding: str = "utf-8", what: str = "text") -> list[str]:
    """Texts typed on the command line as their bytes were meant: the one place where argument text is decoded.

    The operating system hands arguments over as bytes; Python decodes them as UTF-8 and keeps bytes that are not
    UTF-8 as lone surrogates, which no tokenizer can read. Here each argument's bytes are decoded as `encoding`,
    and one that does not decode, or is empty, is a UserError naming it ("text 2 is not valid utf-8 text: ...")."""
    texts = []
    for n, value in enumerate(values, start=1):
        where = f"{what} {n}" if len(values) > 1 else f"the {what}"
        text = value if encoding == "utf-8" and value.isascii() else _decoded(os.fsencode(value), encoding, where)
        if (empty := blank_message(where, text)) is not None:  # no visible character: the one rule for all
            raise UserError(empty)
        texts.append(text)
    return texts


def stdin_lines(encoding: str = "utf-8") -> list[str]:
    """The lines of standard input that have a visible character, decoded as `encoding` (a line that does not decode
    is a UserError naming its number), without their line breaks. Blank lines are skipped and said to be (a warning
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
