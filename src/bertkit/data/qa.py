"""Extractive question answering data: SQuAD-format files, the named QA sets, and the windows a model reads.

A SQuAD-format file (SQuAD v1.1 / v2.0, CMRC 2018, DRCD, DuReader-robust, XQuAD all use it) is

    {"data": [{"title": ..., "paragraphs": [{"context": ...,
               "qas": [{"id": ..., "question": ..., "answers": [{"text": ..., "answer_start": 42}],
                        "is_impossible": false}]}]}]}

with `answer_start` a character offset into `context`. `read_squad` turns it into `QAExample`s.

A model reads [CLS] question [SEP] context window [SEP]. A context longer than the window is cut into windows
that overlap by `doc_stride` tokens (transformers' `stride`: run_qa.py's windows, token for token), so every
answer lies whole inside at least one window unless it is longer than the overlap. Each window keeps the
character offsets of its context tokens, so a span of tokens maps back to the exact characters of the context.
For training, a window is labelled with the token positions of the answer's first and last tokens, or with
position 0 ([CLS]) when the answer does not lie whole inside it, or the question has no answer (SQuAD 2.0).
"""

from __future__ import annotations

import bisect
import json
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.data.lines import NotTextError, check_example_file, check_not_binary
from bertkit.data.readers import DataWarning, Skips
from bertkit.errors import DataError, InputError
from bertkit.utils import jsonfiles
from bertkit.utils.visible import is_blank

QA_DATASETS = ("squad-excerpt", "xquad-en", "xquad-zh")  # named sets of the source "squad-excerpt"
MAX_QUERY_LENGTH = 64  # question tokens kept at most (BERT's run_squad.py); the rest of the window is context
SPECIAL_TOKENS = 3     # [CLS] question [SEP] context [SEP]
SQUAD_SHAPE = ('{"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question", '
               '"answers": [{"text", "answer_start"}]}]}]}]}')


@dataclass(frozen=True)
class Answer:
    """A reference answer: its text and where it starts in the context (characters)."""

    text: str
    start: int

    @property
    def end(self) -> int:
        return self.start + len(self.text)


@dataclass
class QAExample:
    """One question on one context, with its reference answers (none for an unanswerable question)."""

    id: str
    question: str
    context: str
    answers: list[Answer] = field(default_factory=list)
    is_impossible: bool = False
    title: str = ""


# ---- SQuAD-format files --------------------------------------------------------------------------

class NotSquadError(DataError):
    """A file that is not SQuAD-format JSON."""


def _not_squad(path: Any, what: str) -> NotSquadError:
    return NotSquadError(f"{path} is not SQuAD-format JSON: {what}; expected {SQUAD_SHAPE}")


def _load_json(path: Path, encoding: str) -> Any:
    data = path.read_bytes()
    check_not_binary(path, data, encoding)
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as err:
        raise NotTextError(f"{path} is not {encoding} text: bytes at byte {err.start} do not decode (give its "
                           "encoding with --encoding)") from None
    try:
        return jsonfiles.loads(text.removeprefix("\ufeff"))
    except json.JSONDecodeError as err:
        first = text.lstrip()[:1]
        hint = " (one JSON object per line is JSON Lines: predict reads that, training needs SQuAD JSON)" if (
            first == "{" and "Extra data" in err.msg) else ""
        raise _not_squad(path, f"not JSON ({err.msg} at line {err.lineno} column {err.colno}){hint}") from None


_NOT_ANSWERS = "answers that are not a list of {text, answer_start}"


def _answers(raw: Any, need_offsets: bool) -> list[Answer] | str:
    """The answers of one question, or why they cannot be used: not a list of {"text": str, "answer_start": int}
    (an answer_start may be missing where the offsets are not needed: -1 stands in for it)."""
    if not isinstance(raw, list):
        return _NOT_ANSWERS
    answers = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            return _NOT_ANSWERS
        if "answer_start" not in item and need_offsets:
            return 'an answer without "answer_start"'
        start = _offset(item.get("answer_start", -1))
        if start is None:
            return "an answer_start that is not a whole number"
        answers.append(Answer(item["text"], start))
    return answers


def _offset(value: Any) -> int | None:
    """An answer_start as the int it stands for, or None: conversions write the offset as text ("12") or, through a
    table with missing values, as a float (12.0); a fraction, a boolean or anything else is no offset."""
    if isinstance(value, str) and re.fullmatch(r"\s*-?[0-9]+\s*", value):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_TRUE, _FALSE = ("true", "1"), ("false", "0")


def _impossible(value: Any, path: Any, qid: str) -> bool:
    """`is_impossible` as a bool. Converted files write it as text ("false") or as 0/1, and Python would call any
    non-empty text true, so that "false" made a question unanswerable: these are read as what they say, null as
    absent (false), and any other value is an error naming the question, since guessing it would train or score the
    question wrongly."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise DataError(f"{path}: question {qid}: is_impossible is {value!r}, not true or false (a boolean, "
                    '"true"/"false" or 0/1); fix the file')


def read_squad(path: str | os.PathLike, *, need_offsets: bool = True, encoding: str = "utf-8") -> list[QAExample]:
    """The questions of a SQuAD-format JSON file, in file order.

    With `need_offsets` (training) an answer whose `answer_start` does not point at its text in the context is
    left out, and a question left with none is skipped; for evaluation only the answer texts count (as in the
    official scripts). Questions that cannot be used (a missing or empty question or context, missing or malformed
    answers, a repeated id, no answer and not marked `is_impossible`) are skipped and counted in one DataWarning
    naming the first few ids by reason. A file that is not SQuAD JSON, or has no usable question, is an error.
    """
    path = Path(path)
    check_example_file(path, "to train on" if need_offsets else "to evaluate on", "SQuAD-format JSON", QA_DATASETS)
    data = _load_json(path, encoding)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        got = f"a top-level {type(data).__name__}" if not isinstance(data, dict) else \
            f"no \"data\" list (keys: {', '.join(list(data)[:5]) or 'none'})"
        raise _not_squad(path, got)
    examples: list[QAExample] = []
    skipped, seen = Skips(path, "question", "id"), set()
    for a, article in enumerate(data["data"]):
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise _not_squad(path, f"data[{a}] has no \"paragraphs\" list")
        title = str(article.get("title", ""))
        for p, paragraph in enumerate(article["paragraphs"]):
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
                raise _not_squad(path, f"data[{a}].paragraphs[{p}] has no \"qas\" list")
            context = paragraph.get("context")
            for q, qa in enumerate(paragraph["qas"]):
                if not isinstance(qa, dict):
                    raise _not_squad(path, f"data[{a}].paragraphs[{p}].qas[{q}] is not an object")
                qid = str(qa.get("id", f"data[{a}].paragraphs[{p}].qas[{q}]")).strip()
                example = _question(qa, qid, context, title, need_offsets, skipped)
                if example is None:
                    continue
                if qid in seen:
                    skipped.add("an id seen before", qid)
                    continue
                seen.add(qid)
                examples.append(example)
    skipped.warn(len(examples))
    if not examples:
        raise InputError(f"{path} has no usable questions" + (" (see the warning)" if skipped else ""))
    return examples


def _question(qa: dict, qid: str, context: Any, title: str, need_offsets: bool,
              skipped: Skips) -> QAExample | None:
    """One question of a file as a QAExample, or None (counted in `skipped`) when it cannot be used."""
    question, impossible = qa.get("question"), _impossible(qa.get("is_impossible"), skipped.path, qid)
    problem = ('no "question"' if question is None else
               "a question that is not a string" if not isinstance(question, str) else
               "an empty question" if is_blank(question) else
               'no "context" in its paragraph' if context is None else
               "a context that is not a string" if not isinstance(context, str) else
               "an empty context" if is_blank(context) else
               'no "answers", and not marked is_impossible' if "answers" not in qa and not impossible else None)
    answers = [] if impossible or problem else _answers(qa["answers"], need_offsets)
    if isinstance(answers, str):
        problem = answers
    if problem:
        skipped.add(problem, qid)
        return None
    if not impossible and all(is_blank(answer.text) for answer in answers):
        skipped.add("no answer, and not marked is_impossible", qid)
        return None
    if need_offsets:
        # a negative offset would slice from the context's end, and could match there by chance
        answers = [answer for answer in answers if not is_blank(answer.text) and answer.start >= 0
                   and context[answer.start:answer.end] == answer.text]
        if not answers and not impossible:
            skipped.add("an answer_start that does not point at the answer in the context", qid)
            return None
    return QAExample(qid, question.strip(), context, answers, impossible, title)


# ---- the named sets ------------------------------------------------------------------------------

def load_qa(name: str) -> dict[str, list[QAExample]]:
    """The splits of a named QA set (all from the source "squad-excerpt"):

    - "squad-excerpt": train = the first two articles of SQuAD v1.1 train (University_of_Notre_Dame, Beyoncé;
      1,027 questions), dev = XQuAD's English (153 questions on 5 SQuAD v1.1 *dev* articles: no overlap);
    - "xquad-en": test = those 153 English questions;
    - "xquad-zh": test = the same 153 questions and paragraphs in XQuAD's professional Chinese translation.
    """
    from bertkit.data import sources

    files = {"squad-excerpt": {"train": "squad-v1.1-train-excerpt.json", "dev": "xquad.en.json"},
             "xquad-en": {"test": "xquad.en.json"}, "xquad-zh": {"test": "xquad.zh.json"}}
    if name not in files:
        raise InputError(f"unknown QA dataset {name!r}; known: {', '.join(QA_DATASETS)}")
    directory = sources.fetch("squad-excerpt")
    return {split: read_squad(directory / file) for split, file in files[name].items()}


def sample_file(name: str, split: str) -> Path:
    """A file of the CMRC 2018 or DRCD samples in the source "squad-excerpt" ("cmrc2018"/"drcd", "train"/"dev"/...):
    the first records of the official files, for checking loaders and metrics."""
    from bertkit.data import sources

    path = sources.fetch("squad-excerpt") / f"{name}-sample" / f"{split}.json"
    if not path.is_file():
        raise InputError(f"no {name} sample split {split!r}")
    return path


# ---- windows -------------------------------------------------------------------------------------

@dataclass
class QAWindow:
    """One window of one example: what the model reads and how its context tokens map back to characters."""

    example: int                      # index of its example
    input_ids: list[int]
    token_type_ids: list[int]
    context_start: int                # position of the window's first context token in input_ids
    offsets: list[tuple[int, int]]    # [start, end) characters in the context, per context token of the window
    start_position: int = 0           # answer's first / last token position, 0 ([CLS]) when not inside the window
    end_position: int = 0

    @property
    def context_end(self) -> int:
        """Position after the window's last context token (that of the final [SEP])."""
        return self.context_start + len(self.offsets)


def check_window(max_length: int, doc_stride: int, question_tokens: int = 1, question: str | None = None,
                 flags: bool = False) -> None:
    """Refuse a window size and stride that leave no context after a question of `question_tokens` tokens, or no
    new context per window (`flags`: name them as the command line does)."""
    length, stride = ("--max-length", "--doc-stride") if flags else ("max_length", "doc_stride")
    room = max_length - question_tokens - SPECIAL_TOKENS
    which = f"question {question!r} takes {question_tokens} tokens" if question is not None else \
        f"a question of {question_tokens} token{'s' if question_tokens > 1 else ''}"
    if room < 1:
        raise InputError(f"{length} {max_length} leaves no room for the context: {which}, and [CLS], [SEP], [SEP] "
                         f"3 more; raise {length}" + (" or shorten the question" if question is not None else ""))
    if not 0 <= doc_stride < room:
        raise InputError(f"{stride} {doc_stride} must be at least 0 and less than the context tokens a window "
                         f"holds ({room} = {length} {max_length} - {question_tokens} question tokens - "
                         f"{SPECIAL_TOKENS} special tokens, where {which}), so that each window reaches past the "
                         f"last; lower {stride} or raise {length}")


def _window_starts(count: int, room: int, doc_stride: int) -> list[int]:
    """First context token of each window: windows of `room` tokens, each overlapping the last by `doc_stride`."""
    starts = [0]
    while starts[-1] + room < count:
        starts.append(starts[-1] + room - doc_stride)
    return starts


def token_span(offsets: Sequence[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """(first, last) token whose characters overlap [start, end), or None when no token does (white space)."""
    ends = [e for _, e in offsets]
    first = bisect.bisect_right(ends, start)                 # the first token ending after `start`
    last = bisect.bisect_left([s for s, _ in offsets], end) - 1  # the last token starting before `end`
    return (first, last) if first <= last else None


def _fitted(max_length: int, doc_stride: int, question_tokens: int) -> int:
    """The stride, lowered where needed to less than the context tokens a window holds after this question."""
    room = max_length - question_tokens - SPECIAL_TOKENS
    return min(doc_stride, room - 1) if room >= 1 else doc_stride


def qa_windows(examples: Sequence[QAExample], tokenizer: Any, max_length: int = 384, doc_stride: int = 128,
               labels: bool = True, fit_stride: bool = False, flags: bool = False) -> list[QAWindow]:
    """The windows of every example, in example order; with `labels`, each labelled with the first answer's
    token positions (or 0, [CLS], where the answer is not whole inside it or there is none).

    Questions are cut to their first MAX_QUERY_LENGTH tokens (one warning counts them). A context is tokenized
    once however many questions it has. A stride that leaves a window no new context is an error, unless
    `fit_stride` (a stride nobody chose: a default, or the one the model was fine-tuned with): then it is lowered
    to fit for the questions that need it, and only a window too short for the question itself is an error.
    `flags`: errors name --max-length and --doc-stride, as the command line calls them.
    """
    check_window(max_length, _fitted(max_length, doc_stride, 1) if fit_stride else doc_stride, flags=flags)
    if not examples:
        return []
    questions = tokenizer([e.question for e in examples], add_special_tokens=False, return_token_type_ids=False,
                          return_attention_mask=False, verbose=False)["input_ids"]
    unique = list(dict.fromkeys(e.context for e in examples))
    encoded = tokenizer(unique, add_special_tokens=False, return_token_type_ids=False, return_attention_mask=False,
                        return_offsets_mapping=True, verbose=False)
    context_tokens = {text: (ids, [tuple(span) for span in spans])
                      for text, ids, spans in zip(unique, encoded["input_ids"], encoded["offset_mapping"])}
    long_questions = [e.id for e, ids in zip(examples, questions) if len(ids) > MAX_QUERY_LENGTH]
    if long_questions:
        warnings.warn(f"{len(long_questions)} of {len(examples)} questions are longer than {MAX_QUERY_LENGTH} tokens "
                      f"(the first is id {long_questions[0]}): cut to their first {MAX_QUERY_LENGTH}", DataWarning,
                      stacklevel=2)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    windows = []
    for index, (example, question) in enumerate(zip(examples, questions)):
        question = question[:MAX_QUERY_LENGTH]
        stride = _fitted(max_length, doc_stride, len(question)) if fit_stride else doc_stride
        check_window(max_length, stride, len(question), example.id, flags)
        ids, offsets = context_tokens[example.context]
        room = max_length - len(question) - SPECIAL_TOKENS
        span = None
        if labels and example.answers and not example.is_impossible:
            answer = example.answers[0]
            span = token_span(offsets, answer.start, answer.end)
        head = [cls, *question, sep]
        for first in _window_starts(len(ids), room, stride):
            last = min(first + room, len(ids))
            window = QAWindow(index, head + ids[first:last] + [sep], [0] * len(head) + [1] * (last - first + 1),
                              len(head), offsets[first:last])
            if span is not None and first <= span[0] and span[1] < last:
                window.start_position = len(head) + span[0] - first
                window.end_position = len(head) + span[1] - first
            windows.append(window)
    return windows
