"""Fine-tuning a labelled task, end to end: examples -> features -> the family's task head -> Trainer -> best model
-> test scores.

The labelled tasks (bertkit.tasks: classify, pairs, ner) share this run; what is each one's own, the task's record
gives (bertkit.data.task_kinds.TaskKind, found by name): how it samples --max-train-examples (`sample`), what the
data report measures (`describe`), its head and the head's config (`head`), how examples become features
(`features`) and how a model is scored on them (`score`), and a tokenizer it cannot use (`check_tokenizer`).
Extractive QA and sentence vectors have runs of their own (pipelines/qa.py, pipelines/embedding.py). The best
checkpoint on the dev set (accuracy, or entity F1 for NER) is kept, training stops early when dev stops improving,
and the label names are saved in the model's config. The run between the features and the scores (the model, its
steps, the Trainer, the best checkpoint) is the one every text task shares, `fine_tuning.fine_tune`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from bertkit.data.quality import DataReport
from bertkit.data.sources import resolve_model
from bertkit.data.task_kinds import TaskKind, get_task
from bertkit.errors import InputError
from bertkit.inference import EncodedText, run_sorted
from bertkit.inference.batching import AUTO
from bertkit.models.registry import family_of
from bertkit.pipelines.fine_tuning import Scorer, TaskParts, fine_tune, warn_if_fewer_examples, write_results
from bertkit.pipelines.options import FinetuneOptions
from bertkit.pipelines.run_directory import holds_out
from bertkit.utils.constants import IGNORE_INDEX
from bertkit.utils.devices import bf16_on

# ---- data ----------------------------------------------------------------------------------------

def load_task_data(task: TaskKind, train: str, dev: str | None, test: str | None,
                   encoding: str = "utf-8") -> dict[str, list]:
    """Splits from a named dataset, or from users' files (TSV/CSV/JSONL for classes, CoNLL for NER, read as
    `encoding`)."""
    if train in task.datasets:
        splits = dict(task.load_dataset(train))
    else:
        splits = {"train": task.read(train, "train", "to train on", encoding=encoding)}
    for name, spec in (("dev", dev), ("test", test)):
        if spec is not None:
            splits[name] = task.read(spec, name, "to evaluate on", encoding=encoding)
    for name in ("train", "dev"):
        if not splits.get(name):
            raise InputError(f"no {name} examples (give --{name} FILE, or a named dataset)")
    return splits


def check_labels(examples: Sequence, label2id: dict[str, int], task: TaskKind, split: str) -> None:
    """An evaluation label the model was not trained on is an error that names it, not a crash later."""
    seen = {label for example in examples for label in task.labels(example)}
    unknown = sorted(seen - set(label2id))
    if unknown:
        raise InputError(f"the {split} data has labels the model does not know: {', '.join(unknown[:10])}; "
                         f"the model's labels are {', '.join(label2id)}")


class Collator:
    """Pads features to the batch's longest; the trainer passes seeds, which fine-tuning does not need."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, features: Sequence[dict], seeds: Sequence[int] | None = None) -> dict[str, torch.Tensor]:
        if not features:
            raise ValueError("cannot collate an empty batch")
        T = max(len(f["input_ids"]) for f in features)
        B = len(features)
        batch = {"input_ids": torch.full((B, T), self.pad_token_id, dtype=torch.long),
                 "token_type_ids": torch.zeros((B, T), dtype=torch.long),
                 "attention_mask": torch.zeros((B, T), dtype=torch.long)}
        token_labels = "labels" in features[0]
        if token_labels:
            batch["labels"] = torch.full((B, T), IGNORE_INDEX, dtype=torch.long)
        for j, f in enumerate(features):
            n = len(f["input_ids"])
            batch["input_ids"][j, :n] = torch.tensor(f["input_ids"])
            batch["token_type_ids"][j, :n] = torch.tensor(f["token_type_ids"])
            batch["attention_mask"][j, :n] = 1
            if token_labels:
                batch["labels"][j, :n] = torch.tensor(f["labels"])
        if not token_labels:
            batch["labels"] = torch.tensor([f["label"] for f in features])
        return batch


# ---- evaluation ----------------------------------------------------------------------------------

def predict_logits(model, features: Sequence[dict], pad_token_id: int, batch_size: int = 64) -> list[np.ndarray]:
    """Logits per feature (per real token for tagging), from length-sorted batches, in input order (on a GPU a batch
    of short texts grows past batch_size, as `encode`'s do: `batching.batch_tokens_for`)."""
    rows = [EncodedText(f["input_ids"], f["token_type_ids"]) for f in features]

    def forward(input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor) -> list:
        logits = model(input_ids, attention_mask, token_type_ids).logits.float().cpu().numpy()
        if logits.ndim == 2:
            return list(logits)
        return [row[:n] for row, n in zip(logits, attention_mask.sum(1).tolist())]

    return run_sorted(model, rows, forward, batch_size=batch_size, pad_token_id=pad_token_id, progress=False,
                      batch_tokens=AUTO)


# ---- the run -------------------------------------------------------------------------------------

@holds_out("bertkit finetune")
def finetune(options: FinetuneOptions) -> dict[str, Any]:
    """Train, keep the best dev checkpoint, score it on test; returns (and writes) the results. The run holds
    options.out (`run_directory`: an earlier run or model there is refused unless options.overwrite)."""
    from bertkit.tokenizer import load_tokenizer

    started = time.perf_counter()
    options.start()  # before any work: the device (a GPU the machine lacks is refused) and the threads
    task = get_task(options.task)
    if not hasattr(task, "features"):
        raise InputError(f"the {task.name} task has its own run, not the labelled tasks' finetune: `bertkit finetune "
                         f"--task {task.name}` runs it (in Python: get_task({task.name!r}).train(options))")
    model_dir = resolve_model(options.model)
    tokenizer = load_tokenizer(model_dir)
    task.check_tokenizer(tokenizer, model_dir)
    splits = load_task_data(task, options.train, options.dev, options.test, options.encoding)
    train = splits["train"]
    warn_if_fewer_examples(options, len(train))
    if options.max_train_examples and len(train) > options.max_train_examples:
        train = task.sample(train, options)
    report = DataReport("the training data")
    task.describe(report, train, splits.get("dev"))
    report.check()
    names = task.label_names(train)
    id2label = dict(enumerate(names))
    label2id = {v: k for k, v in id2label.items()}
    for split in ("dev", "test"):
        if split in splits:
            check_labels(splits[split], label2id, task, split)

    # the head of the model's own family (a BERT's, a ModernBERT's)
    cls, head = task.head(family_of(model_dir), options, tokenizer, train, names)

    def featurize(examples):
        return task.features(examples, tokenizer, label2id, options)

    def scorer(examples):  # tokenized once, scored at each evaluation
        features = featurize(examples)
        return Scorer(len(features),
                      lambda model: task.score(model, features, examples, tokenizer.pad_token_id, id2label))

    parts = TaskParts(model_class=cls, head=head, train=train, dev=splits["dev"], featurize=featurize,
                      collator=Collator(tokenizer.pad_token_id), scorer=scorer, metric=task.metric, report=report,
                      finetuning_task=task.name)
    run = fine_tune(options, parts, model_dir, tokenizer, started)

    results: dict[str, Any] = {"task": options.task, "model": options.model, "random_init": options.random_init,
                               "labels": names, "train_examples": len(train), "steps": run.state.step,
                               "stop_reason": run.state.stop_reason,
                               "train_seconds": run.train_seconds, "best_step": run.state.best_step,
                               f"dev_{task.metric}": run.state.best_metric, "best_model": str(run.best_dir)}
    if splits.get("test"):
        # scored as the trainer scores dev: in bf16 autocast when the run trained in it, where the model is
        device = next(run.model.parameters()).device
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16_on(device, options.bf16)):
            test = scorer(splits["test"]).score(run.model)
        results.update({f"test_{k}": v for k, v in test.items()})
    write_results(options, results)
    return results
