"""The model a server serves: loaded once through the registry, converted to its number format once, and run one
padded batch at a time by the same functions as `encode` and `predict`.

    served = ServedModel.load("m3e-small", dtype="fp32")     # served.task: "embedding", "classifier", "ner", "qa"
    rows = served.rows(["今天天气很好"], truncate=False)      # tokenized unpadded (InputTooLongError if too long)
    outputs = served.run(rows)                                # one forward; one output (or error) per row

A server serves one task, as text-embeddings-inference does: a bare encoder (or a pretraining model) makes sentence
vectors, a fine-tuned classifier labels (and, fine-tuned on text pairs, ranks texts against a query: a
cross-encoder), a tagger entity spans, a reader the answers to questions.

Where a task gives more than one output, each row says which its request wants (`ServedRow.want`): a sentence
vector or every token's vector, probabilities or raw logits. One batch can mix them; the forward computes what
any of its rows wants.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.data.task_kinds import TaskKind
from bertkit.errors import InputError
from bertkit.inference.batching import (
    EncodedText,
    NonFiniteOutputError,
    encoder_of,
    input_limit,
    run_sorted,
    tokenize,
)
from bertkit.inference.encode import choose_dtype, declared_settings, sentence_vectors
from bertkit.inference.loading import load_text_model, task_of_model
from bertkit.inference.precision import for_inference, model_dtype
from bertkit.models.functional import pool_tokens
from bertkit.models.sentence_files import check_sentence_pooling
from bertkit.utils.dtypes import FP32


@dataclass
class ServedRow(EncodedText):
    """A row and the output its request wants of it: "tokens" (every token's vector, /embed_all), "logits" (a
    classifier's raw scores), or "" (the task's own: a sentence vector, probabilities, tags, span logits)."""

    want: str = ""


def wanting(rows: list[EncodedText], want: str) -> list[EncodedText]:
    """`rows` asking for `want` ("" leaves them as they are)."""
    if not want:
        return rows
    return [ServedRow(row.input_ids, row.token_type_ids, row.offsets, want) for row in rows]


def declared_prompts(path: str | os.PathLike) -> dict[str, str]:
    """The prompts a model directory names (sentence-transformers' config_sentence_transformers.json `prompts`),
    by name; its default prompt is not applied unless the server is told to (--default-prompt)."""
    try:
        config = json.loads((Path(path) / "config_sentence_transformers.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    prompts = config.get("prompts") if isinstance(config, dict) else None
    if not isinstance(prompts, dict):
        return {}
    return {name: text for name, text in prompts.items() if isinstance(name, str) and isinstance(text, str)}


def default_threads() -> int:
    """The torch threads a server gives its model: one fewer than torch would use (its default is one per core), at
    least one. The event loop that reads requests and writes answers then has a core of its own; with a thread per
    core, torch's threads wait for each other whenever the event loop (or anything else) takes one of the cores."""
    return max(1, torch.get_num_threads() - 1)


@dataclass
class ServedModel:
    """A loaded text model, its tokenizer, and what the server does with it."""

    name: str                   # as the user named it (a directory or a built-in name)
    model: nn.Module            # in its serving number format; for "embedding", the encoder alone
    tokenizer: Any
    kind: TaskKind | None       # the fine-tuning task whose head it is (its record: bertkit.tasks); None: vectors
    pooling: str                # sentence vectors' pooling (used by "embedding")
    labels: list[str]           # label names by id (classifier, ner); [] for "embedding" and "qa"
    max_length: int             # the longest input in tokens: the model's positions
    text_pairs: bool | None = None  # a classifier fine-tuned on text pairs (true) or single texts; None: not known
    pairs: bool = False         # a classifier fine-tuned on text pairs (a cross-encoder): /rerank serves it
    prompts: dict[str, str] = field(default_factory=dict)  # prefixes a request names (prompt_name), by name
    default_prompt: str | None = None  # the prefix of every text a request names no prompt for
    qa: dict[str, Any] = field(default_factory=dict)  # a reader's windows and decoding (inference.qa.qa_settings)
    dtype_reason: str | None = None  # why --dtype auto chose the model's number format

    @classmethod
    def load(cls, spec: str | os.PathLike, dtype: str = FP32, pooling: str | None = None,
             name: str | None = None, prompts: dict[str, str] | None = None,
             default_prompt: str | None = None, device: Any = None) -> ServedModel:
        """The model of a directory or built-in name, for `bertkit serve` (`name`: how /info names it, default
        `spec`; `dtype` "auto": `choose_dtype`'s, the fastest format within cosine 0.999 of float32); a family the
        server cannot serve, a model that reads images or an unknown pooling is a clear error. `prompts` (by name)
        join those the directory declares (sentence-transformers' config); they and `default_prompt` are prefixes of
        the texts an embedding model reads, and refused for other models. `device`: where the model computes
        (`loading.on_device`; None: the CPU); "auto" then chooses among the formats that device computes."""
        from bertkit.data.sources import resolve_model

        if pooling is not None:
            check_sentence_pooling(pooling)
        path = resolve_model(spec)
        model, tokenizer = load_text_model(spec, "serve", device=device)
        try:
            kind = task_of_model(model, "serve")
        except ValueError:  # not a fine-tuned head: its encoder makes sentence vectors
            kind, task, model, state = None, "embedding", encoder_of(model), {}
        else:  # its task's record (bertkit.tasks) says what a server keeps of it: labels, a reader's windows...
            task, state = kind.served, kind.serving_state(model, path)
        if task != "embedding" and (prompts or default_prompt):
            raise InputError(f"{spec} is {'an' if task[0] in 'aeiou' else 'a'} {task} model: prompts are prefixes "
                             "of the texts an embedding model encodes; give --default-prompt and --prompts only "
                             "with an embedding model")
        max_length, _ = input_limit(model, None)
        pooling = declared_settings(path, pooling).pooling  # given, else the directory's, else [CLS]
        why = None
        if dtype == "auto":  # the fastest format whose sentence vectors stay within cosine 0.999 of float32's
            dtype, why = choose_dtype(encoder_of(model), tokenizer, pooling)
        model = for_inference(model, dtype).eval()
        named = {**declared_prompts(path), **(prompts or {})} if task == "embedding" else {}
        return cls(name or str(spec), model, tokenizer, kind, pooling, state.get("labels", []), max_length,
                   text_pairs=state.get("text_pairs"), pairs=state.get("pairs", False), prompts=named,
                   default_prompt=default_prompt or None, qa=state.get("qa", {}), dtype_reason=why)

    @property
    def task(self) -> str:
        """"embedding", or what the model's task calls a served model ("classifier", "ner", "qa"): /info's task."""
        return self.kind.served if self.kind is not None else "embedding"

    @property
    def dtype(self) -> str:
        """The number format the model computes in: "float32", "bfloat16" or "int8"."""
        return model_dtype(self.model)

    @functools.cached_property
    def left_tokenizer(self) -> Any:
        """The tokenizer cutting long texts at their start (TEI's truncation_direction "Left"): the same vocabulary
        and backend, another truncation side."""
        left = copy.copy(self.tokenizer)
        left.truncation_side = "left"
        return left

    @property
    def rerank_label(self) -> int | None:
        """The label whose probability (or logit) is a pair's /rerank score: the one output of a single-score
        model, else the label named "1" (bertkit finetune's name for a positive pair), else the last (id 1); None
        for a model of more than two labels, which has no one score to rank by."""
        if not self.pairs or len(self.labels) > 2:
            return None
        return self.labels.index("1") if "1" in self.labels else len(self.labels) - 1

    def rows(self, texts: list[str], pairs: list[str | None] | None = None, truncate: bool = False,
             left: bool = False, prompt: str | None = None, whole: bool = False) -> list[EncodedText]:
        """The task's inputs, tokenized unpadded as `encode` / `predict` tokenize them; a text longer than the model's
        positions is cut (`truncate`; at its start with `left`) or refused (InputTooLongError), or with `whole`
        (embedding models) kept whole, for long_inputs.split_rows. `prompt` is put before every text (embedding)."""
        tokenizer = self.left_tokenizer if left else self.tokenizer
        if self.task == "embedding":
            if prompt:
                texts = [prompt + text for text in texts]
            limit, limit_name = input_limit(self.model, None)
            if whole:
                return tokenize(tokenizer, texts, max_length=sys.maxsize, truncation=False, limit_name=limit_name)
            return tokenize(tokenizer, texts, max_length=limit, truncation=truncate, limit_name=limit_name)
        return self.kind.serve_rows(self, tokenizer, texts, pairs, truncate)

    def run(self, rows: list[EncodedText]) -> list[Any]:
        """One output per row, in the order given, from one forward over all rows padded to the longest (the
        length-sorted batch of `run_sorted`): a raw sentence vector (or with `want="tokens"` every token's vector),
        a classifier's probabilities (or its logits), a tagger's (tag ids, scores) per token, or a reader's (start
        logits, end logits). A row whose output is not finite gets a NonFiniteOutputError instead, and only that
        row: the others are run again without it."""
        wants = {getattr(row, "want", "") for row in rows}
        forward = functools.partial(self._forward, tokens="tokens" in wants, logits="logits" in wants)
        try:
            outputs = run_sorted(self.model, rows, forward, batch_size=len(rows),
                                 pad_token_id=self.tokenizer.pad_token_id)
        except NonFiniteOutputError as err:
            if len(rows) == 1:
                return [err]
            return [output for row in rows for output in self.run([row])]
        if wants == {""}:
            return outputs
        # a batch where some row wants more gave every row (its own output, the other): each row takes its own
        return [output[1] if getattr(row, "want", "") else output[0] for row, output in zip(rows, outputs)]

    def _forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor, tokens: bool = False,
                 logits: bool = False) -> Any:
        if self.task == "embedding":
            if not tokens:
                return sentence_vectors(self.model, input_ids, attention_mask, token_type_ids,
                                        self.pooling).cpu().numpy()
            # sentence_vectors' steps, keeping the hidden states for the rows that want every token's vector
            hidden = self.model(input_ids, attention_mask, token_type_ids).last_hidden_state.float()
            vectors = pool_tokens(hidden, attention_mask, self.pooling).cpu().numpy()
            states = hidden.cpu().numpy()
            return [(vector, state[:n]) for vector, state, n in zip(vectors, states, attention_mask.sum(1).tolist())]
        return self.kind.serve_forward(self, input_ids, attention_mask, token_type_ids, logits)

    def info(self) -> dict[str, Any]:
        """What /info says about the model (text-embeddings-inference's fields where it has them: a classifier of
        text pairs is its "reranker")."""
        extra: dict[str, Any] = {}
        if self.task == "embedding":
            model_type: dict[str, Any] = {"embedding": {"pooling": self.pooling}}
            extra["prompts"] = sorted(self.prompts)
        else:
            model_type, extra = self.kind.serve_info(self)
        if self.dtype_reason:
            extra["model_dtype_reason"] = self.dtype_reason
        return {"model_id": self.name, "model_sha": None, "model_dtype": self.dtype, "model_type": model_type,
                "task": self.task, "max_input_length": self.max_length, **extra}


def normalized(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length by the function `encode(normalize=True)` runs (row by row, so batching does not
    change the result)."""
    return F.normalize(torch.from_numpy(vectors), dim=-1).numpy()
