"""Users' own files: classification rows (TSV/CSV/JSONL), CoNLL token tags, parallel TSV.

Every reader decodes line by line, so one bad byte costs one line, not the file. A line or row that
cannot be used (undecodable bytes, wrong number of columns, missing text or label) is skipped, and the
skips are reported once per file as a DataWarning that counts them and names the first line numbers:
never a crash on messy data, never a silent drop.
"""

from __future__ import annotations

import csv
import json
import re
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bertkit.data.lines import DataWarning as DataWarning  # where the readers' callers have always found them
from bertkit.data.lines import NotTextError as NotTextError
from bertkit.data.lines import check_decoded, line_blocks
from bertkit.errors import DataError, InputError
from bertkit.utils import jsonfiles
from bertkit.utils.visible import is_blank

_ENTITY_TAG = re.compile(r"O|[BIMES]-\S+")
TEXT_NAMES = ("text", "sentence", "sentence1", "text_a", "content", "review", "src")
PAIR_NAMES = ("text_pair", "sentence2", "text_b", "pair")
LABEL_NAMES = ("label", "labels", "category", "class", "sentiment", "tag", "target")


@dataclass
class TextExample:
    """One text (or text pair) with its class label, as strings."""

    text: str
    label: str
    text_pair: str | None = None


@dataclass
class TokenExample:
    """One sentence as tokens with one tag per token."""

    tokens: list[str]
    tags: list[str]


class Skips:
    """Collects skipped lines (or rows, sentences, questions) per reason and reports them in one warning that names
    the first few by `name` ("line 3", "lines 3, 5", "id q7")."""

    def __init__(self, path: str | Path, unit: str = "line", name: str = "line"):
        self.path, self.unit, self.name = path, unit, name
        self.lines: dict[str, list[int | str]] = {}

    def add(self, reason: str, where: int | str) -> None:
        self.lines.setdefault(reason, []).append(where)

    def warn(self, kept: int, note: str = "") -> None:
        """One warning for every skipped line, if any; `note` (how the file was read) is said after the path."""
        if not self.lines:
            return
        count = sum(len(v) for v in self.lines.values())
        parts = []
        for reason, numbers in self.lines.items():
            shown = ", ".join(map(str, numbers[:5])) + (f" and {len(numbers) - 5} more" if len(numbers) > 5 else "")
            parts.append(f"{reason} ({self.name}{'' if len(numbers) == 1 else 's'} {shown})")
        warnings.warn(f"{self.path}{f' ({note})' if note else ''}: skipped {count} {self.unit}"
                      f"{'s' if count != 1 else ''}, kept {kept}: "
                      + "; ".join(parts), DataWarning, stacklevel=3)

    def __bool__(self) -> bool:
        return bool(self.lines)


def iter_decoded_lines(path: str | Path, encoding: str = "utf-8", block_bytes: int = 1 << 20
                       ) -> Iterator[tuple[int, str | None]]:
    """(line number from 1, text without the line break) per line, read `block_bytes` at a time (data/lines.py: a
    file of any size in constant memory); text is None where the bytes do not decode.

    A few undecodable lines are the caller's to skip and count; a file that is not text at all is a NotTextError
    naming it: one holding NUL bytes (an image, a model, UTF-16 text read as UTF-8), or one where most lines do not
    decode (text in another encoding, such as GBK read as UTF-8), since skipping every line would only hide the
    reason. The first 1,000 lines tell that early; the whole file is checked again at its end.

    A line ends at "\\n", "\\r\\n" or a lone "\\r". A row is read whole (a line longer than MAX_RECORD_BYTES comes in
    parts, each with the line's number, and a DataWarning says so)."""
    failed: list[int] = []
    number = 0
    for block in line_blocks(path, encoding, block_bytes, records=True):
        # every line ends with b"\n": nothing follows the last; a part of a line has the line's number
        for number, raw in enumerate(block.lines.split(b"\n")[:-1], block.first_line):
            try:
                yield number, raw.decode(block.encoding)
            except UnicodeDecodeError:
                failed.append(number)
                yield number, None
            if number == 1000:
                check_decoded(path, encoding, failed, number)
    check_decoded(path, encoding, failed, number)


def decoded_lines(path: str | Path, encoding: str = "utf-8") -> list[tuple[int, str | None]]:
    """Every line of a file as `iter_decoded_lines` reads it, in a list."""
    return list(iter_decoded_lines(path, encoding))


def _trim_trailing_blank(lines: list[tuple[int, str | None]]) -> list[tuple[int, str | None]]:
    # blank lines at the very end are an editor habit, not a skipped row
    while lines and lines[-1][1] is not None and is_blank(lines[-1][1]):
        lines = lines[:-1]
    return lines


def _usable_lines(path: str | Path, encoding: str, skips: Skips, blank: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of the lines that decode and hold text; the others go to `skips` (blank ones, with no
    visible character, under the reason `blank`), except blank lines at the very end, an editor habit rather than a
    skipped row."""
    for number, text in _trim_trailing_blank(decoded_lines(path, encoding)):
        if text is None:
            skips.add("undecodable bytes", number)
        elif is_blank(text):
            skips.add(blank, number)
        else:
            yield number, text


def _json_objects(path: str | Path, encoding: str, skips: Skips, blank: str) -> Iterator[tuple[int, dict]]:
    """(line number, object) of the JSON Lines that hold a JSON object; the others go to `skips` (`_usable_lines`'
    reasons, invalid JSON, JSON that is not an object)."""
    for number, line in _usable_lines(path, encoding, skips, blank):
        try:
            obj = jsonfiles.loads(line)
        except ValueError:
            skips.add("invalid JSON", number)
            continue
        if isinstance(obj, dict):
            yield number, obj
        else:
            skips.add("not a JSON object", number)


def _rows(path: Path, fmt: str, encoding: str, skips: Skips) -> list[tuple[int, list[str]]]:
    """Split a TSV/CSV file into (line number, cells); blank and undecodable lines go to `skips`."""
    good = list(_usable_lines(path, encoding, skips, "empty row"))
    if fmt == "tsv":  # no quoting in TSV: a quote character is part of the text
        return [(number, text.split("\t")) for number, text in good]
    return csv_rows(good, skips)


def csv_rows(good: list[tuple[int, str]], skips: Skips) -> list[tuple[int, list[str]]]:
    """(line number, cells) of CSV lines (number, text): quoted cells may hold commas and line breaks; a row that
    is not CSV goes to `skips`."""
    rows: list[tuple[int, list[str]]] = []
    reader = csv.reader(text + "\n" for _, text in good)  # the newline keeps multi-line quoted cells intact
    while True:
        start = reader.line_num  # index of the row's first physical line among the good lines
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as err:
            skips.add(f"bad CSV ({err})", good[min(start, len(good) - 1)][0])
            continue
        rows.append((good[start][0], cells))
    return rows


def _is_header(cells: list[str], names: set[str]) -> bool:
    lowered = [c.strip().lower() for c in cells]
    return all(c in names for c in lowered) and any(c in TEXT_NAMES + LABEL_NAMES for c in lowered)


def _column(header: list[str], wanted: str, aliases: tuple[str, ...]) -> int | None:
    lowered = [c.strip().lower() for c in header]
    for name in (wanted.lower(), *aliases):
        if name in lowered:
            return lowered.index(name)
    return None


def read_classification_file(path: str | Path, *, format: str | None = None, header: bool | None = None,
                             text_field: str = "text", text_pair_field: str = "text_pair",
                             label_field: str = "label", require_label: bool = True,
                             encoding: str = "utf-8") -> list[TextExample]:
    """Read `text[, text_pair], label` rows from TSV, CSV or JSONL (format from the suffix unless given).

    TSV/CSV: a header row is detected by its column names (text/sentence/..., label/category/...) unless
    `header` says; without one, 2 columns are text,label and 3 are text,text_pair,label. JSONL: one object
    per line with the given field names. Unusable rows are skipped and counted in one DataWarning.
    """
    path = Path(path)
    fmt = (format or {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}.get(path.suffix.lower(), "tsv")).lower()
    if fmt not in ("tsv", "csv", "jsonl"):
        raise InputError(f"unknown format {format!r} for {path}; use 'tsv', 'csv' or 'jsonl'")
    skips = Skips(path, "row")
    examples: list[TextExample] = []
    label_types = _LabelTypes(path)

    def add(number: int, text: object, pair: object, label: object) -> None:
        for what, value in (("text", text), ("text_pair", pair), ("label", label)):
            if isinstance(value, list | dict):  # str() would make a class called "['a']"
                skips.add(f"{what} is a JSON {'list' if isinstance(value, list) else 'object'}, not a string "
                          f"or number", number)
                return
        text = "" if text is None else str(text).strip()
        label = "" if label is None else label_types.text(label, number)
        if "\n" in label:  # a quoted CSV cell that ran on over the next lines: a quote was never closed
            skips.add("label runs over several lines (an unclosed quote?)", number)
        elif not text:
            skips.add("missing text", number)
        elif is_blank(text):
            skips.add("text of invisible characters only", number)
        elif require_label and not label:
            skips.add("missing label", number)
        else:
            pair = None if pair is None or is_blank(str(pair)) else str(pair).strip()
            examples.append(TextExample(text=text, label=label, text_pair=pair))

    if fmt == "jsonl":
        for number, obj in _json_objects(path, encoding, skips, "empty row"):
            add(number, obj.get(text_field), obj.get(text_pair_field), obj.get(label_field))
    else:
        rows = _rows(path, fmt, encoding, skips)
        names = set(TEXT_NAMES + PAIR_NAMES + LABEL_NAMES) | {n.lower() for n in (text_field, text_pair_field,
                                                                                  label_field)}
        has_header = bool(rows) and (_is_header(rows[0][1], names) if header is None else header)
        if has_header:
            head = rows.pop(0)[1]
            width = len(head)
            text_col = _column(head, text_field, TEXT_NAMES)
            pair_col = _column(head, text_pair_field, PAIR_NAMES)
            label_col = _column(head, label_field, LABEL_NAMES)
            if text_col is None:
                raise DataError(f"{path}: header {head} has no text column (looked for {text_field!r} "
                                f"or one of {', '.join(TEXT_NAMES)})")
        else:
            # the most common row width is the file's; rows of another width are ragged
            width = Counter(len(cells) for _, cells in rows).most_common(1)[0][0] if rows else 0
            text_col, pair_col, label_col = {1: (0, None, None), 2: (0, None, 1)}.get(width, (0, 1, 2))
        for number, cells in rows:
            if len(cells) != width:
                skips.add(f"ragged row ({len(cells)} columns, expected {width})", number)
                continue
            add(number, cells[text_col], None if pair_col is None else cells[pair_col],
                None if label_col is None else cells[label_col])
    if not examples and not skips.lines:
        warnings.warn(f"{path}: no examples (empty file)", DataWarning, stacklevel=2)
    skips.warn(len(examples))
    label_types.check()
    return examples


def read_conll(path: str | Path, *, encoding: str = "utf-8") -> list[TokenExample]:
    """Read CoNLL-style token tagging: `token ... tag` per line (first and last column), blank line between
    sentences, `-DOCSTART-` lines ignored. A sentence with an unusable line is skipped as a whole; a file
    mixing BIO's I- tags with BMES's M- tags is an error naming the first line of each."""
    skips = Skips(path, "sentence")
    examples: list[TokenExample] = []
    tokens: list[str] = []
    tags: list[str] = []
    problem: tuple[str, int] | None = None
    inside: dict[str, int] = {}  # "I-" (BIO, BIOES) or "M-" (BMES) -> the first line with such a tag
    invalid: list[tuple[int, str]] = []  # (line, tag) of tags that are not O or PREFIX-TYPE

    def end_sentence() -> None:
        nonlocal tokens, tags, problem
        if problem:
            skips.add(*problem)
        elif tokens:
            examples.append(TokenExample(tokens=tokens, tags=tags))
        tokens, tags, problem = [], [], None

    for number, line in decoded_lines(path, encoding):
        if line is None:
            problem = problem or ("undecodable bytes", number)
            continue
        cells = line.split()
        if not cells or is_blank(line):  # a line of invisible characters ends a sentence as a blank one does
            end_sentence()
        elif cells[0] == "-DOCSTART-":
            continue
        elif len(cells) < 2:
            problem = problem or ("missing tag", number)
        else:
            tokens.append(cells[0])
            tags.append(cells[-1])
            if cells[-1][:2] in ("I-", "M-"):
                inside.setdefault(cells[-1][:2], number)
            if not _ENTITY_TAG.fullmatch(cells[-1]):
                invalid.append((number, cells[-1]))
    end_sentence()
    if invalid:
        line, tag = invalid[0]
        raise DataError(f"{path}, line {line}: {tag!r} is not an entity tag ({len(invalid):,} such line"
                        f"{'s' if len(invalid) > 1 else ''}); a CoNLL tag is O or B-/I-/M-/E-/S- and a type, such "
                        "as B-PER, in the last column")
    if len(inside) == 2:  # "inside an entity" written two ways: entities would be cut apart wrongly
        raise DataError(f"{path} mixes tagging schemes: I- tags (BIO or BIOES, first on line {inside['I-']}) and "
                        f"M- tags (BMES, first on line {inside['M-']}); use one scheme for the whole file")
    if not examples and not skips.lines:
        warnings.warn(f"{path}: no sentences (empty file)", DataWarning, stacklevel=2)
    skips.warn(len(examples))
    return examples


def read_parallel(path: str | Path, *, encoding: str = "utf-8") -> list[tuple[str, str]]:
    """Read a parallel corpus: `source<TAB>target` per line; unusable lines are skipped and counted."""
    skips = Skips(path)
    pairs: list[tuple[str, str]] = []
    for number, line in _usable_lines(path, encoding, skips, "empty line"):
        if len(cells := line.split("\t")) != 2:
            skips.add("ragged row (expected 2 tab-separated columns)", number)
        elif is_blank(cells[0]) or is_blank(cells[1]):
            skips.add("empty side", number)
        else:
            pairs.append((cells[0].strip(), cells[1].strip()))
    if not pairs and not skips.lines:
        warnings.warn(f"{path}: no pairs (empty file)", DataWarning, stacklevel=2)
    skips.warn(len(pairs))
    return pairs



def read_pairs(path: str | Path, *, encoding: str = "utf-8") -> list[tuple[str, str]]:
    """Read source -> target pairs to learn to write: JSON Lines (`.jsonl`/`.json`: {"source": ..., "target": ...}
    per line) or, any other name, `source<TAB>target` per line (`read_parallel`); unusable lines are skipped and
    counted."""
    if Path(path).suffix.lower() not in (".jsonl", ".json"):
        return read_parallel(path, encoding=encoding)
    skips = Skips(path)
    pairs: list[tuple[str, str]] = []
    for number, obj in _json_objects(path, encoding, skips, "empty line"):
        if not {"source", "target"} <= set(obj):
            skips.add('a JSON object without "source" and "target"', number)
        elif any(not isinstance(obj[k], str) or is_blank(obj[k]) for k in ("source", "target")):
            skips.add("empty or non-text side", number)
        else:
            pairs.append((obj["source"].strip(), obj["target"].strip()))
    if not pairs and not skips.lines:
        warnings.warn(f"{path}: no pairs (empty file)", DataWarning, stacklevel=2)
    skips.warn(len(pairs))
    return pairs


class _LabelTypes:
    """The labels of one file as the class names they become, and a check that JSON gave them one way.

    A class is named by text, as a TSV file names it. JSON Lines can also give a label as a number or a boolean:
    numbers that are equal are one class, named as the whole number they are (1 and 1.0 are both class "1", as they
    are one value in JSON and in Python), and a fraction (0.5) is a score, not a class, so it is an error. Labels of
    different JSON types in one file are an error too, since whether true and 1, or "pos" and 1, are one class or
    two is a guess; only a string that is the very text the other type's labels become ("1" beside 1, "True" beside
    true) is taken as such a label, since the file cannot mean another class by it."""

    def __init__(self, path: str | Path) -> None:
        self.path = path
        self.seen: dict[tuple[str, str], tuple[int, object]] = {}  # (JSON type, class name) -> its first line, label

    def text(self, value: object, line: int) -> str:
        """The class name of one label (stripped text); a label that is a fraction is a DataError naming it."""
        if isinstance(value, float) and not value.is_integer():
            raise DataError(f"{self.path}, line {line}: the label {json.dumps(value)} is not a whole number: a "
                            "classifier's labels are class names or whole numbers (0, 1, 2, ...), not scores; give "
                            "each example its class")
        kind = "boolean" if isinstance(value, bool) else "number" if isinstance(value, int | float) else "string"
        text = str(int(value)) if kind == "number" else str(value).strip()
        if text:
            self.seen.setdefault((kind, text), (line, value))
        return text

    def check(self) -> None:
        """A DataError naming two labels of different JSON types, when the file's labels mix them."""
        kinds = {kind for kind, _ in self.seen}
        if len(kinds) < 2:
            return
        first = {kind: min(where for (k, _), where in self.seen.items() if k == kind) for kind in kinds}
        if {"number", "boolean"} <= kinds:
            clash = [first["boolean"], first["number"]]
        else:
            other = next(kind for kind in kinds if kind != "string")
            same = _WHOLE_NUMBER.fullmatch if other == "number" else {"True", "False"}.__contains__
            strays = [where for (kind, text), where in self.seen.items() if kind == "string" and not same(text)]
            if not strays:
                return
            clash = [min(strays), first[other]]
        shown = [f"{json.dumps(label, ensure_ascii=False)} ({_JSON_TYPE[type(label)]}, line {line})"
                 for line, label in sorted(clash, key=lambda where: where[0])]
        raise DataError(f"{self.path}: the labels mix JSON types, {shown[0]} and {shown[1]}: whether they are one "
                        "class or two is a guess; give every label as the same JSON type")


_WHOLE_NUMBER = re.compile(r"0|-?[1-9][0-9]*")  # how a whole number's class name is written ("1", never "01")
_JSON_TYPE = {str: "a string", int: "a number", float: "a number", bool: "a boolean"}
