"""`--task ner`: a tag per token (BIO, BIOES or BMES), read off each word's first sub-token; entities are the
runs of tags, scored as seqeval scores them (entity precision, recall and F1).

Reads CoNLL files (bertkit.data.readers) or the named set msra-ner (a character per token); keeps the checkpoint of
best dev entity F1; predicts entity spans with character offsets into each text; serves them on /predict.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit.data.task_kinds import register
from bertkit.errors import InputError
from bertkit.tasks._labelled import LabelledTask
from bertkit.utils.constants import IGNORE_INDEX


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


def scheme(labels: Sequence[str]) -> str:
    """The tagging scheme labels are in: "BMES" where any is M-, E- or S-, else "BIO"."""
    return "BMES" if any(label[:2] in ("M-", "E-", "S-") for label in labels) else "BIO"


class NER(LabelledTask):
    """A tag per word; the entities are what is scored, predicted and served."""

    # ---- data ------------------------------------------------------------------------------------

    def labels(self, example: Any) -> list[str]:
        return list(example.tags)

    def label_names(self, examples: Sequence) -> list[str]:
        """Sorted, with "O" first (as tagging schemes list it)."""
        names = sorted({tag for example in examples for tag in example.tags})
        return ["O", *(name for name in names if name != "O")]

    def named_splits(self, name: str, scheme: str) -> dict[str, list]:
        from bertkit.data.tasks import load_ner

        return load_ner(name, scheme=scheme)

    def parse_file(self, path: Path, purpose: str, encoding: str) -> list:
        from bertkit.data.readers import read_conll

        return read_conll(path, encoding=encoding)

    # ---- training: bertkit.pipelines.finetune, the labelled tasks' run, calls these ----------------

    def check_tokenizer(self, tokenizer: Any, model_dir: Path) -> None:
        from bertkit.tokenizer import BPETokenizer

        if isinstance(tokenizer, BPETokenizer):
            raise InputError(f"--task {self.name} is not implemented for the byte-level BPE tokenizer of {model_dir}: "
                             "it tokenizes each word on its own, and BPE's ids depend on the space before a word")

    def describe(self, report: Any, train: list, dev: list | None) -> None:
        report.tags([e.tags for e in train])

    def head(self, family: Any, options: Any, tokenizer: Any, train: list, names: list[str]
             ) -> tuple[Any, dict[str, Any]]:
        return family.head(self.name), {"id2label": dict(enumerate(names)), "text_pairs": None}

    def features(self, examples: Sequence, tokenizer: Any, label2id: dict[str, int], options: Any) -> list[dict]:
        return ner_features(examples, tokenizer, label2id, options.max_length, options.label_all_subtokens)

    def score(self, model: Any, features: list[dict], examples: Sequence, pad_token_id: int,
              id2label: dict[int, str]) -> dict[str, float]:
        """Entity precision, recall and F1 (seqeval's) of each word's first sub-token's best tag."""
        from bertkit.pipelines.finetune import predict_logits
        from bertkit.training import metrics

        pred_tags = []
        for f, row in zip(features, predict_logits(model, features, pad_token_id)):
            tags = ["O"] * f["num_words"]  # words cut off by max_length, or without tokens, count as O
            for position, w in enumerate(f["word_index"]):
                if w >= 0:
                    tags[w] = id2label[int(row[position].argmax())]
            pred_tags.append(tags)
        scores = metrics.entity_scores([e.tags for e in examples], pred_tags)
        return {"precision": scores["precision"], "recall": scores["recall"], "f1": scores["f1"]}

    # ---- prediction and evaluation ---------------------------------------------------------------

    def predict(self, run: Any, model: Any, tokenizer: Any, texts: list[str], pairs: list | None, *,
                batch_size: int, max_length: int | None, truncation: bool) -> list:
        from bertkit.inference.predict import entity_spans, label_names, tag_tokens

        if pairs is not None and any(pair is not None for pair in pairs):
            raise InputError("token classification (NER) tags single texts; text_pairs are for classifiers")
        labels = label_names(model)
        tagged = tag_tokens(run, model, tokenizer, texts, batch_size, max_length, truncation)
        return [entity_spans(text, tokenizer, row, tags, scores, labels)
                for text, (row, tags, scores) in zip(texts, tagged)]

    def prediction_lines(self, text: str, pair: str | None, result: Any) -> list[str]:
        return [text, *(f"  {span['entity']:<6} {span['start']:>4}:{span['end']:<4} {span['score']:.3f}  {span['text']}"
                        for span in result)] + ([] if result else ["  (no entities)"])

    def prediction_record(self, result: Any) -> dict[str, Any]:
        return {"entities": result}

    def evaluate(self, model: Any, tokenizer: Any, data: str, split: str, encoding: str, flags: bool,
                 **options: Any) -> dict[str, Any]:
        """Entity precision, recall and F1 on `data`, overall and by entity type."""
        from bertkit.data.tasks import bmes_to_bio
        from bertkit.inference import label_names, tag_words
        from bertkit.pipelines.predict import check_evaluation_labels
        from bertkit.training import metrics

        labels = label_names(model)
        examples = self.read(data, split, "to evaluate on", scheme=scheme(labels), encoding=encoding)
        gold = [example.tags for example in examples]
        found = {tag for tags in gold for tag in tags}
        if not found <= set(labels) and scheme(labels) == "BIO" and scheme(sorted(found)) == "BMES":
            gold = [bmes_to_bio(tags) for tags in gold]  # a BMES file scored against a BIO model: same entities
            found = {tag for tags in gold for tag in tags}
        check_evaluation_labels(found, labels, data)
        predicted = tag_words(model, tokenizer, [example.tokens for example in examples], **options)
        scores = metrics.entity_scores(gold, predicted, by_type=True)
        return {"task": self.family, "data": data, "examples": len(examples),
                **{key: scores[key] for key in ("precision", "recall", "f1", "num_true", "num_pred", "num_correct",
                                                "by_type")}}

    def evaluation_lines(self, scores: dict[str, Any], where: str) -> list[str]:
        return [f"{where}: {scores['examples']:,} sentences, {scores['num_true']:,} entities "
                f"({scores['num_pred']:,} predicted, {scores['num_correct']:,} correct)",
                f"{'entity':<10}{'precision':>10}{'recall':>10}{'F1':>10}{'gold':>8}",
                f"{'all':<10}{scores['precision']:>10.4f}{scores['recall']:>10.4f}{scores['f1']:>10.4f}"
                f"{scores['num_true']:>8}",
                *(f"{kind:<10}{s['precision']:>10.4f}{s['recall']:>10.4f}{s['f1']:>10.4f}{s['support']:>8}"
                  for kind, s in scores["by_type"].items())]

    # ---- serving ---------------------------------------------------------------------------------

    def serve_rows(self, served: Any, tokenizer: Any, texts: list[str], pairs: list | None, truncate: bool) -> list:
        from bertkit.inference.predict import tagger_rows

        return tagger_rows(served.model, tokenizer, texts, None, truncate)

    def serve_forward(self, served: Any, input_ids: Any, attention_mask: Any, token_type_ids: Any,
                      logits: bool) -> Any:
        from bertkit.inference.predict import token_tags

        return token_tags(served.model, input_ids, attention_mask, token_type_ids)

    async def serve_predict(self, server: Any, served: Any, body: dict[str, Any]) -> Any:
        """Each text's entity spans."""
        from bertkit.inference.predict import entity_spans
        from bertkit.inference.serving.payloads import invalid, take_raw_scores
        from bertkit.inference.serving.routes import text_request
        from bertkit.inference.serving.server import text_rows

        if take_raw_scores(body):
            raise invalid("raw_scores is for classifiers: a tagger (NER) answers entity spans")
        query, left = text_request(server, served, body)
        if query.pairs is not None:
            raise invalid("this server serves a tagger (NER), which reads single texts; send no text pairs")
        rows = text_rows(served, query.texts, query.pairs, query.truncate, left=left)
        outputs = await server.infer(rows)
        results = [entity_spans(text, served.tokenizer, row, tags, scores, served.labels)
                   for text, row, (tags, scores) in zip(query.texts, rows, outputs)]
        return results[0] if query.single else results


TAGGER = register(NER("ner", "ner", "f1", ("msra-ner",), files="CoNLL", served="ner"))
