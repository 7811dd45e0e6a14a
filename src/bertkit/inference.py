"""Fast inference: sentence vectors (`encode`) and task predictions (`predict`), no compute spent on padding.

Every call tokenizes its texts once, sorts them by length and cuts the sorted list into batches, each
padded only to its own longest row: a batch of short texts then costs what short texts cost, instead of
being padded to the one long text that happened to share its batch. A batch whose rows are all the same
length has no padding at all, and the model runs attention without a mask, its fastest path. Results go
back in input order. `benchmarks/bench_inference.py` measures the gain against input-order batches.

    vectors = encode(model, tokenizer, ["今天天气很好", "明天会下雨"], pooling="mean", normalize=True)
    predict(classifier, tokenizer, ["这家店很好"])
    # [{"label": "positive", "score": 0.97, "probabilities": {"negative": 0.03, "positive": 0.97}}]
    predict(tagger, tokenizer, ["张三在北京工作"])
    # [[{"entity": "PER", "start": 0, "end": 2, "text": "张三", "score": 0.99}, {"entity": "LOC", ...}]]

Entity spans are character offsets into the original text. A word takes the tag of its first sub-token.

`dtype="bfloat16"` or `"int8"` runs a converted copy of the model (bertkit.precision); the outputs are float32
either way. Convert once with `precision.for_inference(model, dtype)` to skip the conversion on every call.
A library call draws no progress bar unless asked (`progress=True`); the command line asks for one on long
inputs drawn to a terminal (`progress=None`).
"""

from __future__ import annotations

import bisect
import itertools
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from bertkit.data.entities import get_entities
from bertkit.precision import for_inference
from bertkit.task_kinds import task_of_model

POOLINGS = ("cls", "mean")
PROGRESS_MIN_TEXTS = 1000  # progress=None: fewer texts than this finish before a progress bar would tell anything


class TruncationWarning(UserWarning):
    """Some texts were longer than the model's positions (or max_length) and were cut to fit."""


class EmptyTextWarning(UserWarning):
    """Some texts are empty or only white space: they have no tokens, so their results mean nothing."""


class InputTooLongError(ValueError):
    """A text is longer than the model's positions (or max_length) and truncation is off."""


class NonFiniteOutputError(ValueError, FloatingPointError):
    """The model's output for a text holds NaN or infinite values: no prediction is made from it (a trainer
    evaluating a diverging model catches it as the FloatingPointError it is)."""


@dataclass
class EncodedText:
    """One tokenized input, unpadded: ids, token types and (for tagging) character offsets per token."""

    input_ids: list[int]
    token_type_ids: list[int]
    offsets: list[tuple[int, int]] | None = None


# ---- inputs --------------------------------------------------------------------------------------

def check_texts(texts: Any, name: str = "texts", content: bool = True) -> list[str]:
    """`texts` as a list of str, or a clear error for an empty batch or an item that is not text (with `content`,
    also for an empty one: `check_text_content`)."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        raise ValueError(f"{name} must be a list of str, not {type(texts).__name__}")
    texts = list(texts)
    if not texts:
        raise ValueError(f"{name} is empty: give at least one text")
    bad = next((i for i, text in enumerate(texts) if not isinstance(text, str)), None)
    if bad is not None:
        raise ValueError(f"{name}[{bad}] is {type(texts[bad]).__name__} ({texts[bad]!r:.40}), not str: "
                         f"every item must be a text")
    if content:
        check_text_content(texts, name)
    return texts


def check_text_content(texts: Sequence[str | None], name: str = "texts") -> None:
    """An EmptyTextWarning counting the texts that are empty or only white space (they have no tokens: what is
    made for them is made from [CLS] and [SEP] alone, the same for every such text), and a clear error for a text
    holding lone surrogates (undecoded bytes, which no tokenizer reads)."""
    empty = [i for i, text in enumerate(texts) if text is not None and not text.strip()]
    if empty:
        verb = "are" if len(empty) > 1 else "is"
        warnings.warn(f"{len(empty):,} of {len(texts):,} {name} {verb} empty or only white space (the first is "
                      f"{name}[{empty[0]}]): with no tokens, each gets what [CLS] [SEP] alone gets", EmptyTextWarning,
                      stacklevel=4)
    for i, text in enumerate(texts):
        if text is None:
            continue
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                raise ValueError(f"{name}[{i}] is not valid text: it holds undecoded bytes (lone surrogate "
                                 f"{text[err.start]!r} at character {err.start}); decode it with its encoding "
                                 "first") from None


def _check_pairs(pairs: Any, count: int) -> list[str | None] | None:
    if pairs is None:
        return None
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
        raise ValueError(f"text_pairs must be a list of str (or None), not {type(pairs).__name__}")
    pairs = list(pairs)
    if len(pairs) != count:
        raise ValueError(f"{count} texts but {len(pairs)} text_pairs: give one pair per text (None for no pair)")
    bad = next((i for i, pair in enumerate(pairs) if pair is not None and not isinstance(pair, str)), None)
    if bad is not None:
        raise ValueError(f"text_pairs[{bad}] is {type(pairs[bad]).__name__}, not str or None")
    check_text_content(pairs, "text_pairs")
    return pairs


def _encoder(model: nn.Module) -> nn.Module:
    """The BertModel that makes the hidden states: the model itself, or the `bert` inside a task model."""
    return getattr(model, "bert", model)


def _limit(model: nn.Module, max_length: int | None) -> tuple[int, str]:
    """The longest input the model takes, and how to name that limit in messages."""
    positions = _encoder(model).config.max_position_embeddings
    if max_length is None or max_length >= positions:
        return positions, f"the model's {positions} positions"
    if max_length < 2:
        raise ValueError(f"max_length must be at least 2 ([CLS] and [SEP]), got {max_length}")
    return max_length, f"max_length {max_length}"


def tokenize(tokenizer: Any, texts: list[str], text_pairs: list[str | None] | None = None, *,
             max_length: int, truncation: bool = True, offsets: bool = False,
             limit_name: str | None = None) -> list[EncodedText]:
    """Tokenize unpadded; texts over `max_length` tokens are cut with one TruncationWarning, or refused."""
    limit_name = limit_name or f"max_length {max_length}"
    out: list[EncodedText | None] = [None] * len(texts)
    too_long: list[tuple[int, int]] = []  # (input index, tokens)
    groups = {False: [i for i in range(len(texts)) if text_pairs is None or text_pairs[i] is None]}
    groups[True] = [i for i in range(len(texts)) if text_pairs is not None and text_pairs[i] is not None]
    for has_pair, indices in groups.items():
        if not indices:
            continue
        pairs = [text_pairs[i] for i in indices] if has_pair else None
        encoding = tokenizer([texts[i] for i in indices], pairs, truncation=False, return_offsets_mapping=offsets,
                             verbose=False)
        rows = [_row(encoding, k, offsets) for k in range(len(indices))]
        long = [k for k, row in enumerate(rows) if len(row.input_ids) > max_length]
        too_long += [(indices[k], len(rows[k].input_ids)) for k in long]
        if long and truncation:  # only the few long texts are tokenized again, with truncation on
            cut = tokenizer([texts[indices[k]] for k in long], [pairs[k] for k in long] if has_pair else None,
                            truncation=True, max_length=max_length, return_offsets_mapping=offsets, verbose=False)
            for j, k in enumerate(long):
                rows[k] = _row(cut, j, offsets)
        for i, row in zip(indices, rows):
            out[i] = row
    if too_long:
        too_long.sort()
        index, length = too_long[0]
        if not truncation:
            raise InputTooLongError(
                f"text {index} has {length} tokens, more than {limit_name} ({len(too_long)} of {len(texts)} texts "
                f"are too long); shorten it, or turn truncation on")
        warnings.warn(f"{len(too_long)} of {len(texts)} texts are longer than {limit_name} (up to "
                      f"{max(n for _, n in too_long)} tokens; the first is text {index}): truncated to "
                      f"{max_length} tokens", TruncationWarning, stacklevel=3)
    return out  # type: ignore[return-value]


def _row(encoding: Any, k: int, offsets: bool) -> EncodedText:
    return EncodedText(list(encoding["input_ids"][k]), list(encoding["token_type_ids"][k]),
                       [tuple(span) for span in encoding["offset_mapping"][k]] if offsets else None)


# ---- length-sorted batches -----------------------------------------------------------------------

def sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Input indices in batches of `batch_size`, longest first, so each batch's rows have similar lengths."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    order = sorted(range(len(lengths)), key=lengths.__getitem__, reverse=True)  # stable: ties keep input order
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


def collate(rows: Sequence[EncodedText], pad_token_id: int, device: torch.device | str = "cpu"
            ) -> tuple[Tensor, Tensor, Tensor]:
    """(input_ids, attention_mask, token_type_ids), each (B, T) with T the batch's own longest row."""
    longest = max(len(row.input_ids) for row in rows)
    ids = np.full((len(rows), longest), pad_token_id, dtype=np.int64)
    types = np.zeros((len(rows), longest), dtype=np.int64)
    mask = np.zeros((len(rows), longest), dtype=np.int64)
    for b, row in enumerate(rows):
        n = len(row.input_ids)
        ids[b, :n], types[b, :n], mask[b, :n] = row.input_ids, row.token_type_ids, 1
    return tuple(torch.from_numpy(array).to(device) for array in (ids, mask, types))  # type: ignore[return-value]


@contextmanager
def _eval_mode(model: nn.Module):
    """Dropout off while predicting; the model's own mode restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def show_progress(progress: bool | None, count: int) -> bool:
    """progress=True/False as given; None (the command line's choice): on for long inputs drawn to a terminal."""
    if progress is not None:
        return bool(progress)
    return count >= PROGRESS_MIN_TEXTS and sys.stderr is not None and sys.stderr.isatty()


def run_sorted(model: nn.Module, rows: Sequence[EncodedText], forward: Callable[[Tensor, Tensor, Tensor], Sequence],
               *, batch_size: int, pad_token_id: int | None, progress: bool | None = False,
               desc: str = "inference") -> list:
    """`forward(input_ids, attention_mask, token_type_ids)` -> one result per row, over length-sorted batches;
    the results come back in the order of `rows`. A progress bar only when asked for (`show_progress`)."""
    batches = sorted_batches([len(row.input_ids) for row in rows], batch_size)
    device = next(model.parameters()).device
    show = show_progress(progress, len(rows))
    results: list = [None] * len(rows)
    with _eval_mode(model), torch.inference_mode(), tqdm(total=len(rows), unit="text", desc=desc,
                                                         disable=not show) as bar:
        for chosen in batches:
            batch = collate([rows[i] for i in chosen], pad_token_id or 0, device)
            for i, result in zip(chosen, forward(*batch), strict=True):
                if not _finite(result):
                    low = next(model.parameters()).dtype in (torch.bfloat16, torch.float16)
                    raise NonFiniteOutputError(
                        f"the model's output for text {i} is not finite (NaN or infinite values): its "
                        + ("activations overflowed in its 16-bit number format (try fp32)" if low else
                           "weights or activations overflowed (a diverged model?)")
                        + ", so there is no prediction to give")
                results[i] = result
            bar.update(len(chosen))
    return results


def _finite(result: Any) -> bool:
    """Whether every float array in one row's result (an array, or a tuple of them) is finite."""
    parts = result if isinstance(result, tuple) else (result,)
    return all(not (isinstance(part, np.ndarray) and np.issubdtype(part.dtype, np.floating))
               or bool(np.isfinite(part).all()) for part in parts)


# ---- sentence vectors ----------------------------------------------------------------------------

def pool(hidden: Tensor, attention_mask: Tensor, pooling: str) -> Tensor:
    """(B, T, C) hidden states -> (B, C): the [CLS] vector, or the mean over real (unpadded) tokens."""
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "mean":
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)                    # (B, T, 1)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
    raise ValueError(f"pooling must be one of {POOLINGS}, not {pooling!r}")


def encode(model: nn.Module, tokenizer: Any, texts: Sequence[str] | str, batch_size: int = 32,
           pooling: str = "cls", max_length: int | None = 512, normalize: bool = False,
           progress: bool | None = False, truncation: bool = True, dtype: str | torch.dtype | None = None
           ) -> np.ndarray:
    """Sentence vectors, float32 (N, C) (one text: (C,)): [CLS]'s or the mean of the real tokens' last hidden states.

    `dtype` ("float32"/"fp32", "bfloat16"/"bf16", "int8") runs a converted copy of the model (`precision.py`);
    None runs the model as it is. `progress`: a progress bar (None: for long inputs drawn to a terminal).
    """
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, not {pooling!r}")
    single = isinstance(texts, str)
    texts = check_texts([texts] if single else texts)
    encoder = _encoder(model)
    limit, limit_name = _limit(encoder, max_length)
    rows = tokenize(tokenizer, texts, max_length=limit, truncation=truncation, limit_name=limit_name)
    encoder = for_inference(encoder, dtype)

    def forward(input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> np.ndarray:
        hidden = encoder(input_ids, attention_mask, token_type_ids).last_hidden_state.float()
        vectors = pool(hidden, attention_mask, pooling)
        return (F.normalize(vectors, dim=-1) if normalize else vectors).cpu().numpy()

    vectors = np.stack(run_sorted(encoder, rows, forward, batch_size=batch_size, pad_token_id=tokenizer.pad_token_id,
                                  progress=progress, desc="encode"))
    return vectors[0] if single else vectors


# ---- predictions ---------------------------------------------------------------------------------

def label_names(model: nn.Module) -> list[str]:
    """The model's label names by id (config.id2label), LABEL_i where it has none."""
    id2label = model.config.id2label or {}
    return [id2label.get(i, f"LABEL_{i}") for i in range(model.num_labels)]


def predict(model: nn.Module, tokenizer: Any, texts: Sequence[str] | str,
            text_pairs: Sequence[str | None] | str | None = None, batch_size: int = 32, max_length: int | None = None,
            truncation: bool = True, progress: bool | None = False, dtype: str | torch.dtype | None = None) -> list:
    """Per input, a classifier's {"label", "score", "probabilities"}, or a tagger's entity spans (character offsets).

    `dtype` and `progress` as in `encode`.
    """
    tags = task_of_model(model, "predict").token_level
    single = isinstance(texts, str)
    if single:
        texts, text_pairs = [texts], None if text_pairs is None else [text_pairs]
    texts = check_texts(texts)
    pairs = _check_pairs(text_pairs, len(texts))
    if tags:
        if pairs is not None and any(pair is not None for pair in pairs):
            raise ValueError("token classification (NER) tags single texts; text_pairs are for classifiers")
        labels = label_names(model)
        tagged = _tag_tokens(model, tokenizer, texts, batch_size, max_length, truncation, progress, dtype)
        results = [entity_spans(text, tokenizer, row, tags, scores, labels)
                   for text, (row, tags, scores) in zip(texts, tagged)]
        return results[0] if single else results

    labels = label_names(model)
    limit, limit_name = _limit(model, max_length)
    if getattr(model.config, "prompt", None) is not None:  # a cloze classifier: each text inside its template
        rows = prompt_rows(model.config.prompt["template"], tokenizer, texts, pairs, limit, truncation, limit_name)
    else:
        rows = tokenize(tokenizer, texts, pairs, max_length=limit, truncation=truncation, limit_name=limit_name)
    model = for_inference(model, dtype)

    def forward(input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> np.ndarray:
        logits = model(input_ids, attention_mask, token_type_ids).logits.float()
        # one output is a yes/no score (transformers' pipelines use a sigmoid there), several are exclusive classes
        return (torch.sigmoid(logits) if logits.size(-1) == 1 else logits.softmax(-1)).cpu().numpy()

    probabilities = run_sorted(model, rows, forward, batch_size=batch_size, pad_token_id=tokenizer.pad_token_id,
                               progress=progress, desc="predict")
    results = []
    for probs in probabilities:
        best = int(probs.argmax())
        results.append({"label": labels[best], "score": float(probs[best]),
                        "probabilities": {label: float(p) for label, p in zip(labels, probs)}})
    return results[0] if single else results


def prompt_rows(template: str, tokenizer: Any, texts: list[str], pairs: list[str | None] | None, max_length: int,
                truncation: bool, limit_name: str) -> list[EncodedText]:
    """Each text inside a cloze classifier's template ("[MASK][MASK]新闻：{text}"), as it was fine-tuned; a text too
    long is cut (never the template), with one TruncationWarning, or refused."""
    from bertkit.data.prompts import PromptTemplate

    if pairs is not None and any(pair is not None for pair in pairs):
        raise ValueError("this classifier reads one text inside its prompt template; text_pairs cannot be given")
    ids, cut = PromptTemplate(template).encode(tokenizer, texts, max_length)
    if cut and not truncation:
        raise InputTooLongError(f"text {cut[0]} does not fit {limit_name} inside the prompt template ({len(cut)} of "
                                f"{len(texts)} texts are too long); shorten it, or turn truncation on")
    if cut:
        warnings.warn(f"{len(cut)} of {len(texts)} texts do not fit {limit_name} inside the prompt template (the "
                      f"first is text {cut[0]}): truncated", TruncationWarning, stacklevel=3)
    return [EncodedText(row, [0] * len(row)) for row in ids]


def _tag_tokens(model: nn.Module, tokenizer: Any, texts: list[str], batch_size: int, max_length: int | None,
                truncation: bool, progress: bool | None, dtype: str | torch.dtype | None = None
                ) -> list[tuple[EncodedText, np.ndarray, np.ndarray]]:
    """Per text: its tokens (with offsets), each token's best tag id and that tag's probability."""
    limit, limit_name = _limit(model, max_length)
    rows = tokenize(tokenizer, texts, max_length=limit, truncation=truncation, offsets=True, limit_name=limit_name)
    model = for_inference(model, dtype)

    def forward(input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> list:
        probs = model(input_ids, attention_mask, token_type_ids).logits.float().softmax(-1)   # (B, T, L)
        scores, tags = (t.cpu().numpy() for t in probs.max(-1))
        return [(tag[:n], score[:n]) for tag, score, n in zip(tags, scores, attention_mask.sum(1).tolist())]

    tagged = run_sorted(model, rows, forward, batch_size=batch_size, pad_token_id=tokenizer.pad_token_id,
                        progress=progress, desc="tag")
    return [(row, tags, scores) for row, (tags, scores) in zip(rows, tagged)]


def _words(row: EncodedText, tokens: Sequence[str]) -> list[list[int]]:
    """[start, end, first token] per word: a "##" piece that touches the previous token continues its word."""
    words: list[list[int]] = []
    for k, (start, end) in enumerate(row.offsets or []):
        if end <= start:  # [CLS], [SEP]: no characters
            continue
        if words and tokens[k].startswith("##") and start == words[-1][1]:
            words[-1][1] = end
        else:
            words.append([start, end, k])
    return words


_TAG = re.compile(r"^[BIMES]-.")


def _entity_tag(label: str) -> str:
    # a label without a B-/I-/... prefix names a type; consecutive words of that type form one entity
    return label if label == "O" or _TAG.match(label) else f"I-{label}"


def entity_spans(text: str, tokenizer: Any, row: EncodedText, tags: np.ndarray, scores: np.ndarray,
                 labels: Sequence[str]) -> list[dict[str, Any]]:
    """Entities of one tagged text: type, [start, end) character offsets, the text there, mean word score."""
    words = _words(row, tokenizer.convert_ids_to_tokens(row.input_ids))
    word_tags = [_entity_tag(labels[int(tags[k])]) for _, _, k in words]
    spans = []
    for kind, first, last in get_entities(word_tags):
        start, end = words[first][0], words[last][1]
        score = float(np.mean([scores[words[w][2]] for w in range(first, last + 1)]))
        spans.append({"entity": kind, "start": start, "end": end, "text": text[start:end], "score": score})
    return spans


def tag_words(model: nn.Module, tokenizer: Any, sentences: Sequence[Sequence[str]], batch_size: int = 32,
              max_length: int | None = None, truncation: bool = True, progress: bool | None = False,
              dtype: str | torch.dtype | None = None) -> list[list[str]]:
    """One predicted tag per given word (e.g. per character of MSRA): the tag of the word's first sub-token.

    The words are joined with spaces, which the tokenizer splits on, so each word is tokenized on its own;
    a word with no tokens (or cut off by truncation) is tagged "O".
    """
    if not isinstance(sentences, Sequence) or not sentences:
        raise ValueError("sentences is empty: give at least one list of words")
    texts, starts = [], []
    for n, words in enumerate(sentences):
        words = check_texts(words, f"sentences[{n}]", content=False) if len(words) else []
        starts.append(list(itertools.accumulate((len(word) + 1 for word in words[:-1]), initial=0)))
        texts.append(" ".join(words))
    labels = label_names(model)
    out = []
    tagged = _tag_tokens(model, tokenizer, texts, batch_size, max_length, truncation, progress, dtype)
    for words, word_starts, (row, tags, _) in zip(sentences, starts, tagged):
        predicted: list[str | None] = [None] * len(words)
        for k, (start, end) in enumerate(row.offsets or []):
            if end > start:  # a token's first character lies in one word: spaces make no tokens
                w = bisect.bisect_right(word_starts, start) - 1
                if predicted[w] is None:
                    predicted[w] = labels[int(tags[k])]
        out.append([tag or "O" for tag in predicted])
    return out
