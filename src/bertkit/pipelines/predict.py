"""What `bertkit predict`, `encode` and `evaluate` do around `bertkit.inference`: load a model directory,
read input files, and score a fine-tuned model on labelled data (a named source or the user's file): a
classifier's accuracy, a tagger's entity F1, a reader's exact match and F1 (extractive QA).

    model, tokenizer = load_text_model(DIR)    # bertkit.inference.loading: the class config.json names
    evaluate(model, tokenizer, "inews", split="test")
    # {"task": "classification", "examples": 999, "accuracy": ..., "macro_f1": ...}
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bertkit.data.lines import readable
from bertkit.data.readers import DataWarning, Skips, iter_decoded_lines
from bertkit.errors import DataError, InputError
from bertkit.inference import batching
from bertkit.inference.loading import task_of_model
from bertkit.utils import jsonfiles
from bertkit.utils.visible import is_blank


class EvaluationDataError(DataError):
    """Evaluation data that does not fit the model: labels it does not know."""


class InputFile:
    """A file of texts, one per line (in a .tsv file a second column, after a tab, is the text's pair), read as a
    stream: `chunks()` gives its texts CHUNK_TEXTS at a time, so a file of any length runs in bounded memory.

    Blank, undecodable and ragged lines are skipped and counted in one DataWarning at the end of a pass; a file
    with no text, or one that is not text in `encoding`, is an error. `count()` is the number of texts (a pass that
    keeps none of them), for a progress bar and for the rows of a .npy file written as the vectors come.
    """

    def __init__(self, path: str | os.PathLike, encoding: str = "utf-8") -> None:
        path = Path(path)
        if path.is_dir():
            raise InputError(f"input file {path} is a directory; give a file with one text per line")
        if not readable(path):
            raise FileNotFoundError(f"input file {path} does not exist")
        self.path, self.encoding, self.tsv = path, encoding, path.suffix.lower() == ".tsv"

    def _texts(self, warn: bool) -> Iterator[tuple[str, str | None]]:
        skipped: dict[str, list[int]] = {}
        kept = 0
        for number, line in iter_decoded_lines(self.path, self.encoding):
            if line is None:
                skipped.setdefault("undecodable bytes", []).append(number)
                continue
            text, _, pair = line.partition("\t") if self.tsv else (line, "", "")
            if is_blank(text):
                skipped.setdefault("blank", []).append(number)
                continue
            if self.tsv and "\t" in pair:
                skipped.setdefault("more than 2 columns", []).append(number)
                continue
            kept += 1
            yield text.strip(), None if is_blank(pair) else pair.strip()
        if not kept:
            unusable = sum(map(len, skipped.values()))
            raise InputError(f"input file {self.path} has no texts"
                             + (" (empty file)" if not skipped else f" ({unusable} unusable lines)"))
        if skipped and warn:
            count = sum(map(len, skipped.values()))
            parts = [f"{reason} (line{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers[:5]))}"
                     f"{' ...' if len(numbers) > 5 else ''})" for reason, numbers in skipped.items()]
            warnings.warn(f"{self.path}: skipped {count} line{'s' if count > 1 else ''}, kept {kept}: "
                          + "; ".join(parts), DataWarning, stacklevel=3)

    def count(self) -> int:
        """The number of texts the file holds (read once, nothing kept)."""
        return sum(1 for _ in self._texts(warn=False))

    def chunks(self, size: int | None = None) -> Iterator[tuple[list[str], list[str | None] | None]]:
        """(texts, their pairs or None when no line of the chunk has one), `size` (CHUNK_TEXTS) texts at a time:
        the chunks `encode` and `predict` cut a list of the same texts into, so both give the same results."""
        size = size or batching.CHUNK_TEXTS
        texts: list[str] = []
        pairs: list[str | None] = []
        for text, pair in self._texts(warn=True):
            texts.append(text)
            pairs.append(pair)
            if len(texts) == size:
                yield texts, pairs if any(p is not None for p in pairs) else None
                texts, pairs = [], []
        if texts:
            yield texts, pairs if any(p is not None for p in pairs) else None


def read_inputs(path: str | os.PathLike, encoding: str = "utf-8") -> tuple[list[str], list[str | None] | None]:
    """Every text of a file (and its pair, in a .tsv file), as `InputFile` reads them, in lists."""
    texts: list[str] = []
    pairs: list[str | None] = []
    for chunk, chunk_pairs in InputFile(path, encoding).chunks():
        texts += chunk
        pairs += chunk_pairs or [None] * len(chunk)
    return texts, pairs if any(pair is not None for pair in pairs) else None


def read_questions(path: str | os.PathLike, encoding: str = "utf-8") -> tuple[list[str], list[str], list[str]]:
    """(ids, questions, contexts) of a JSON Lines file of {"question": ..., "context": ...} objects (an "id" is
    kept; the line number stands in for a missing one). Lines that are not such an object, or whose question or
    context is empty, are skipped and counted in one DataWarning; a file with none is an error."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"input file {path} is a directory; give a JSON Lines file of {{\"question\", \"context\"}}")
    if not readable(path):
        raise FileNotFoundError(f"input file {path} does not exist")
    ids: list[str] = []
    questions: list[str] = []
    contexts: list[str] = []
    skips = Skips(path)
    for number, line in iter_decoded_lines(path, encoding):
        if line is None or is_blank(line):
            skips.add("undecodable bytes" if line is None else "blank", number)
            continue
        try:
            record = jsonfiles.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            skips.add("not a JSON object", number)
            continue
        question, context = record.get("question"), record.get("context")
        if not isinstance(question, str) or is_blank(question):
            skips.add("no question", number)
        elif not isinstance(context, str) or is_blank(context):
            skips.add("no context", number)
        else:
            ids.append(str(record.get("id", number)))
            questions.append(question.strip())
            contexts.append(context)
    skips.warn(len(questions))
    if not questions:
        raise InputError(f"input file {path} has no question with a context: give one JSON object per line, "
                         '{"question": ..., "context": ...}')
    return ids, questions, contexts


# ---- evaluation ----------------------------------------------------------------------------------

def check_evaluation_labels(found: set[str], labels: list[str], data: str) -> None:
    """An EvaluationDataError naming the labels of `data` (`found`) that are not among the model's `labels`."""
    unknown = sorted(found - set(labels))
    if unknown:
        shown = ", ".join(repr(label) for label in unknown[:5]) + (f" and {len(unknown) - 5} more"
                                                                   if len(unknown) > 5 else "")
        raise EvaluationDataError(f"{data}: label{'s' if len(unknown) > 1 else ''} {shown} not among the model's "
                                  f"labels ({', '.join(labels)})")


def evaluate(model: Any, tokenizer: Any, data: str, split: str = "test", batch_size: int = 32,
             max_length: int | None = None, truncation: bool = True, progress: bool | None = False,
             dtype: str | None = None, encoding: str = "utf-8", flags: bool = False) -> dict[str, Any]:
    """Accuracy and macro-F1 of a classifier, entity P/R/F1 of a tagger, or exact match and F1 of a reader, on
    `data` (source name or file, read as `encoding`): the model's task (its record, bertkit.tasks) scores it.
    `dtype` runs a converted copy of the model (bertkit.inference.precision); `flags`: a reader's window errors
    name the command line's flags (--max-length)."""
    task = task_of_model(model, "evaluate")
    return task.evaluate(model, tokenizer, data, split, encoding, flags, batch_size=batch_size, max_length=max_length,
                         truncation=truncation, progress=progress, dtype=dtype)
