r"""One rule for empty text, used everywhere a text is read (the command line, the Python API, the server, the
readers of data files): a text with no visible character is empty.

Invisible are white space (U+3000 as much as a space), control characters (Cc), format characters (Cf: U+200B
ZERO WIDTH SPACE, U+200C/U+200D joiners, U+2060 WORD JOINER, U+FEFF, the byte order mark, ...) and the other code
points Unicode says to render as nothing (Default_Ignorable_Code_Point: variation selectors, U+3164 HANGUL FILLER,
...). BERT's tokenizer drops white space and control and format characters, so a text of only these has no tokens:
whatever a model made of it would be made of [CLS] and [SEP] alone, the same for every such text.

    blank_kind("\u200b\ufeff")   # "only invisible characters (U+200B ZERO WIDTH SPACE, U+FEFF ZERO WIDTH ...)"
    blank_message("the text", " ")   # 'the text is only white space: it has no tokens, so nothing made ...'
"""

from __future__ import annotations

import re
import unicodedata

# Cc and Cf (Unicode 15.1), and the rest of Default_Ignorable_Code_Point; white space is the regex's \s, which
# matches what str.isspace() calls white space. tests/test_bad_input_texts.py checks the table against the running
# Python's Unicode tables.
INVISIBLE_RANGES = (
    (0x0000, 0x001F), (0x007F, 0x009F), (0x00AD, 0x00AD), (0x034F, 0x034F), (0x0600, 0x0605), (0x061C, 0x061C),
    (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD),
    (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)
_CLASS = "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in INVISIBLE_RANGES)
_BLANK = re.compile(f"[\\s{_CLASS}]*")
_INVISIBLE = re.compile(f"[{_CLASS}]")

EMPTY_CONSEQUENCE = "it has no tokens, so nothing made for it could mean anything"
# a few invisible characters (U+3164 HANGUL FILLER, variation selectors) still become tokens: say what is certain
INVISIBLE_CONSEQUENCE = "it has no visible character, so nothing made for it could mean anything"


def is_blank(text: str) -> bool:
    """Whether `text` has no visible character: empty, white space, invisible characters, or a mix of them."""
    return _BLANK.fullmatch(text) is not None


def blank_kind(text: str) -> str | None:
    """How a text with no visible character is described ("empty", "only white space", "only invisible characters
    (U+200B ZERO WIDTH SPACE)", ...), naming the first three invisible characters, which a reader cannot see; None
    for a text with a visible character."""
    if not is_blank(text):
        return None
    if not text:
        return "empty"
    found = [char for char in dict.fromkeys(_INVISIBLE.findall(text)) if not char.isspace()]  # tab, LF: Cc too
    if not found:
        return "only white space"
    named = ", ".join(f"U+{ord(char):04X}" + (f" {unicodedata.name(char)}" if unicodedata.name(char, "") else "")
                      for char in found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    spaces = " and white space" if any(char.isspace() for char in text) else ""
    return f"only invisible characters{spaces} ({named})"


def blank_message(where: str, text: str) -> str | None:
    """The one-line refusal of a text with no visible character ("the text is only white space: it has no tokens,
    ..."), or None for a text with a visible one."""
    kind = blank_kind(text)
    if kind is None:
        return None
    return f"{where} is {kind}: {INVISIBLE_CONSEQUENCE if kind.startswith('only invisible') else EMPTY_CONSEQUENCE}"


def shorten(text: str, width: int = 70) -> str:
    """One line of at most `width` characters, with an ellipsis when cut."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"
