"""The fine-tuning run every text task shares, from the pretrained model to its best checkpoint.

A task's pipeline (pipelines/finetune.py: classes, pairs and tags; pipelines/qa.py: extractive QA;
pipelines/embedding.py: sentence vectors) reads its data,
says in a `TaskParts` what is its own (the head, how examples become features, how dev is scored) and calls
`fine_tune`, which runs the rest the same way for every task:

    the seed -> the pretrained encoder with a fresh head -> its positions and vocabulary against the run's
    -> features (dev too, when it picks the best) -> steps: an epoch, the planned run, dev twice per epoch
    -> Trainer -> the best checkpoint on dev, reloaded

The pipeline then scores its test set with the model `fine_tune` returns and writes its results (`write_results`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.data.quality import DataReport, check_positions_fit, check_tokenizer_fits
from bertkit.data.sources import resolve_model
from bertkit.data.task_kinds import FINETUNE_RESULTS
from bertkit.pipelines.options import FinetuneOptions
from bertkit.training.arguments import TrainState
from bertkit.training.budget import planned_steps, steps_per_epoch
from bertkit.training.checkpointing import BEST_DIR
from bertkit.training.trainer import Trainer
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_write_text
from bertkit.utils.devices import resolve_device


@dataclass(frozen=True)
class Scorer:
    """Evaluation examples made ready once: how many features they became, and a model's scores on them."""

    features: int                                      # what one evaluation runs the model on (QA: windows)
    score: Callable[[torch.nn.Module], dict[str, float]]


@dataclass(frozen=True)
class TaskParts:
    """What a fine-tuning task brings to the run; the rest is `fine_tune`'s, the same for every task."""

    model_class: Any                       # the encoder with the task's head, e.g. BertForSequenceClassification:
                                           # (config) -> a model, and from_pretrained(dir, **head)
    head: dict[str, Any]                   # the head's config fields, saved with the model (id2label, qa, prompt)
    train: Sequence                        # the training examples
    dev: Sequence                          # the dev examples: they pick the best checkpoint
    featurize: Callable[[Sequence], list]  # training examples -> the features `collator` batches
    collator: Callable                     # features -> a batch of the model's inputs and labels
    scorer: Callable[[Sequence], Scorer]   # evaluation examples -> their features' count and scoring
    metric: str                            # the dev score that picks the best checkpoint ("accuracy", "f1")
    report: DataReport                     # what was measured on the training data so far
    unit: str = "examples"                 # what one feature is ("windows" for QA), as a warning names it
    count_items: Callable | None = None    # the Trainer's item counts of a batch's loss terms (see Trainer)
    # the task kind, saved in config.json as transformers' `finetuning_task`: `bertkit serve` reads "pairs" there
    # to know a classifier of text pairs (a cross-encoder, which /rerank serves) from one of single texts
    finetuning_task: str | None = None


@dataclass(frozen=True)
class FineTuned:
    """A finished run: the trainer's state, the model to score on test and where it was saved."""

    state: TrainState
    model: torch.nn.Module                 # the best on dev, reloaded; the last one when dev is not scored
    best_dir: Path
    train_seconds: float                   # since the pipeline started, its data read and tokenized included
    train_features: int


def warn_if_fewer_examples(options: FinetuneOptions, available: int, what: str = "training examples") -> None:
    """Say where --max-train-examples asks for more examples than the training data has: all of them are used."""
    if options.max_train_examples and options.max_train_examples > available:
        warnings.warn(f"--max-train-examples {options.max_train_examples} is more than the {available} {what}: all "
                      f"{available} are used", stacklevel=3)


def start_run(options: FinetuneOptions, task: str, pipeline: str) -> tuple[float, Path, Any]:
    """What a task's pipeline does first: (the time it started, the pretrained model's directory, its tokenizer). A
    run of another task is refused, and so is a GPU the machine lacks, before any work; the threads are set."""
    from bertkit.errors import InputError
    from bertkit.tokenizer import load_tokenizer

    if options.task != task:
        raise InputError(f"{pipeline} trains the {task} task, not {options.task!r}")
    started = time.perf_counter()
    options.start()
    model_dir = resolve_model(options.model)
    return started, model_dir, load_tokenizer(model_dir)


def sample_examples(examples: list, options: FinetuneOptions) -> list:
    """A seeded sample of --max-train-examples of `examples`, in their order; all of them where there are no more."""
    if options.max_train_examples and len(examples) > options.max_train_examples:
        rng = np.random.default_rng(options.seed)
        return [examples[i] for i in sorted(rng.choice(len(examples), options.max_train_examples, replace=False))]
    return examples


def input_ids(feature: Any) -> Sequence[int]:
    """A feature's token ids: a key (classes and tags) or an attribute (QA windows)."""
    return feature["input_ids"] if isinstance(feature, Mapping) else feature.input_ids


def fine_tune(options: FinetuneOptions, task: TaskParts, model_dir: Path, tokenizer: Any,
              started: float) -> FineTuned:
    """Train `task`'s head on the model in `model_dir` as `options` say, keeping the best dev checkpoint in
    OUT/best; `started` is when the pipeline started (train_seconds count from it). The run trains on
    options.device (its steps are planned there), and the model it returns is on the device it trained on."""
    device = resolve_device(options.device)
    # the pretrained encoder with a fresh head (all of it fresh with --random-init), from the run's seed
    torch.manual_seed(options.seed)
    if options.random_init:
        model = task.model_class(task.model_class.config_class.from_pretrained(model_dir).replace(**task.head))
    else:
        with warnings.catch_warnings():  # the fresh head is the point here, not news
            warnings.filterwarnings("ignore", message=".*initialised fresh.*")
            model = task.model_class.from_pretrained(model_dir, **task.head)
    if task.finetuning_task is not None:
        model.config.extra["finetuning_task"] = task.finetuning_task
    check_positions_fit(options.max_length, model.config.max_position_embeddings, "--max-length", options.model)
    check_tokenizer_fits(len(tokenizer), model.config.vocab_size, str(model_dir))

    # the features; dev is tokenized only when it is read, to pick the best checkpoint
    select = options.select_best
    train_features = task.featurize(task.train)
    dev = task.scorer(task.dev) if select else None
    task.report.tokenized((input_ids(f) for f in train_features), tokenizer, f"the tokenizer of {options.model}")
    task.report.check().save(options.out)

    # the steps: --max-steps, or --epochs cut to what fits --minutes (so the schedule decays fully); dev twice an epoch
    epoch_steps = steps_per_epoch(len(train_features), options.batch_size, task.unit)
    max_steps = options.max_steps or max(1, round(options.epochs * epoch_steps))
    if not options.max_steps:
        # dev (read only to choose the best model) is scored twice per epoch or every --eval-every steps, as below
        max_steps = planned_steps(model, train_features, task.collator, options.batch_size, max_steps, options.minutes,
                                  options.bf16, options.group_by_length, eval_examples=dev.features if dev else 0,
                                  eval_every=options.eval_every or max(1, epoch_steps // 2), device=device)
    args = options.training_arguments(
        max_steps, batch_size=min(options.batch_size, len(train_features)),
        eval_every=options.eval_every or max(1, min(max_steps, epoch_steps // 2)),
        metric_for_best=task.metric if select else None,
        early_stopping_patience=options.early_stopping_patience if select else None, save_total_limit=1)

    trainer = Trainer(model, args, train_features, task.collator, eval_fn=dev.score if dev else None,
                      count_items=task.count_items, tokenizer=tokenizer)
    state = trainer.train()
    train_seconds = time.perf_counter() - started

    # the best checkpoint on dev, from OUT/best; without dev scores, the last model (saved in OUT)
    best_dir = Path(options.out) / BEST_DIR if select else Path(options.out)
    trained_on = next(trainer.model.parameters()).device
    best = task.model_class.from_pretrained(best_dir).to(trained_on) if select else trainer.model.eval()
    return FineTuned(state, best, best_dir, train_seconds, len(train_features))


def write_results(options: FinetuneOptions, results: dict[str, Any]) -> None:
    """OUT/finetune_results.json: what the run did and scored."""
    atomic_write_text(Path(options.out) / FINETUNE_RESULTS, jsonfiles.dumps(results, indent=2, ensure_ascii=False))
