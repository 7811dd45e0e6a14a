"""Every Unicode code point through the pure-Python tokenizers against Hugging Face `tokenizers`.

`bertkit.tokenizer.unicode_tables` holds character tables derived from `tokenizers` (which classifies with
Unicode 8.0 tables, decomposes with a slightly newer NFD, lowercases with Rust's current Unicode, and
splits byte-level BPE's words with Oniguruma's Unicode 16.0 letters and numbers). The first test derives
them again, code point by code point, and on a mismatch prints the ranges to paste in; the second runs
the code points (all of planes 0 and 1, a sample above) through both WordPiece tokenizers, in context,
and compares words and offsets for three normaliser settings; the third does the same for byte-level
BPE's NFC and split.
"""

from __future__ import annotations

import unicodedata

import pytest

from bertkit.tokenizer import unicode_tables as uni
from bertkit.tokenizer.basic import PythonBackend
from bertkit.tokenizer.bytelevel import pre_tokenize

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import normalizers, pre_tokenizers  # noqa: E402

from bertkit.tokenizer.fast import FastBackend  # noqa: E402

CODE_POINTS = [code for code in range(0x110000) if not 0xD800 <= code <= 0xDFFF]  # surrogates are not text
# Planes 0 and 1 hold nearly every character with special handling; above them (CJK extensions, private
# use, unassigned) and in the big uniform blocks below (CJK, Hangul syllables, private use, Tangut) the
# tables are a few long ranges, so a sample of those is enough in context.
UNIFORM = ((0x3400, 0x9FFF), (0xAC00, 0xD7A3), (0xE000, 0xF8FF), (0x17000, 0x18CFF), (0x20000, 0x10FFFF))
IN_CONTEXT = [code for code in CODE_POINTS if code % 29 == 0 or not any(a <= code <= b for a, b in UNIFORM)]


def _codes(ranges) -> set[int]:
    return {code for first, last in ranges for code in range(first, last + 1)}


def _spec(codes) -> str:
    """Code points as the table text of tokenizer.unicode_tables (inclusive hex ranges)."""
    ranges: list[list[int]] = []
    for code in sorted(codes):
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return " ".join(f"{a:04X}" if a == b else f"{a:04X}-{b:04X}" for a, b in ranges)


def derive_tables() -> dict[str, object]:
    """The tables of tokenizer.unicode_tables, as tokenizers behaves on each code point."""
    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False,
                                       lowercase=False)
    strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True,
                                       lowercase=False)
    lower = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=False,
                                       lowercase=True)
    nfd, split = normalizers.NFD(), pre_tokenizers.BertPreTokenizer()
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tables: dict[str, object] = {name: set() for name in
                                 ("CONTROL", "WHITESPACE", "PUNCTUATION", "NONSPACING_MARK", "COMBINING_MARKS",
                                  "NO_DECOMPOSITION", "LETTER", "NUMBER", "BPE_WHITESPACE")}
    tables["LOWERCASE"] = {}
    for code in CODE_POINTS:
        char = chr(code)
        if clean.normalize_str(char) == "":
            tables["CONTROL"].add(code)
        words = [word for word, _ in split.pre_tokenize_str(f"a{char}a")]
        if words == ["a", "a"]:
            tables["WHITESPACE"].add(code)
        elif words == ["a", char, "a"]:
            tables["PUNCTUATION"].add(code)
        python_nfd = unicodedata.normalize("NFD", char)
        if python_nfd == char and strip.normalize_str(char) == "":
            tables["NONSPACING_MARK"].add(code)
        if python_nfd != char and nfd.normalize_str(char) == char:
            tables["NO_DECOMPOSITION"].add(code)
        if unicodedata.combining(char):
            # a mark tokenizers knows is reordered before U+0334 (class 1), or after U+0301 (class 230); one that
            # decomposes is known by what it decomposes to
            if python_nfd != char:
                known = True
            elif unicodedata.combining(char) > 1:
                known = nfd.normalize_str(f"a{char}\u0334") == f"a\u0334{char}"
            else:
                known = nfd.normalize_str(f"a\u0301{char}") == f"a{char}\u0301"
            if known:
                tables["COMBINING_MARKS"].add(code)
        lowered = lower.normalize_str(char)
        if lowered != char.lower():
            tables["LOWERCASE"][code] = lowered
        # GPT-2's split keeps a letter between letters, a number between numbers, any other non-space between
        # symbols in one word; what is none of the three is its whitespace
        one_word = {kind: len(byte_level.pre_tokenize_str(f"{edge}{char}{edge}")) == 1
                    for kind, edge in (("letter", "a"), ("number", "1"), ("symbol", "!"))}
        if one_word["letter"]:
            tables["LETTER"].add(code)
        if one_word["number"]:
            tables["NUMBER"].add(code)
        if not any(one_word.values()):
            tables["BPE_WHITESPACE"].add(code)
    return tables


@pytest.mark.slow
def test_tables_are_what_tokenizers_does():
    derived = derive_tables()
    problems = []
    for name in ("CONTROL", "WHITESPACE", "PUNCTUATION", "NONSPACING_MARK", "COMBINING_MARKS", "NO_DECOMPOSITION",
                 "LETTER", "NUMBER"):
        if derived[name] != _codes(getattr(uni, name)):
            problems.append(f'{name} = _ranges("""\n{_spec(derived[name])}\n""")')
    if derived["BPE_WHITESPACE"] != _codes(uni.WHITESPACE):  # byte-level BPE's split reads \s as WHITESPACE
        problems.append(f"byte-level BPE's whitespace is no longer WHITESPACE: {_spec(derived['BPE_WHITESPACE'])}")
    lowercase = {code: text for code, text in uni.LOWERCASE.items() if text != chr(code).lower()}
    if derived["LOWERCASE"] != lowercase:
        problems.append("LOWERCASE: " + " ".join(f"{code:04X}>{ord(text):04X}"
                                                 for code, text in sorted(derived["LOWERCASE"].items())))
    assert not problems, "tokenizer.unicode_tables is out of date; new tables:\n" + "\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize("lowercase, strip_accents", [(False, None), (True, None), (True, False)])
def test_every_code_point_in_context(lowercase, strip_accents):
    """Each code point between letters, then against a mark, CJK, punctuation and another code point."""
    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2}  # every word is [UNK]: word spans (offsets) get compared
    settings = dict(unk_token="[UNK]", never_split=["[CLS]", "[SEP]"], lowercase=lowercase,
                    strip_accents=strip_accents, tokenize_chinese_chars=True)
    ours, theirs = PythonBackend(vocab, **settings), FastBackend(vocab, **settings)
    basic = ours.basic
    reference = theirs._tokenizer
    chunk = 2048
    for start in range(0, len(IN_CONTEXT), chunk):
        chars = [chr(code) for code in IN_CONTEXT[start:start + chunk]]
        texts = [" ".join(f"x{c}y" for c in chars),  # alone in a word
                 "".join(f"{c}\u0301{c}\u4e00{c}." for c in chars),  # against a mark, CJK, punctuation
                 "".join(chars)]  # against each other
        expected = reference.encode_batch(texts, add_special_tokens=False)
        for text, encoding in zip(texts, expected):
            assert ours.encode_offsets(text) == (encoding.ids, encoding.offsets), f"U+{ord(chars[0]):04X}.."
            words = [word for word, _ in pre_tokenizers.BertPreTokenizer().pre_tokenize_str(
                reference.normalizer.normalize_str(text))]
            assert basic.split(text) == words, f"U+{ord(chars[0]):04X}.."


@pytest.mark.slow
def test_every_code_point_through_byte_level_bpe_in_context():
    """NFC and GPT-2's split, as tokenizers' NFC normaliser and ByteLevel pre-tokenizer: each code point between
    letters, numbers and symbols, decomposed before a mark, after one and among marks (where only Python's tables
    know a mark, nothing may be reordered or composed across it), and against another code point."""
    nfc, byte_level = normalizers.NFC(), pre_tokenizers.ByteLevel(add_prefix_space=False)
    chunk = 2048
    for start in range(0, len(IN_CONTEXT), chunk):
        chars = [chr(code) for code in IN_CONTEXT[start:start + chunk]]
        texts = [" ".join(f"x{c}y 1{c}2 !{c}? {c}" for c in chars),
                 "".join(f"{unicodedata.normalize('NFD', c)}\u0301e{c}\u0334\u0301o\u0301{c}\u0323 " for c in chars),
                 "".join(chars)]
        for text in texts:
            normalized = nfc.normalize_str(text)
            assert uni.nfc(text) == normalized, f"U+{ord(chars[0]):04X}.."
            words = [word for word, _ in byte_level.pre_tokenize_str(normalized)]
            assert pre_tokenize(normalized) == words, f"U+{ord(chars[0]):04X}.."
