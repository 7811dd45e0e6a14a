"""Whether a run's numbers can mean anything, measured on its data before it trains.

A figure can be exact and still mislead: masked-LM accuracy 0.79 on a corpus that is 83% [UNK] (guessing [UNK]
is easy), dev accuracy 1.0 for a classifier trained on one class, forty "classes" that are forty headlines read
from the wrong column, a vocabulary of 1,631 tokens where 50 were asked for. So pretraining, fine-tuning and
vocabulary building measure the same few things and say them the same way (`DataReport`):

- the unknown-token rate: the share of the text's tokens that the vocabulary does not know;
- the classes seen: how many, how many examples each, against how many examples;
- the size delivered against the size asked;
- the tokenizer against the model's embeddings: a token id past the embedding table, or most rows never used;
- the sequence length against the model's positions: a position past the position table.

A finding that leaves the figures meaningful but worse is a warning with its number; one that leaves them
meaningless (most tokens unknown, one class, a class per example) is an error, before any step is trained.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import DataError, InputError
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_write_text

REPORT_NAME = "data_report.json"
UNKNOWN_WARNING = 0.05   # a share of [UNK] tokens above this is said
UNKNOWN_ERROR = 0.5      # above this the model would mostly learn to say [UNK]
CLASS_PER_EXAMPLE = 0.5  # more classes than this share of the examples: the label column is not labels
UNUSED_EMBEDDINGS = 0.1  # a tokenizer leaving more than this share of the embedding rows unused is said


class DataQualityError(DataError):
    """Data from which a run's figures could not mean anything."""


class DataQualityWarning(UserWarning):
    """Data from which a run's figures mean less than they seem to; the message has the measured number."""


@dataclass
class DataReport:
    """What was measured on a run's data (`measured`), and what was found (`warnings`, `errors`).

    `check()` raises the first error as a DataQualityError and gives each warning as a DataQualityWarning;
    `save(directory)` writes the report as data_report.json beside the run's other records.
    """

    what: str                                    # e.g. "the training corpus", "the training data"
    measured: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _said: int = field(default=0, repr=False)    # warnings already given by `check`

    def unknown_tokens(self, unknown: int, total: int, vocabulary: str = "the vocabulary") -> DataReport:
        """The share of `total` tokens that are [UNK]: a warning above UNKNOWN_WARNING, an error above UNKNOWN_ERROR."""
        rate = unknown / total if total else 0.0
        self.measured.update(tokens=total, unknown_tokens=unknown, unknown_rate=round(rate, 6))
        said = (f"{rate:.1%} of {self.what}'s {total:,} tokens are [UNK] ({unknown:,}): {vocabulary} does not cover "
                "this text")
        if rate > UNKNOWN_ERROR:
            self.errors.append(f"{said}, so a model would mostly learn to guess [UNK] (and score well doing it); "
                               "use a vocabulary built from this text (bertkit vocab)")
        elif rate > UNKNOWN_WARNING:
            self.warnings.append(f"{said} well: every [UNK] is a token the model cannot tell apart from others")
        return self

    def classes(self, labels: Sequence[str], split: str = "training", other_column: Sequence[str] | None = None
                ) -> DataReport:
        """The classes of `labels` (one per example): one class, or about a class per example, is an error.

        `other_column`, the first column of a text file, names the likely mix-up when it looks like the labels.
        """
        counts = Counter(labels)
        self.measured.update({f"{split}_examples": len(labels), f"{split}_classes": len(counts)})
        if split == "training":
            self.measured["examples_per_class"] = dict(sorted(counts.items()))
        if len(counts) == 1:
            only = next(iter(counts))
            finding = (f"the {split} data has one class ({only!r}, all {len(labels):,} examples): "
                       + ("a classifier learns nothing from it, and scores 1.0 on data of that class; give "
                          "examples of at least 2 classes" if split == "training" else
                          "accuracy on it measures only how often the model says that class"))
            (self.errors if split == "training" else self.warnings).append(finding)
        elif len(labels) >= 10 and len(counts) > CLASS_PER_EXAMPLE * len(labels):
            hint = ""
            if other_column is not None and len(set(other_column)) <= CLASS_PER_EXAMPLE * len(other_column):
                hint = (f"; the first column has {len(set(other_column)):,} different values: if the file is "
                        "label<TAB>text (THUCNews's layout), put the text first or add a header row (label<TAB>text)")
            self.errors.append(f"the label column of the {split} data holds {len(counts):,} different values in "
                               f"{len(labels):,} examples: nearly every example would be a class of its own{hint}")
        return self

    def tags(self, tags: Iterable[Sequence[str]], split: str = "training") -> DataReport:
        """Token tags (NER): a training set with no entity tag at all is an error."""
        counts = Counter(tag for row in tags for tag in row)
        self.measured.update({f"{split}_tags": dict(sorted(counts.items()))})
        if split == "training" and counts and set(counts) == {"O"}:
            self.errors.append(f"the {split} data tags every token O: there is no entity to learn")
        return self

    def size(self, asked: int | None, delivered: int, what: str, holder: str, why_more: str = "",
             why_less: str = "") -> DataReport:
        """A size asked for against the size delivered (`holder` has `delivered` `what`: "the vocabulary", "tokens");
        a difference either way is a warning, with its reason."""
        self.measured.update({f"{what}_asked": asked, f"{what}_delivered": delivered})
        if asked is not None and delivered != asked:
            why = why_more if delivered > asked else why_less
            self.warnings.append(f"asked for {asked:,} {what}, {holder} has {delivered:,}{': ' + why if why else ''}")
        return self

    def tokenized(self, rows: Iterable[Sequence[int]], tokenizer: Any, vocabulary: str) -> DataReport:
        """`unknown_tokens` of rows of token ids made by `tokenizer` (its other special tokens not counted)."""
        return self.unknown_tokens(*count_unknown(rows, tokenizer.unk_token_id, tokenizer.all_special_ids), vocabulary)

    def check(self, stacklevel: int = 2) -> DataReport:
        """Raise the first error; give each warning not given yet (a report checked after each stage says each once)."""
        if self.errors:
            raise DataQualityError(self.errors[0])
        for message in self.warnings[self._said:]:
            warnings.warn(message, DataQualityWarning, stacklevel=stacklevel + 1)
        self._said = len(self.warnings)
        return self

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "measured": self.measured, "warnings": self.warnings, "errors": self.errors}

    def save(self, directory: str | os.PathLike) -> Path:
        """Write data_report.json into `directory`."""
        text = jsonfiles.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"
        return atomic_write_text(Path(directory) / REPORT_NAME, text)


def count_unknown(rows: Iterable[Sequence[int]], unk_token_id: int, special_ids: Iterable[int] = ()) -> tuple[int, int]:
    """([UNK] tokens, tokens) over rows of token ids, the other special tokens ([CLS], [SEP], padding) not counted."""
    special = set(special_ids) - {unk_token_id}
    unknown = total = 0
    for row in rows:
        unknown += row.count(unk_token_id) if isinstance(row, list) else sum(1 for t in row if t == unk_token_id)
        total += len(row) - (sum(1 for t in row if t in special) if special else 0)
    return unknown, total


def check_tokenizer_fits(tokenizer_size: int, vocab_size: int, where: str) -> None:
    """The tokenizer of a model directory against the model's embedding table: ids past the table are an error
    (they would index past it), a table mostly unused a warning (another model's tokenizer?)."""
    if tokenizer_size > vocab_size:
        raise DataQualityError(f"{where}: the tokenizer has {tokenizer_size:,} tokens, the model's embeddings "
                               f"{vocab_size:,} rows: ids from {vocab_size:,} on have no vector; is this the "
                               "model's own tokenizer?")
    unused = vocab_size - tokenizer_size
    if unused > UNUSED_EMBEDDINGS * vocab_size:
        warnings.warn(f"{where}: the tokenizer has {tokenizer_size:,} tokens, the model's embeddings {vocab_size:,} "
                      f"rows: {unused:,} of them ({unused / vocab_size:.0%}) are never used; is this the model's own "
                      "tokenizer?", DataQualityWarning, stacklevel=2)


def check_positions_fit(length: int, positions: int, flag: str, model: str) -> None:
    """The one check of a run's sequence length (`flag`, e.g. --max-length) against the positions of `model`
    (`positions`, its config's max_position_embeddings): a position past the table has no vector, so a longer
    length is an error that names both, before any text is tokenized for it."""
    if length > positions:
        raise InputError(f"{flag} {length} exceeds the {positions} positions of {model}")
