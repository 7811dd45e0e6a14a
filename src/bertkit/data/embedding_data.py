"""Data for sentence vectors: what `bertkit finetune --task embedding` trains on and `bertkit evaluate --task
retrieval | bitext | clustering | sts` scores on.

Training data has one of three shapes, and the shape chooses the loss (`LOSS_FOR_SHAPE`; `--loss` overrides it):

    shape    a row                                     TSV line                        JSONL object
    pairs    anchor, positive[, hard negative ...]     anchor<TAB>positive[<TAB>neg]   {"anchor", "positive",
                                                                                        "negative": str | [str]}
    scored   text, text, similarity score              text<TAB>text<TAB>0.8           {"text", "text_pair", "score"}
    text     one sentence                              a line without a tab            {"text"}

A TSV row of three columns whose last column is a number in every row is a scored pair; a first row naming its
columns (anchor/positive/negative, query/document, sentence1/sentence2/score, ...) is a header. Rows with another
number of columns than the first, or an empty text, are skipped and counted in one warning.

Named data (all from the built-in sources):

    inews-pairs          pairs: each inews article's title -> its body (train 5,298 / dev 993 / test 990)
    thucnews-headlines   text: THUCNews' 8,000 training headlines (no labels, no dev: SimCSE)

and for evaluation: retrieval on inews (each test title the query, its body the one relevant document among all
test bodies), bitext mining on the bible (the held-out books' English and Chinese verses: World English Bible and
the Chinese New Version) and hsk (the test split's Chinese sentences and their English), clustering of thucnews'
1,000 test headlines into their 10 classes.
"""

from __future__ import annotations

import json
import os
import random
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bertkit.data.lines import check_example_file, input_path
from bertkit.data.readers import (
    DataWarning,
    Skips,
    csv_rows,
    iter_decoded_lines,
    read_classification_file,
    read_parallel,
)
from bertkit.errors import DataError, InputError

SHAPES = ("pairs", "scored", "text")
LOSSES = ("infonce", "cosent", "simcse")  # bertkit.training.embedding_losses computes them
# the data's shape -> the loss it trains with unless told otherwise (`finetune --loss`)
LOSS_FOR_SHAPE = {"pairs": "infonce", "scored": "cosent", "text": "simcse"}
TRAINING_DATASETS = ("inews-pairs", "thucnews-headlines")
EVALUATION_TASKS = ("retrieval", "bitext", "clustering", "sts")
EVALUATION_DATASETS = {"retrieval": ("inews",), "bitext": ("bible", "hsk"), "clustering": ("thucnews",), "sts": ()}
EVALUATION_FILES = {"retrieval": "pairs (a query and its relevant document; hard negatives join the documents)",
                    "bitext": "a TSV of source<TAB>translation lines",
                    "clustering": "a TSV/CSV/JSONL of text and label",
                    "sts": "scored pairs (text, text, score)"}
BIBLE_LANGUAGES = ("en", "zh")

_FIRST = ("anchor", "query", "text", "sentence1", "sentence", "question", "text1", "premise")
_SECOND = ("positive", "text_pair", "document", "sentence2", "pos", "answer", "passage", "text2", "hypothesis")
_NEGATIVE = ("negative", "negatives", "neg", "hard_negative", "hard_negatives")
_SCORE = ("score", "similarity", "label")
_HEADER = {*_FIRST, *_SECOND, *_NEGATIVE, *_SCORE} | {f"negative{i}" for i in range(1, 100)} | {
    f"negative_{i}" for i in range(1, 100)}


@dataclass(frozen=True)
class EmbeddingExample:
    """One training or evaluation row: its texts (anchor first) and, for a scored pair, its score."""

    texts: tuple[str, ...]
    score: float | None = None


def shape_of(examples: Sequence[EmbeddingExample]) -> str:
    """"pairs", "scored" or "text": what every row is (a reader makes them all alike)."""
    if not examples:
        raise InputError("no examples")
    first = examples[0]
    return "scored" if first.score is not None else "text" if len(first.texts) == 1 else "pairs"


def _number(cell: str) -> float | None:
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def _check_path(path: Path, purpose: str) -> None:
    check_example_file(path, purpose, "TSV, JSONL or plain text", TRAINING_DATASETS)


def _json_row(record: object) -> tuple[list[str], float | None] | None:
    """The texts and score of one JSONL record (an object with known keys, or a list of texts); None if not one."""
    if isinstance(record, list) and record and all(isinstance(x, str) for x in record):
        return list(record), None
    if not isinstance(record, dict):
        return None

    def first_of(keys: tuple[str, ...]) -> object:
        return next((record[k] for k in keys if k in record), None)

    first, second = first_of(_FIRST), first_of(_SECOND)
    if not isinstance(first, str) or (second is not None and not isinstance(second, str)):
        return None
    negatives = first_of(_NEGATIVE)
    negatives = [negatives] if isinstance(negatives, str) else negatives or []
    if not isinstance(negatives, list) or not all(isinstance(x, str) for x in negatives):
        return None
    score = first_of(_SCORE)
    if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
        return None
    texts = [first, *([second] if second is not None else []), *negatives]
    return texts, None if score is None else float(score)


def read_embedding_file(path: str | os.PathLike, purpose: str = "to train on",
                        encoding: str = "utf-8") -> list[EmbeddingExample]:
    """The rows of a pairs, scored-pairs or plain-text file (the table in this module's docstring), all of one
    shape, decided from all the rows (`_table_rows`): a row of another shape is skipped and counted, with the reason
    and the lines, in one warning that also says which shape was read and why. A JSONL file is one with a .jsonl or
    .json suffix, a CSV one with .csv (quoted cells); any other file is read as TSV, a file without a tab being one
    sentence a line."""
    path = input_path(path)
    _check_path(path, purpose)
    skips = Skips(path)
    rows: list[tuple[int, list[str], float | None]] = []
    suffix = path.suffix.lower()
    jsonl = suffix in (".jsonl", ".json")
    lines = iter_decoded_lines(path, encoding)
    if suffix == ".csv":
        lines = _csv_lines(lines, skips)
    for number, line in lines:
        if line is None:
            skips.add("undecodable bytes", number)
            continue
        if isinstance(line, str) and not line.strip():
            continue
        if jsonl:
            try:
                parsed = _json_row(json.loads(line))
            except ValueError:
                parsed = None
            if parsed is None:
                skips.add("not a JSON object with texts", number)
                continue
            if parsed[1] is not None and _number(str(parsed[1])) is None:
                skips.add("a score that is not a finite number", number)
                continue
            rows.append((number, *parsed))
        else:
            rows.append((number, line if isinstance(line, list) else line.split("\t"), None))
    chose = ""
    if not jsonl:
        rows, chose = _table_rows(rows, skips)
    examples: list[EmbeddingExample] = []
    width = None
    for number, texts, score in rows:
        texts = [text.strip() for text in texts]
        if not all(texts):
            skips.add("an empty text", number)
            continue
        shape = (len(texts), score is not None)
        width = width or shape
        if shape != width:
            skips.add(f"not {width[0]} texts{' and a score' if width[1] else ''} as the first row", number)
            continue
        examples.append(EmbeddingExample(tuple(texts), score))
    skips.warn(len(examples), chose)  # with the rows skipped: which shape was read, and why
    if not examples:
        raise InputError(f"{path} has no usable rows {purpose}" + (f" ({chose})" if chose else ""))
    return examples


def _csv_lines(lines, skips: Skips) -> list[tuple[int, list[str]]]:
    """(number, cells) of a CSV file's rows (`readers.csv_rows`), undecodable and blank lines left out."""
    return csv_rows([(number, line) for number, line in lines if line is not None and line.strip()], skips)


def _table_rows(rows: list[tuple[int, list[str], float | None]], skips: Skips
                ) -> tuple[list[tuple[int, list[str], float | None]], str]:
    """TSV or CSV rows as (number, texts, score), and what was read and why (for the warning, where rows were
    skipped). A first row naming its columns (anchor/positive/negative, sentence1/sentence2/score, score/text/
    text_pair, in any order) is a header, and its names place the texts and the score. Without one, rows of three
    cells are scored pairs when the third cell looks like a number (an empty cell, NaN and inf too) in more than
    half of them: a row whose score is not a finite number is then skipped, never read as a hard negative."""
    if rows and all(cell.strip().lower() in _HEADER for cell in rows[0][1]):
        names = [cell.strip().lower() for cell in rows[0][1]]
        rows = rows[1:]
        order = ([i for i, n in enumerate(names) if n in _FIRST][:1]
                 + [i for i, n in enumerate(names) if n in _SECOND][:1]
                 + [i for i, n in enumerate(names) if n in _NEGATIVE or n.startswith("negative")])
        order = order or list(range(len(names)))
        score = next((i for i, n in enumerate(names) if n in _SCORE), None)
        chose = f"read by its header ({', '.join(names)})"
        out = []
        for number, cells, _ in rows:
            if len(cells) != len(names):
                skips.add(f"not the header's {len(names)} columns", number)
                continue
            value = _number(cells[score]) if score is not None else None
            if score is not None and value is None:
                skips.add("a score that is not a finite number", number)
                continue
            out.append((number, [cells[i] for i in order], value))
        return out, chose
    three = [cells for _, cells, _ in rows if len(cells) == 3]
    numeric = sum(_number_like(cells[2]) for cells in three)
    if not three or numeric * 2 <= len(three):
        return rows, ""
    chose = (f"read as scored pairs: the third column is a score (a number, NaN, inf or empty) in {numeric:,} of "
             f"the {len(three):,} rows of three columns")
    out = []
    for number, cells, _ in rows:
        if len(cells) != 3:
            skips.add("not two texts and a score", number)
        elif _number(cells[2]) is None:
            skips.add("a score that is not a finite number" if _number_like(cells[2]) else
                      "a third column that is not a score", number)
        else:
            out.append((number, cells[:2], _number(cells[2])))
    return out, chose


def _number_like(cell: str) -> bool:
    """A cell meant as a score: a number, finite or not (NaN, inf), or empty."""
    if not cell.strip():
        return True
    try:
        float(cell)
    except ValueError:
        return False
    return True


# ---- named data ----------------------------------------------------------------------------------

def inews_pairs(split: str) -> list[EmbeddingExample]:
    """inews' official `split` as (title, body) pairs; articles without a title or a body are left out."""
    from bertkit.data.tasks import inews_split

    titles, bodies, _ = inews_split(split)
    return [EmbeddingExample((title.strip(), body.strip())) for title, body in zip(titles, bodies)
            if title.strip() and body.strip()]


def thucnews_split(split: str) -> tuple[list[str], list[str]]:
    """(headlines, labels) of thucnews' fixed stratified `split` (the one `finetune --train thucnews` uses)."""
    from bertkit.data.tasks import load_classification, named_split

    examples = named_split(load_classification("thucnews"), split, "thucnews")
    return [e.text for e in examples], [e.label for e in examples]


def load_embedding_dataset(name: str) -> dict[str, list[EmbeddingExample]]:
    """A named training dataset's splits (TRAINING_DATASETS)."""
    if name == "inews-pairs":
        return {split: inews_pairs(split) for split in ("train", "dev", "test")}
    if name == "thucnews-headlines":
        return {"train": [EmbeddingExample((text,)) for text in thucnews_split("train")[0]]}
    raise InputError(f"{name!r} is not an embedding dataset; known: {', '.join(TRAINING_DATASETS)}")


def read_embedding_data(spec: str, split: str, purpose: str = "to train on",
                        encoding: str = "utf-8") -> list[EmbeddingExample]:
    """The rows `spec` names: a named dataset's `split`, or a file (read as `encoding`)."""
    if spec in TRAINING_DATASETS:
        from bertkit.data.tasks import named_split

        return named_split(load_embedding_dataset(spec), split, spec)
    return read_embedding_file(spec, purpose, encoding)


# ---- evaluation sets -----------------------------------------------------------------------------

@dataclass(frozen=True)
class RetrievalSet:
    """Queries, the documents to search, and each query's relevant documents (indices into `corpus`)."""

    queries: list[str]
    corpus: list[str]
    relevant: list[frozenset[int]]


@dataclass(frozen=True)
class BitextSet:
    """Aligned sentences: `target[i]` translates `source[i]`; no sentence occurs twice on its side."""

    source: list[str]
    target: list[str]
    languages: tuple[str, str]


@dataclass(frozen=True)
class LabelledTexts:
    """Texts and their classes, for clustering."""

    texts: list[str]
    labels: list[str]


@dataclass(frozen=True)
class ScoredPairs:
    """Text pairs and their gold similarity scores (STS)."""

    first: list[str]
    second: list[str]
    scores: list[float]


def retrieval_set(examples: Sequence[EmbeddingExample]) -> RetrievalSet:
    """Pairs as a search: each distinct anchor is a query, each distinct text a document once; a query's relevant
    documents are its positives (all of them, where the anchor occurs in several rows). Hard negatives join the
    documents as irrelevant ones."""
    if shape_of(examples) != "pairs":
        raise InputError("retrieval needs pairs (a query and its relevant document), not "
                         f"{'scored pairs' if shape_of(examples) == 'scored' else 'plain text'}")
    corpus: dict[str, int] = {}
    relevant: dict[str, set[int]] = {}
    for example in examples:
        query, positive, *negatives = example.texts
        for text in (positive, *negatives):
            corpus.setdefault(text, len(corpus))
        relevant.setdefault(query, set()).add(corpus[positive])
    return RetrievalSet(list(relevant), list(corpus), [frozenset(found) for found in relevant.values()])


def unique_pairs(pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The pairs whose source and target each occur once so far: with a repeated sentence, "its translation" among
    the candidates would not be one sentence."""
    seen_source: set[str] = set()
    seen_target: set[str] = set()
    kept = []
    for source, target in pairs:
        if source and target and source not in seen_source and target not in seen_target:
            kept.append((source, target))
        seen_source.add(source)
        seen_target.add(target)
    return kept


def bitext_set(spec: str, split: str = "test", encoding: str = "utf-8") -> BitextSet:
    """bible (en -> zh verses of the held-out books), hsk (zh -> en sentences of `split`), or a TSV file of
    source<TAB>translation lines."""
    from bertkit.data.tasks import load_translation, named_split

    if spec == "bible":
        pairs, languages = named_split(load_translation("bible", *BIBLE_LANGUAGES), split, spec), BIBLE_LANGUAGES
    elif spec == "hsk":
        pairs, languages = named_split(load_translation("hsk", "zh", "en"), split, spec), ("zh", "en")
    else:
        _check_path(Path(spec), "to evaluate on")
        pairs, languages = read_parallel(spec, encoding=encoding), ("source", "target")
    kept = unique_pairs(pairs)
    if not kept:
        raise DataError(f"{spec} has no sentence pairs to mine")
    if len(kept) < len(pairs) and spec not in ("bible", "hsk"):  # a named set's few repeats are known and harmless
        warnings.warn(f"{spec}: left out {len(pairs) - len(kept)} of {len(pairs)} sentence pairs: a sentence that "
                      "occurs twice on its side (or an empty one) has no one translation to find", DataWarning,
                      stacklevel=2)
    return BitextSet([s for s, _ in kept], [t for _, t in kept], languages)


def clustering_set(spec: str, split: str = "test", encoding: str = "utf-8") -> LabelledTexts:
    """thucnews' `split` headlines and their classes, or a labelled TSV/CSV/JSONL file (text, label)."""
    if spec == "thucnews":
        return LabelledTexts(*thucnews_split(split))
    _check_path(Path(spec), "to evaluate on")
    examples = read_classification_file(spec, encoding=encoding)
    return LabelledTexts([e.text for e in examples], [e.label for e in examples])


def sts_set(spec: str, encoding: str = "utf-8") -> ScoredPairs:
    """A file of scored pairs (text, text, score)."""
    examples = read_embedding_file(spec, "to evaluate on", encoding)
    if shape_of(examples) != "scored":
        raise InputError(f"{spec}: sts needs scored pairs (text<TAB>text<TAB>score), not "
                         f"{'pairs without scores' if shape_of(examples) == 'pairs' else 'plain text'}")
    return ScoredPairs([e.texts[0] for e in examples], [e.texts[1] for e in examples], [e.score for e in examples])


# ---- cropped views (SimCSE's views without dropout) ------------------------------------------------

def check_crop(crop: Sequence[float]) -> None:
    """`--crop LOW HIGH`: two shares of a text's tokens, 0 < LOW <= HIGH <= 1."""
    if len(crop) != 2:
        raise InputError(f"--crop takes two shares, LOW HIGH (e.g. 0.3 0.7), not {len(crop)}")
    low, high = crop
    if not 0 < low <= high <= 1:
        raise InputError(f"--crop LOW HIGH needs 0 < LOW <= HIGH <= 1 (shares of a text's tokens), got {low} {high}")


def crop_view(ids: Sequence[int], low: float, high: float, rng: random.Random) -> list[int]:
    """A view of one tokenized text, [CLS] ... [SEP]: a contiguous span of the tokens between them, of a share drawn
    uniformly from [low, high] of them (at least one token), kept in its [CLS] and [SEP]. Random cropping (Izacard et
    al., 2022): two views of a text share some of its words, not all, so what makes them alike is what the text is
    about more than its exact wording."""
    body = ids[1:-1]
    if not body:
        return list(ids)
    keep = min(len(body), max(1, round(len(body) * rng.uniform(low, high))))
    start = rng.randrange(len(body) - keep + 1)
    return [ids[0], *body[start:start + keep], ids[-1]]
