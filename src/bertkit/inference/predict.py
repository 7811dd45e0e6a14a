"""Task predictions: a classifier's labels and probabilities, a tagger's entity spans with character offsets.

    predict(classifier, tokenizer, ["这家店很好"])
    # [{"label": "positive", "score": 0.97, "probabilities": {"negative": 0.03, "positive": 0.97}}]
    predict(tagger, tokenizer, ["张三在北京工作"])
    # [[{"entity": "PER", "start": 0, "end": 2, "text": "张三", "score": 0.99}, {"entity": "LOC", ...}]]

Entity spans are character offsets into the original text. A word takes the tag of its first sub-token.
"""

from __future__ import annotations

import bisect
import itertools
import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bertkit.data.entities import get_entities
from bertkit.errors import InputError
from bertkit.inference.batching import (
    AUTO,
    ChunkedRun,
    EncodedText,
    InputTooLongError,
    TruncationWarning,
    check_text_pairs,
    check_texts,
    in_chunks,
    input_limit,
    tokenize,
)
from bertkit.inference.loading import task_of_model
from bertkit.inference.precision import for_inference


def label_names(model: nn.Module) -> list[str]:
    """The model's label names by id (config.id2label), LABEL_i where it has none."""
    id2label = model.config.id2label or {}
    return [id2label.get(i, f"LABEL_{i}") for i in range(model.num_labels)]


def predict(model: nn.Module, tokenizer: Any, texts: Sequence[str] | str,
            text_pairs: Sequence[str | None] | str | None = None, batch_size: int = 32, max_length: int | None = None,
            truncation: bool = True, progress: bool | None = False, dtype: str | torch.dtype | None = None,
            batch_tokens: int | str | None = AUTO) -> list:
    """Per input, a classifier's {"label", "score", "probabilities"}, or a tagger's entity spans (character offsets).

    `dtype`, `progress` and `batch_tokens` as in `encode`; the texts run CHUNK_TEXTS at a time, as `predict_stream`
    runs a file.
    """
    single = isinstance(texts, str)
    if single:
        texts, text_pairs = [texts], None if text_pairs is None else [text_pairs]
    texts = check_texts(texts, content=False)
    pairs = check_text_pairs(text_pairs, len(texts))
    chunks = zip(in_chunks(texts), in_chunks(pairs) if pairs is not None else itertools.repeat(None))
    results = [result for part in predict_stream(model, tokenizer, chunks, total=len(texts), batch_size=batch_size,
                                                 max_length=max_length, truncation=truncation, progress=progress,
                                                 dtype=dtype, batch_tokens=batch_tokens)
               for result in part]
    return results[0] if single else results


def predict_stream(model: nn.Module, tokenizer: Any, chunks: Iterable[tuple[Sequence[str], Sequence | None]], *,
                   total: int | None = None, batch_size: int = 32, max_length: int | None = None,
                   truncation: bool = True, progress: bool | None = False, dtype: str | torch.dtype | None = None,
                   batch_tokens: int | str | None = AUTO) -> Iterator[list]:
    """`predict`'s results for each chunk of (texts, text pairs or None), chunk by chunk: a file of any length in
    bounded memory. Empty and truncated texts are counted over all chunks and said once, after the last."""
    task = task_of_model(model, "predict")  # its record (bertkit.tasks) labels, tags... each chunk
    model = for_inference(model, dtype)
    run = ChunkedRun(total, progress, "predict", batch_tokens)
    for texts, pairs in chunks:
        texts = run.check(texts)
        pairs = check_text_pairs(pairs, len(texts))
        yield task.predict(run, model, tokenizer, texts, pairs, batch_size=batch_size, max_length=max_length,
                           truncation=truncation)
    run.finish()


def classifier_rows(model: nn.Module, tokenizer: Any, texts: list[str], pairs: list[str | None] | None,
                    max_length: int | None, truncation: bool, run: ChunkedRun | None = None) -> list[EncodedText]:
    """A classifier's inputs, tokenized unpadded: texts (with their pairs), or each text inside a cloze classifier's
    prompt template; too long: cut (counted by `run`, or said in one TruncationWarning), or refused."""
    limit, limit_name = input_limit(model, max_length)
    if getattr(model.config, "prompt", None) is not None:  # a cloze classifier: each text inside its template
        return prompt_rows(model.config.prompt["template"], tokenizer, texts, pairs, limit, truncation, limit_name)
    check_pair_form(model, len(texts), pairs, run.findings.total if run is not None else 0)
    if run is not None:
        return run.tokenize(tokenizer, texts, pairs, max_length=limit, truncation=truncation, limit_name=limit_name)
    return tokenize(tokenizer, texts, pairs, max_length=limit, truncation=truncation, limit_name=limit_name)


def check_pair_form(model: nn.Module, count: int, pairs: Sequence[str | None] | None, offset: int = 0) -> None:
    """Refuse texts of the other form than the classifier was fine-tuned on (config.text_pairs): a pair to a model of
    single texts, or a single text to a model of pairs, would still get a label, from input it never learnt to read.
    `offset` is the index of the first text among all texts of the run."""
    trained = getattr(model.config, "text_pairs", None)
    paired = [False] * count if pairs is None else [pair is not None for pair in pairs]
    if trained is False and any(paired):
        raise InputError(f"text {offset + paired.index(True)} has a text pair, but this classifier was fine-tuned on "
                         "single texts (its config.json says \"text_pairs\": false) and never learnt to read a pair; "
                         "give single texts")
    if trained is True and not all(paired):
        raise InputError(f"text {offset + paired.index(False)} has no text pair, but this classifier was fine-tuned "
                         "on text pairs (its config.json says \"text_pairs\": true); give each text its pair")


def class_probabilities(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor
                        ) -> Tensor:
    """(B, labels) float32 probabilities of one padded batch. `predict` and the server both run this."""
    return probabilities(class_logits(model, input_ids, attention_mask, token_type_ids))


def class_logits(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> Tensor:
    """(B, labels) float32 logits (raw scores) of one padded batch."""
    return model(input_ids, attention_mask, token_type_ids).logits.float()


def probabilities(logits: Tensor) -> Tensor:
    """A classifier's probabilities from its logits (B, labels)."""
    # one output is a yes/no score (transformers' pipelines use a sigmoid there), several are exclusive classes
    return torch.sigmoid(logits) if logits.size(-1) == 1 else logits.softmax(-1)


def classification(probabilities: np.ndarray, labels: Sequence[str]) -> dict[str, Any]:
    """One text's {"label", "score", "probabilities": {label: p}} from its row of probabilities."""
    best = int(probabilities.argmax())
    return {"label": labels[best], "score": float(probabilities[best]),
            "probabilities": {label: float(p) for label, p in zip(labels, probabilities)}}


def prompt_rows(template: str, tokenizer: Any, texts: list[str], pairs: list[str | None] | None, max_length: int,
                truncation: bool, limit_name: str) -> list[EncodedText]:
    """Each text inside a cloze classifier's template ("[MASK][MASK]新闻：{text}"), as it was fine-tuned; a text too
    long is cut (never the template), with one TruncationWarning, or refused."""
    from bertkit.data.prompts import PromptTemplate

    if pairs is not None and any(pair is not None for pair in pairs):
        raise InputError("this classifier reads one text inside its prompt template; text_pairs cannot be given")
    ids, cut = PromptTemplate(template).encode(tokenizer, texts, max_length)
    if cut and not truncation:
        raise InputTooLongError(f"text {cut[0]} does not fit {limit_name} inside the prompt template ({len(cut)} of "
                                f"{len(texts)} texts are too long); shorten it, or turn truncation on")
    if cut:
        warnings.warn(f"{len(cut)} of {len(texts)} texts do not fit {limit_name} inside the prompt template (the "
                      f"first is text {cut[0]}): truncated", TruncationWarning, stacklevel=3)
    return [EncodedText(row, [0] * len(row)) for row in ids]


def tag_tokens(run: ChunkedRun, model: nn.Module, tokenizer: Any, texts: list[str], batch_size: int,
                max_length: int | None, truncation: bool) -> list[tuple[EncodedText, np.ndarray, np.ndarray]]:
    """Per text: its tokens (with offsets), each token's best tag id and that tag's probability."""
    rows = tagger_rows(model, tokenizer, texts, max_length, truncation, run)

    def forward(input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> list:
        return token_tags(model, input_ids, attention_mask, token_type_ids)

    tagged = run.results(model, rows, forward, batch_size, tokenizer.pad_token_id)
    return [(row, tags, scores) for row, (tags, scores) in zip(rows, tagged)]


def tagger_rows(model: nn.Module, tokenizer: Any, texts: list[str], max_length: int | None, truncation: bool,
                run: ChunkedRun | None = None) -> list[EncodedText]:
    """A tagger's inputs, tokenized unpadded with each token's character offsets (for the entity spans)."""
    from bertkit.tokenizer import BPETokenizer

    if isinstance(tokenizer, BPETokenizer):  # its offsets would do, but not its tokens' word boundaries
        raise InputError("tagging (entity spans) is not implemented for the byte-level BPE tokenizer: a word's "
                         "pieces are joined by WordPiece's \"##\" prefix, which BPE tokens lack")
    limit, limit_name = input_limit(model, max_length)
    options = dict(max_length=limit, truncation=truncation, offsets=True, limit_name=limit_name)
    return run.tokenize(tokenizer, texts, **options) if run is not None else tokenize(tokenizer, texts, **options)


def token_tags(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor
               ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per row of one padded batch: each real token's best tag id and that tag's probability. `predict` and the
    server both run this."""
    probs = model(input_ids, attention_mask, token_type_ids).logits.float().softmax(-1)   # (B, T, L)
    scores, tags = (t.cpu().numpy() for t in probs.max(-1))
    return [(tag[:n], score[:n]) for tag, score, n in zip(tags, scores, attention_mask.sum(1).tolist())]


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
        raise InputError("sentences is empty: give at least one list of words")
    texts, starts = [], []
    for n, words in enumerate(sentences):
        words = check_texts(words, f"sentences[{n}]", content=False) if len(words) else []
        starts.append(list(itertools.accumulate((len(word) + 1 for word in words[:-1]), initial=0)))
        texts.append(" ".join(words))
    labels = label_names(model)
    run = ChunkedRun(len(texts), progress, "tag")
    tagged = tag_tokens(run, for_inference(model, dtype), tokenizer, texts, batch_size, max_length, truncation)
    run.finish()
    out = []
    for words, word_starts, (row, tags, _) in zip(sentences, starts, tagged):
        predicted: list[str | None] = [None] * len(words)
        for k, (start, end) in enumerate(row.offsets or []):
            if end > start:  # a token's first character lies in one word: spaces make no tokens
                w = bisect.bisect_right(word_starts, start) - 1
                if predicted[w] is None:
                    predicted[w] = labels[int(tags[k])]
        out.append([tag or "O" for tag in predicted])
    return out
