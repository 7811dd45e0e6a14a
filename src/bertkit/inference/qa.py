"""Extractive question answering: the answer span of each question in its context, with character offsets.

    answer_questions(model, tokenizer, ["Who founded it?"], ["It was founded by Ada in 1901."])
    # [{"answer": "Ada", "score": 0.93, "start": 18, "end": 21}]

Each context is cut into windows (bertkit.data.qa.qa_windows); the model scores every token of every window as
the answer's start and its end. In each window the `n_best` best starts and ends are paired (end not before start,
at most `max_answer_length` tokens); the span with the highest start + end logit over all windows of a question
is its answer (transformers' run_qa post-processing). A model fine-tuned with unanswerable questions (SQuAD 2.0)
answers "" when the null score, the lowest over the windows of [CLS]'s start + end logit, beats the best span by
more than `null_threshold`. `score` is p(start) · p(end) in the answer's window, each a softmax over that
window's context tokens (and [CLS] when the model can say "no answer"). `start`, `end` index the original
context: `context[start:end] == answer`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bertkit.data.qa import QAExample, QAWindow, qa_windows
from bertkit.errors import InputError
from bertkit.inference.batching import EncodedText, check_text_content, check_texts, run_sorted
from bertkit.inference.precision import for_inference
from bertkit.utils.visible import is_blank

DEFAULTS = {"max_length": 384, "doc_stride": 128, "max_answer_length": 30, "impossible": False}


def qa_settings(model: nn.Module, **given: Any) -> dict[str, Any]:
    """The window and decoding settings: those given, else those the model was fine-tuned with (config.qa),
    else DEFAULTS; max_length at most the model's positions, and a stride not given at most a third of it."""
    saved = getattr(model.config, "qa", None) or {}
    settings = {key: given[key] if given.get(key) is not None else saved.get(key, default)
                for key, default in DEFAULTS.items()}
    settings["max_length"] = min(settings["max_length"], model.config.max_position_embeddings)
    if given.get("doc_stride") is None:  # a shorter window than the saved or default one: a stride that fits it
        settings["doc_stride"] = min(settings["doc_stride"], settings["max_length"] // 3)
    return settings


@dataclass
class Span:
    """A candidate answer: its window, token positions there, character offsets and start + end logit."""

    window: int
    start_position: int
    end_position: int
    start: int
    end: int
    logit: float


def span_logits(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor
                ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per row of one padded batch of windows: (start logits, end logits) of its real tokens, float32. `predict`
    and the server (bertkit.inference.serving) both run this."""
    out = model(input_ids, attention_mask, token_type_ids)
    starts, ends = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
    return [(s[:n], e[:n]) for s, e, n in zip(starts, ends, attention_mask.sum(1).tolist())]


def window_rows(windows: Sequence[QAWindow]) -> list[EncodedText]:
    """What the model reads of each window."""
    return [EncodedText(w.input_ids, w.token_type_ids) for w in windows]


def window_logits(model: nn.Module, windows: Sequence[QAWindow], pad_token_id: int, batch_size: int = 32,
                  progress: bool | None = False) -> list[tuple[np.ndarray, np.ndarray]]:
    """(start logits, end logits) of every window, float32, from length-sorted batches, in window order."""
    def forward(input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> list:
        return span_logits(model, input_ids, attention_mask, token_type_ids)

    return run_sorted(model, window_rows(windows), forward, batch_size=batch_size, pad_token_id=pad_token_id,
                      progress=progress, desc="answer")


def window_spans(window: QAWindow, start_logits: np.ndarray, end_logits: np.ndarray, index: int = 0,
                 n_best: int = 20, max_answer_length: int = 30) -> list[Span]:
    """The candidate spans of one window: its `n_best` best starts × `n_best` best ends among its context
    tokens, end not before start, at most `max_answer_length` tokens long; best first."""
    first, stop = window.context_start, window.context_end
    if stop <= first:
        return []
    starts = first + np.argsort(-start_logits[first:stop], kind="stable")[:n_best]
    ends = first + np.argsort(-end_logits[first:stop], kind="stable")[:n_best]
    spans = []
    for s in starts:
        for e in ends:
            if s <= e < s + max_answer_length:
                spans.append(Span(index, int(s), int(e), window.offsets[s - first][0], window.offsets[e - first][1],
                                  float(start_logits[s] + end_logits[e])))
    return sorted(spans, key=lambda span: -span.logit)


def span_probabilities(window: QAWindow, start_logits: np.ndarray, end_logits: np.ndarray,
                       with_null: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """p(start), p(end) over the window's context tokens (and [CLS] first, `with_null`): softmaxes of the logits."""
    keep = ([0] if with_null else []) + list(range(window.context_start, window.context_end))

    def softmax(x: np.ndarray) -> np.ndarray:
        z = np.exp(x - x.max())
        return z / z.sum()

    return softmax(start_logits[keep].astype(np.float64)), softmax(end_logits[keep].astype(np.float64))


def decode(example: QAExample, windows: Sequence[QAWindow], logits: Sequence[tuple[np.ndarray, np.ndarray]],
           n_best: int = 20, max_answer_length: int = 30, impossible: bool = False,
           null_threshold: float = 0.0) -> dict[str, Any]:
    """The answer of one example from the logits of its windows: {"answer", "score", "start", "end", "window"}
    (start and end None for no answer)."""
    spans = [span for k, (window, (s, e)) in enumerate(zip(windows, logits))
             for span in window_spans(window, s, e, k, n_best, max_answer_length)]
    best = max(spans, key=lambda span: span.logit, default=None)
    null_window = int(np.argmin([s[0] + e[0] for s, e in logits])) if logits else 0
    null_logit = float(logits[null_window][0][0] + logits[null_window][1][0]) if logits else 0.0
    if best is None or (impossible and null_logit - best.logit > null_threshold):
        score = 0.0
        if impossible and logits:
            p_start, p_end = span_probabilities(windows[null_window], *logits[null_window], with_null=True)
            score = float(p_start[0] * p_end[0])
        return {"answer": "", "score": score, "start": None, "end": None, "window": null_window}
    window = windows[best.window]
    p_start, p_end = span_probabilities(window, *logits[best.window], with_null=impossible)
    shift = window.context_start - int(impossible)  # position -> index into the probabilities
    score = float(p_start[best.start_position - shift] * p_end[best.end_position - shift])
    # a byte-level BPE token spans the space it starts with ("Ġdog" is " dog"): the answer is the words, not it
    start, end = best.start, best.end
    while start < end and example.context[start].isspace():
        start += 1
    while end > start and example.context[end - 1].isspace():
        end -= 1
    return {"answer": example.context[start:end], "score": score, "start": start, "end": end, "window": best.window}


def answer_windows(model: nn.Module, examples: Sequence[QAExample], windows: Sequence[QAWindow], pad_token_id: int,
                   batch_size: int = 32, progress: bool | None = False, n_best: int = 20, max_answer_length: int = 30,
                   impossible: bool = False, null_threshold: float = 0.0) -> list[dict[str, Any]]:
    """The answer of every example (see `decode`) from windows made already (`qa_windows`), in example order."""
    logits = window_logits(model, windows, pad_token_id, batch_size, progress)
    return decode_examples(examples, windows, logits, n_best, max_answer_length, impossible, null_threshold)


def decode_examples(examples: Sequence[QAExample], windows: Sequence[QAWindow],
                    logits: Sequence[tuple[np.ndarray, np.ndarray]], n_best: int = 20, max_answer_length: int = 30,
                    impossible: bool = False, null_threshold: float = 0.0) -> list[dict[str, Any]]:
    """The answer of every example (see `decode`) from the logits of all windows (in window order)."""
    by_example: list[list[int]] = [[] for _ in examples]
    for k, window in enumerate(windows):
        by_example[window.example].append(k)
    return [decode(example, [windows[k] for k in ks], [logits[k] for k in ks], n_best, max_answer_length, impossible,
                   null_threshold) for example, ks in zip(examples, by_example)]


def answer_examples(model: nn.Module, tokenizer: Any, examples: Sequence[QAExample], batch_size: int = 32,
                    progress: bool | None = False, dtype: str | torch.dtype | None = None, n_best: int = 20,
                    null_threshold: float = 0.0, flags: bool = False, **settings: Any) -> list[dict[str, Any]]:
    """{"answer", "score", "start", "end"} of every example; `settings` (max_length, doc_stride, max_answer_length,
    impossible) override the model's own (`qa_settings`). A doc_stride not given is lowered where a long question
    leaves a window less context than the stride (`qa_windows`' fit_stride); `flags`: errors name the command
    line's flags (--max-length, --doc-stride)."""
    windows = _windows(model, tokenizer, examples, settings, flags)
    settings = qa_settings(model, **settings)
    results = answer_windows(for_inference(model, dtype), examples, windows, tokenizer.pad_token_id, batch_size,
                             progress, n_best, settings["max_answer_length"], settings["impossible"], null_threshold)
    return [{key: value for key, value in result.items() if key != "window"} for result in results]


def _windows(model: nn.Module, tokenizer: Any, examples: Sequence[QAExample], given: dict[str, Any],
             flags: bool) -> list[QAWindow]:
    """The examples' windows as `qa_settings` sets them; the user chose the stride only if it was given."""
    settings = qa_settings(model, **given)
    return qa_windows(examples, tokenizer, settings["max_length"], settings["doc_stride"], labels=False,
                      fit_stride=given.get("doc_stride") is None, flags=flags)


def check_questions(questions: Sequence[str], contexts: Sequence[str]) -> tuple[list[str], list[str]]:
    """The questions and contexts as lists of str, one context per question; an empty one is an error."""
    questions = check_texts(questions, "questions", content=False)
    contexts = check_texts(contexts, "contexts", content=False)
    if len(questions) != len(contexts):
        raise InputError(f"{len(questions)} questions but {len(contexts)} contexts: give one context per question")
    for name, texts in (("questions", questions), ("contexts", contexts)):
        empty = next((i for i, text in enumerate(texts) if is_blank(text)), None)
        if empty is not None:
            raise InputError(f"{name}[{empty}] is empty: there is nothing to " +
                             ("ask" if name == "questions" else "find an answer in"))
        check_text_content(texts, name)  # undecoded bytes
    return questions, contexts


def answer_questions(model: nn.Module, tokenizer: Any, questions: Sequence[str] | str, contexts: Sequence[str] | str,
                     **options: Any) -> list[dict[str, Any]] | dict[str, Any]:
    """{"answer", "score", "start", "end"} per question in its context (one dict for one question given as a
    str); options as `answer_examples`. An empty question or context is an error."""
    single = isinstance(questions, str)
    if single != isinstance(contexts, str):
        raise InputError("give one question and one context, or a list of each")
    questions, contexts = check_questions([questions] if single else questions, [contexts] if single else contexts)
    # the question itself names it where a message must (a question too long for the window): it has no id here
    examples = [QAExample(_shortened(q), q, c) for q, c in zip(questions, contexts)]
    results = answer_examples(model, tokenizer, examples, **options)
    return results[0] if single else results


def _shortened(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def explain_answer(model: nn.Module, tokenizer: Any, question: str, context: str, flags: bool = False,
                   **settings: Any) -> dict[str, Any]:
    """One question's answer with what it was chosen from: the answer's window as context pieces (the characters
    of each token), p(start) and p(end) over them, and the answer's first and last piece ({"answer", "score",
    "start", "end", "pieces", "start_probabilities", "end_probabilities", "first", "last"}; first and last None
    for no answer). With a model that can say "no answer", the first piece is [CLS]."""
    check_questions([question], [context])
    example = QAExample(_shortened(question), question, context)
    windows = _windows(model, tokenizer, [example], settings, flags)
    settings = qa_settings(model, **settings)
    logits = window_logits(model, windows, tokenizer.pad_token_id)
    result = decode(example, windows, logits, max_answer_length=settings["max_answer_length"],
                    impossible=settings["impossible"])
    k = result.pop("window")
    window = windows[k]
    p_start, p_end = span_probabilities(window, *logits[k], with_null=settings["impossible"])
    pieces = (["[CLS]"] if settings["impossible"] else []) + [context[s:e] for s, e in window.offsets]
    first = last = None
    if result["start"] is not None:
        shift = int(settings["impossible"])
        first = shift + next(k for k, (s, e) in enumerate(window.offsets) if e > result["start"])
        last = shift + max(k for k, (s, e) in enumerate(window.offsets) if s < result["end"])
    return {**result, "pieces": pieces, "start_probabilities": p_start, "end_probabilities": p_end,
            "first": first, "last": last}
