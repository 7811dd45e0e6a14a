"""Fine-tuning, end to end: examples -> features -> the family's task head -> Trainer -> best model -> test scores.

Tasks: "classify" (one text, a label), "pairs" (two texts, a label), "ner" (a tag per token; tokens are
characters for Chinese); extractive QA has its own pipeline (pipelines/qa.py). The best checkpoint on the dev
set (accuracy, or entity F1 for NER) is kept, training stops early when dev stops improving, and the label names
are saved in the model's config. This module reads the data and scores it; the run between (the model, its steps,
the Trainer, the best checkpoint) is the one every text task shares, `fine_tuning.fine_tune`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from bertkit.data.prompts import PromptTemplate, parse_label_words
from bertkit.data.quality import DataReport
from bertkit.data.sources import resolve_model
from bertkit.data.task_kinds import TaskKind, collect_labels, get_task
from bertkit.data.tasks import DATASET_LABEL_WORDS, label_budget
from bertkit.errors import InputError
from bertkit.inference import EncodedText, run_sorted
from bertkit.models.bert.heads import IGNORE_INDEX, BertForPromptClassification
from bertkit.models.registry import family_of
from bertkit.pipelines.fine_tuning import Scorer, TaskParts, fine_tune, warn_if_fewer_examples, write_results
from bertkit.pipelines.options import FinetuneOptions
from bertkit.pipelines.run_directory import holds_out
from bertkit.training import metrics
from bertkit.utils.devices import bf16_on

# ---- data ----------------------------------------------------------------------------------------

def prompt_label_words(options: FinetuneOptions, names: Sequence[str]) -> list[str]:
    """The label word of each label (in `names` order): --label-words LABEL=WORD ..., or a named dataset's own."""
    words = parse_label_words(options.label_words, DATASET_LABEL_WORDS.get(options.train))
    missing = [name for name in names if name not in words]
    if missing:
        raise InputError(f"the prompt needs a label word for every label; none for {', '.join(missing)} "
                         "(give --label-words LABEL=WORD ...)")
    return [words[name] for name in names]


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


def classification_features(examples, tokenizer, label2id, max_length: int) -> list[dict[str, list[int]]]:
    """Token ids per example; examples with a text_pair are encoded as pairs, the rest (e.g. an inews
    article with no body) as single texts, in one call each."""
    features: list[dict[str, list[int]] | None] = [None] * len(examples)
    for paired in (False, True):
        index = [i for i, e in enumerate(examples) if (e.text_pair is not None) == paired]
        if not index:
            continue
        pairs = [examples[i].text_pair for i in index] if paired else None
        enc = tokenizer([examples[i].text for i in index], pairs, truncation=True, max_length=max_length)
        for i, ids, types in zip(index, enc["input_ids"], enc["token_type_ids"]):
            features[i] = {"input_ids": ids, "token_type_ids": types, "label": label2id[examples[i].label]}
    return features


def ner_features(examples, tokenizer, label2id, max_length: int, label_all: bool = False) -> list[dict]:
    """Tokenize each word (a character, for Chinese) on its own, so sub-tokens map back to words.

    Labels go on each word's first sub-token (-100 on the rest), or on all its sub-tokens with
    `label_all` (a B- tag becomes I- after the first). `word_index` maps sub-tokens back to words.
    """
    flat = [w for e in examples for w in e.tokens]
    pieces = tokenizer(flat, add_special_tokens=False, return_token_type_ids=False,
                       return_attention_mask=False, verbose=False)["input_ids"] if flat else []
    features, k = [], 0
    for e in examples:
        ids, labels, word_index = [tokenizer.cls_token_id], [IGNORE_INDEX], [-1]
        for w, tag in enumerate(e.tags):
            word_ids = pieces[k + w]
            if not word_ids:  # whitespace: no token, tagged O at evaluation
                continue
            if len(ids) + len(word_ids) > max_length - 1:
                break
            inside = "I-" + tag[2:] if tag.startswith("B-") else tag
            ids += word_ids
            labels += [label2id[tag]] + [label2id.get(inside, label2id[tag]) if label_all else IGNORE_INDEX] * (
                len(word_ids) - 1)
            word_index += [w] + [-1] * (len(word_ids) - 1)
        k += len(e.tokens)
        ids.append(tokenizer.sep_token_id)
        labels.append(IGNORE_INDEX)
        word_index.append(-1)
        features.append({"input_ids": ids, "token_type_ids": [0] * len(ids), "labels": labels,
                         "word_index": word_index, "num_words": len(e.tokens)})
    return features


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
    """Logits per feature (per real token for tagging), from length-sorted batches, in input order."""
    rows = [EncodedText(f["input_ids"], f["token_type_ids"]) for f in features]

    def forward(input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor) -> list:
        logits = model(input_ids, attention_mask, token_type_ids).logits.float().cpu().numpy()
        if logits.ndim == 2:
            return list(logits)
        return [row[:n] for row, n in zip(logits, attention_mask.sum(1).tolist())]

    return run_sorted(model, rows, forward, batch_size=batch_size, pad_token_id=pad_token_id, progress=False)


def evaluate_features(model, task: TaskKind, features, pad_token_id: int, id2label: dict[int, str],
                      gold_tags: Sequence[Sequence[str]] | None = None) -> dict[str, float]:
    """Accuracy and macro-F1 for classification; entity precision/recall/F1 (seqeval) for NER."""
    logits = predict_logits(model, features, pad_token_id)
    if not task.token_level:
        pred = np.array([row.argmax() for row in logits])
        gold = np.array([f["label"] for f in features])
        return {"accuracy": metrics.accuracy(pred, gold), "macro_f1": metrics.macro_f1(pred, gold)}
    pred_tags = []
    for f, row in zip(features, logits):
        tags = ["O"] * f["num_words"]  # words cut off by max_length, or without tokens, count as O
        for position, w in enumerate(f["word_index"]):
            if w >= 0:
                tags[w] = id2label[int(row[position].argmax())]
        pred_tags.append(tags)
    scores = metrics.entity_scores(gold_tags, pred_tags)
    return {"precision": scores["precision"], "recall": scores["recall"], "f1": scores["f1"]}


# ---- the run -------------------------------------------------------------------------------------

@holds_out("bertkit finetune")
def finetune(options: FinetuneOptions) -> dict[str, Any]:
    """Train, keep the best dev checkpoint, score it on test; returns (and writes) the results. The run holds
    options.out (`run_directory`: an earlier run or model there is refused unless options.overwrite)."""
    from bertkit.tokenizer import BPETokenizer, load_tokenizer

    started = time.perf_counter()
    options.start()  # before any work: the device (a GPU the machine lacks is refused) and the threads
    task = get_task(options.task)
    if task.spans:
        raise InputError("extractive question answering has its own pipeline: bertkit.pipelines.qa.finetune_qa "
                         "(`bertkit finetune --task qa` runs it)")
    model_dir = resolve_model(options.model)
    tokenizer = load_tokenizer(model_dir)
    if task.token_level and isinstance(tokenizer, BPETokenizer):
        raise InputError(f"--task {task.name} is not implemented for the byte-level BPE tokenizer of {model_dir}: "
                         "it tokenizes each word on its own, and BPE's ids depend on the space before a word")
    splits = load_task_data(task, options.train, options.dev, options.test, options.encoding)
    train = splits["train"]
    warn_if_fewer_examples(options, len(train))
    if options.max_train_examples and len(train) > options.max_train_examples:
        if task.token_level:
            rng = np.random.default_rng(options.seed)
            train = [train[i] for i in sorted(rng.choice(len(train), options.max_train_examples, replace=False))]
        else:  # every class represented alike, and the 50 of a seed are the first 50 of its 200
            classes = len({example.label for example in train})
            if options.max_train_examples < classes:
                raise InputError(f"--max-train-examples {options.max_train_examples} is fewer than the training data's "
                                 f"{classes} classes: every class needs at least one example")
            train = label_budget(train, options.max_train_examples, options.seed)
    report = DataReport("the training data")
    if task.token_level:
        report.tags([e.tags for e in train])
    else:  # the texts stand in for a file's first column: headlines there would be labels read as texts
        report.classes([e.label for e in train], other_column=[e.text for e in train])
        if splits.get("dev"):
            report.classes([e.label for e in splits["dev"]], "dev")
    report.check()
    names = collect_labels(task, train)
    id2label = dict(enumerate(names))
    label2id = {v: k for k, v in id2label.items()}
    for split in ("dev", "test"):
        if split in splits:
            check_labels(splits[split], label2id, task, split)

    family = family_of(model_dir)  # the head of the model's own family (a BERT's, a ModernBERT's)
    cls, head, template = family.head(task.name), {"id2label": id2label}, None
    # what a classifier reads, so that predictions refuse the other form (None: a tagger, or both forms seen)
    forms = {example.text_pair is not None for example in train} if not task.token_level else set()
    head["text_pairs"] = forms.pop() if len(forms) == 1 else None
    if options.prompt is not None:
        family.head("prompt")  # a family without a cloze head is refused by name
        cls, template = BertForPromptClassification, PromptTemplate(options.prompt)
        head["prompt"] = template.config(tokenizer, prompt_label_words(options, names))

    def featurize(examples):
        if task.token_level:
            return ner_features(examples, tokenizer, label2id, options.max_length, options.label_all_subtokens)
        if template is not None:
            ids, _ = template.encode(tokenizer, [e.text for e in examples], options.max_length)
            return [{"input_ids": row, "token_type_ids": [0] * len(row), "label": label2id[e.label]}
                    for row, e in zip(ids, examples)]
        return classification_features(examples, tokenizer, label2id, options.max_length)

    def scorer(examples):  # tokenized once, scored at each evaluation
        features = featurize(examples)
        tags = [e.tags for e in examples] if task.token_level else None
        return Scorer(len(features),
                      lambda model: evaluate_features(model, task, features, tokenizer.pad_token_id, id2label, tags))

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

