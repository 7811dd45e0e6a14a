"""What the labelled tasks (classify, pairs, ner) share: the labelled run trains them (bertkit.pipelines.finetune),
their model keeps its label names (config.id2label), and /info shows those labels.

The labelled run asks a task's record for the parts below that raise NotImplementedError: what the data report
measures (`describe`), the head and its config (`head`), the features (`features`) and the scores (`score`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit.data.task_kinds import TaskKind


class LabelledTask(TaskKind):
    """A task whose examples carry labels and whose head's outputs are scores over them."""

    def train(self, options: Any) -> dict[str, Any]:
        from bertkit.pipelines.finetune import finetune

        return finetune(options)

    def kept(self, results: dict[str, Any]) -> str:
        return f"best model (labels {', '.join(results['labels'])}) in {results['best_model']}"

    def check_tokenizer(self, tokenizer: Any, model_dir: Path) -> None:
        """Refuse a tokenizer the task cannot use (none, unless the task says)."""

    def sample(self, train: list, options: Any) -> list:
        """A seeded sample of --max-train-examples of the training examples, in their order."""
        from bertkit.pipelines.fine_tuning import sample_examples

        return sample_examples(train, options)

    def describe(self, report: Any, train: list, dev: list | None) -> None:
        """What the data report (bertkit.data.quality.DataReport) measures of the data."""
        raise NotImplementedError

    def head(self, family: Any, options: Any, tokenizer: Any, train: list, names: list[str]
             ) -> tuple[Any, dict[str, Any]]:
        """(the model class, its head's config fields, saved with the model) for `names`, the labels by id."""
        raise NotImplementedError

    def features(self, examples: Sequence, tokenizer: Any, label2id: dict[str, int], options: Any) -> list[dict]:
        """Each example's token ids and label ids (bertkit.pipelines.finetune.Collator batches them)."""
        raise NotImplementedError

    def score(self, model: Any, features: list[dict], examples: Sequence, pad_token_id: int,
              id2label: dict[int, str]) -> dict[str, float]:
        """The dev (and test) scores of `model` on `features`, the task's metric among them."""
        raise NotImplementedError

    def serving_state(self, model: Any, path: Path) -> dict[str, Any]:
        from bertkit.inference.predict import label_names

        return {"labels": label_names(model)}

    def serve_info(self, served: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        id2label = {str(i): label for i, label in enumerate(served.labels)}
        label2id = {label: i for i, label in enumerate(served.labels)}
        return {served.task: {"id2label": id2label, "label2id": label2id}}, {}
