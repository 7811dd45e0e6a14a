"""The tasks `bertkit finetune --task` trains, one record each: the pipeline that trains it, how its scores print,
and the line that says what the run kept. The command line loops over these records; nothing else branches on a
task's name to run or report it.

A record names its pipeline as "module:function" (as bertkit.models.registry names its classes), imported when a run
of that task starts: reading the records (the command line does, to offer --task) imports no pipeline, and no
torch. The options a task alone takes are declared in its options with `tasks=` (bertkit.pipelines.options.finetune),
and refused for any other task. A labelled task's data and head are its kind's (bertkit.data.task_kinds).

To add a task: its pipeline (a function of FinetuneOptions returning the results dict that fine_tuning.fine_tune
writes), its head (bertkit.models.registry), and its record here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def _labels_line(results: dict[str, Any]) -> str:
    return f"best model (labels {', '.join(results['labels'])}) in {results['best_model']}"


def _reader_line(results: dict[str, Any]) -> str:
    return f"best model in {results['best_model']}"


def _vectors_line(results: dict[str, Any]) -> str:
    return (f"{results['loss']} loss on {results['shape']}; best model ({results['pooling']} pooling"
            f"{', normalized' if results['normalize'] else ''}, sentence-transformers' files) in "
            f"{results['best_model']}")


@dataclass(frozen=True)
class FinetuneTask:
    """One task: its name (--task), its pipeline ("module:function", FinetuneOptions -> results), the line that says
    what the run kept, and the digits its scores print with."""

    name: str
    pipeline: str
    kept: Callable[[dict[str, Any]], str]
    digits: int = 4

    def train(self, options: Any) -> dict[str, Any]:
        """Run the task's pipeline on `options` (a FinetuneOptions of this task)."""
        module, _, function = self.pipeline.partition(":")
        return getattr(importlib.import_module(module), function)(options)

    def report(self, results: dict[str, Any]) -> list[str]:
        """What the command prints when a run ends: the steps and scores, then what it kept."""
        scores = ", ".join(f"{k} {v:.{self.digits}f}" for k, v in results.items()
                           if k.startswith(("dev_", "test_")) and v is not None)
        return [f"fine-tuned {results['steps']} steps in {results['train_seconds']:.0f} s ({results['stop_reason']}); "
                f"{scores}", self.kept(results)]


LABELLED = "bertkit.pipelines.finetune:finetune"  # the labelled kinds' one pipeline: data and head from the kind
FINETUNE_TASKS = {task.name: task for task in (
    FinetuneTask("classify", LABELLED, _labels_line),
    FinetuneTask("pairs", LABELLED, _labels_line),
    FinetuneTask("ner", LABELLED, _labels_line),
    # percentages, as the official SQuAD scripts print them
    FinetuneTask("qa", "bertkit.pipelines.qa:finetune_qa", _reader_line, digits=2),
    FinetuneTask("embedding", "bertkit.pipelines.embedding:finetune_embedding", _vectors_line),
)}
