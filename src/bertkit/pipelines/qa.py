"""Fine-tuning for extractive question answering, end to end: SQuAD-format questions -> windows -> the model
family's reader (a BERT's BertForQuestionAnswering, a ModernBERT's ModernBertForQuestionAnswering: the registry's
"qa" head) -> Trainer -> the best model on dev (F1) -> test scores and predictions.

    finetune_qa(FinetuneOptions(task="qa", model="all-MiniLM-L6-v2", train="squad-excerpt", out="runs/qa",
                                minutes=30))

Windows are bertkit.data.qa's (a long context in windows that overlap by --doc-stride tokens); answers are
decoded by bertkit.inference.qa over all windows of a question; exact match and F1 are the official scripts'
(bertkit.training.qa_metrics: SQuAD's for English, CMRC 2018's for Chinese). The window and decoding settings are
saved in the model's config (`qa`), so `bertkit predict` and `evaluate` read questions as they were trained.
The run between the windows and the scores (the model, its steps, the Trainer, the best checkpoint) is the one
every text task shares, `fine_tuning.fine_tune`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit.data.qa import QAExample, QAWindow, qa_windows
from bertkit.data.quality import DataReport
from bertkit.data.task_kinds import get_task
from bertkit.errors import InputError
from bertkit.inference.batching import collate
from bertkit.inference.qa import answer_windows
from bertkit.models.registry import family_of
from bertkit.pipelines.fine_tuning import (
    Scorer,
    TaskParts,
    fine_tune,
    sample_examples,
    start_run,
    warn_if_fewer_examples,
    write_results,
)
from bertkit.pipelines.options import FinetuneOptions
from bertkit.pipelines.run_directory import holds_out
from bertkit.training.qa_metrics import qa_scores
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_write_text

PREDICTIONS_NAME = "predictions.json"


@dataclass(frozen=True)
class WindowCollator:
    """Pads windows to the batch's longest; start_positions / end_positions come along for training."""

    pad_token_id: int

    def __call__(self, windows: Sequence[QAWindow], seeds: Sequence[int] | None = None) -> dict[str, torch.Tensor]:
        """The batch of `windows` (the trainer's `seeds` are not needed: nothing here is random)."""
        if not windows:
            raise ValueError("cannot collate an empty batch")
        input_ids, attention_mask, token_type_ids = collate(windows, self.pad_token_id)  # as inference pads
        return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask,
                "start_positions": torch.tensor([w.start_position for w in windows]),
                "end_positions": torch.tensor([w.end_position for w in windows])}


def score_answers(answers: Sequence[dict[str, Any]], examples: Sequence[QAExample]) -> dict[str, float]:
    """Exact match and F1 (0-100) of decoded answers (in example order) against the examples' references."""
    scores = qa_scores({e.id: answer["answer"] for e, answer in zip(examples, answers)},
                       {e.id: [a.text for a in e.answers] for e in examples})
    return {"exact_match": scores["exact_match"], "f1": scores["f1"]}


def load_qa_splits(options: FinetuneOptions) -> dict[str, list[QAExample]]:
    """train and dev (and test) questions: a named set's splits, or SQuAD-format files."""
    task = get_task("qa")
    splits = dict(task.load_dataset(options.train)) if options.train in task.datasets else {
        "train": task.read(options.train, "train", "to train on", encoding=options.encoding)}
    if "train" not in splits:
        raise InputError(f"{options.train} is an evaluation set (splits: {', '.join(splits)}); train on "
                         f"squad-excerpt or a SQuAD-format file, and give --test {options.train}")
    for name, spec in (("dev", options.dev), ("test", options.test)):
        if spec is not None:
            splits[name] = task.read(spec, name, "to evaluate on", encoding=options.encoding)
    for name in ("train", "dev"):
        if not splits.get(name):
            raise InputError(f"no {name} questions (give --{name} FILE, or a named dataset)")
    if not any(e.answers for e in splits["train"]):
        raise InputError("every training question is unanswerable: there is no answer to learn to point at")
    return splits


@holds_out("bertkit finetune")
def finetune_qa(options: FinetuneOptions) -> dict[str, Any]:
    """Train the model family's reader (its registry's "qa" head), keep the best dev checkpoint (F1), score it on
    test; returns (and writes) the results. The run holds options.out, as `bertkit finetune` does."""
    started, model_dir, tokenizer = start_run(options, "qa", "finetune_qa")
    reader = family_of(model_dir).head("qa")  # a family without a reader is refused by name, before any work
    splits = load_qa_splits(options)
    warn_if_fewer_examples(options, len(splits["train"]), "training questions")
    train = sample_examples(splits["train"], options)
    settings = {"max_length": options.max_length, "doc_stride": options.doc_stride,
                "max_answer_length": options.max_answer_length, "impossible": any(e.is_impossible for e in train)}
    decoding = {"max_answer_length": options.max_answer_length, "impossible": settings["impossible"]}

    def featurize(examples: Sequence[QAExample]) -> list[QAWindow]:
        return qa_windows(examples, tokenizer, options.max_length, options.doc_stride)

    def scorer(examples: Sequence[QAExample]):  # windowed once, answered at each evaluation
        windows = qa_windows(examples, tokenizer, options.max_length, options.doc_stride, labels=False)
        return Scorer(len(windows), lambda model: score_answers(
            answer_windows(model, examples, windows, tokenizer.pad_token_id, **decoding), examples))

    parts = TaskParts(model_class=reader, head={"qa": settings}, train=train, dev=splits["dev"],
                      featurize=featurize, collator=WindowCollator(tokenizer.pad_token_id), scorer=scorer,
                      metric="f1", report=DataReport("the training data"), unit="windows", finetuning_task="qa")
    run = fine_tune(options, parts, model_dir, tokenizer, started)

    state = run.state
    at_best = next((r for r in state.log_history if r.get("step") == state.best_step and "eval_f1" in r), {})
    results: dict[str, Any] = {"task": "qa", "model": options.model, "random_init": options.random_init,
                               "train_examples": len(train),
                               "train_windows": run.train_features, "steps": state.step,
                               "stop_reason": state.stop_reason, "train_seconds": run.train_seconds,
                               "best_step": state.best_step, "dev_f1": state.best_metric,
                               "dev_exact_match": at_best.get("eval_exact_match"), "settings": settings,
                               "best_model": str(run.best_dir)}
    if splits.get("test"):
        test = splits["test"]
        test_windows = qa_windows(test, tokenizer, options.max_length, options.doc_stride, labels=False)
        answers = answer_windows(run.model, test, test_windows, tokenizer.pad_token_id, **decoding)
        results.update({f"test_{k}": v for k, v in score_answers(answers, test).items()})
        atomic_write_text(Path(options.out) / PREDICTIONS_NAME, jsonfiles.dumps(
            {e.id: a["answer"] for e, a in zip(test, answers)}, indent=1, ensure_ascii=False))
    write_results(options, results)
    return results
