"""The model a server serves: loaded once through the registry, converted to its number format once, and run one
padded batch at a time by the same functions as `encode` and `predict`.

    served = ServedModel.load("m3e-small", dtype="fp32")     # served.task: "embedding", "classifier" or "ner"
    rows = served.rows(["今天天气很好"], truncate=False)      # tokenized unpadded (InputTooLongError if too long)
    outputs = served.run(rows)                                # one forward; one output (or error) per row

A server serves one task, as text-embeddings-inference does: a bare encoder (or a pretraining model) makes sentence
vectors, a fine-tuned classifier labels, a tagger entity spans.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.errors import InputError
from bertkit.inference.batching import (
    EncodedText,
    NonFiniteOutputError,
    encoder_of,
    input_limit,
    run_sorted,
    tokenize,
)
from bertkit.inference.encode import POOLINGS, sentence_vectors
from bertkit.inference.loading import load_text_model, task_of_model
from bertkit.inference.precision import for_inference, model_dtype
from bertkit.inference.predict import (
    class_probabilities,
    classifier_rows,
    label_names,
    tagger_rows,
    token_tags,
)
from bertkit.models.sentence_files import read_sentence_config

TASKS = ("embedding", "classifier", "ner")

def qa_not_served(spec: str | os.PathLike) -> str:
    """Why a question-answering model is refused: a reader's answer is a span over windows of a question and its
    context, which no TEI route asks for."""
    return (f"{spec} is a question-answering model (BertForQuestionAnswering), which bertkit serve does not serve "
            "(it serves sentence vectors, classifiers and NER taggers); answer questions with bertkit predict "
            f"--model {spec} --question Q --context C")


def default_threads() -> int:
    """The torch threads a server gives its model: one fewer than torch would use (its default is one per core), at
    least one. The event loop that reads requests and writes answers then has a core of its own; with a thread per
    core, torch's threads wait for each other whenever the event loop (or anything else) takes one of the cores."""
    return max(1, torch.get_num_threads() - 1)


def declared_pooling(path: str | os.PathLike) -> str | None:
    """The pooling a model directory declares for its sentence vectors (sentence-transformers' 1_Pooling, or m3e's
    `uniem_embedding_strategy`: `bertkit.models.sentence_files`); None where it declares none bertkit computes."""
    return read_sentence_config(path).pooling


@dataclass
class ServedModel:
    """A loaded text model, its tokenizer, and what the server does with it."""

    name: str                   # as the user named it (a directory or a built-in name)
    model: nn.Module            # in its serving number format; for "embedding", the encoder alone
    tokenizer: Any
    task: str                   # one of TASKS
    pooling: str                # sentence vectors' pooling (used by "embedding")
    labels: list[str]           # label names by id (classifier, ner); [] for "embedding"
    max_length: int             # the longest input in tokens: the model's positions
    text_pairs: bool | None = None  # a classifier fine-tuned on text pairs (true) or single texts; None: not known

    @classmethod
    def load(cls, spec: str | os.PathLike, dtype: str = "fp32", pooling: str | None = None,
             name: str | None = None) -> ServedModel:
        """The model of a directory or built-in name, for `bertkit serve` (`name`: how /info names it, default
        `spec`); a family the server cannot serve, a model that reads images, a question-answering model, or an
        unknown pooling is a clear error."""
        if pooling is not None and pooling not in POOLINGS:
            raise InputError(f"pooling must be one of {POOLINGS}, not {pooling!r}")
        model, tokenizer = load_text_model(spec, "serve")
        try:
            kind = task_of_model(model, "serve")
        except ValueError:  # not a fine-tuned head: its encoder makes sentence vectors
            task, model, labels = "embedding", encoder_of(model), []
        else:
            if kind.spans:
                raise InputError(qa_not_served(spec))
            task, labels = ("ner" if kind.token_level else "classifier"), label_names(model)
        max_length, _ = input_limit(model, None)
        model = for_inference(model, dtype).eval()
        if pooling is None:
            from bertkit.data.sources import resolve_model

            pooling = declared_pooling(resolve_model(spec)) or "cls"
        text_pairs = getattr(model.config, "text_pairs", None) if task == "classifier" else None
        return cls(name or str(spec), model, tokenizer, task, pooling, labels, max_length, text_pairs)

    @property
    def dtype(self) -> str:
        """The number format the model computes in: "float32", "bfloat16" or "int8"."""
        return model_dtype(self.model)

    def rows(self, texts: list[str], pairs: list[str | None] | None = None, truncate: bool = False
             ) -> list[EncodedText]:
        """The task's inputs, tokenized unpadded as `encode` / `predict` tokenize them; a text longer than the model's
        positions is cut (`truncate`) or refused (InputTooLongError)."""
        if self.task == "embedding":
            limit, limit_name = input_limit(self.model, None)
            return tokenize(self.tokenizer, texts, max_length=limit, truncation=truncate, limit_name=limit_name)
        if self.task == "ner":
            return tagger_rows(self.model, self.tokenizer, texts, None, truncate)
        return classifier_rows(self.model, self.tokenizer, texts, pairs, None, truncate)

    def run(self, rows: list[EncodedText]) -> list[Any]:
        """One output per row, in the order given, from one forward over all rows padded to the longest (the
        length-sorted batch of `run_sorted`): a raw sentence vector, a classifier's probabilities, or a tagger's
        (tag ids, scores) per token. A row whose output is not finite gets a NonFiniteOutputError instead, and only
        that row: the others are run again without it."""
        try:
            return run_sorted(self.model, rows, self._forward, batch_size=len(rows),
                              pad_token_id=self.tokenizer.pad_token_id)
        except NonFiniteOutputError as err:
            if len(rows) == 1:
                return [err]
        return [output for row in rows for output in self.run([row])]

    def _forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> Any:
        if self.task == "embedding":
            return sentence_vectors(self.model, input_ids, attention_mask, token_type_ids, self.pooling).cpu().numpy()
        if self.task == "ner":
            return token_tags(self.model, input_ids, attention_mask, token_type_ids)
        return class_probabilities(self.model, input_ids, attention_mask, token_type_ids).cpu().numpy()

    def info(self) -> dict[str, Any]:
        """What /info says about the model (text-embeddings-inference's fields where it has them)."""
        if self.task == "embedding":
            model_type: dict[str, Any] = {"embedding": {"pooling": self.pooling}}
        else:
            id2label = {str(i): label for i, label in enumerate(self.labels)}
            label2id = {label: i for i, label in enumerate(self.labels)}
            model_type = {self.task: {"id2label": id2label, "label2id": label2id}}
        return {"model_id": self.name, "model_sha": None, "model_dtype": self.dtype, "model_type": model_type,
                "task": self.task, "max_input_length": self.max_length}


def normalized(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length by the function `encode(normalize=True)` runs (row by row, so batching does not
    change the result)."""
    return F.normalize(torch.from_numpy(vectors), dim=-1).numpy()
