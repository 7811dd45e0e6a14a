"""Evaluation metrics: accuracy, macro-F1, entity-level P/R/F1 (seqeval's rules), BLEU, perplexity.

Inputs are plain sequences, NumPy arrays or tensors; results are Python floats, so an `eval_fn`
can return them straight to the trainer's log.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from bertkit.data.entities import get_entities
from bertkit.errors import InputError

__all__ = ["accuracy", "macro_f1", "get_entities", "entity_scores", "bleu", "perplexity"]


def _flat(values: Any) -> np.ndarray:
    """A 1-D NumPy array from a list, array or (CPU or GPU) tensor."""
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    return np.asarray(values).reshape(-1)


def _pair(predictions: Any, labels: Any, ignore_index: int | None) -> tuple[np.ndarray, np.ndarray]:
    pred, gold = _flat(predictions), _flat(labels)
    if pred.shape != gold.shape:
        raise InputError(f"predictions and labels differ in size: {pred.shape[0]} vs {gold.shape[0]}")
    if ignore_index is not None:
        keep = gold != ignore_index
        pred, gold = pred[keep], gold[keep]
    return pred, gold


def accuracy(predictions: Any, labels: Any, ignore_index: int | None = -100) -> float:
    """Fraction of predictions equal to the label; positions labelled `ignore_index` are skipped."""
    pred, gold = _pair(predictions, labels, ignore_index)
    if gold.size == 0:
        raise InputError("accuracy of zero examples is undefined (no labels, or all equal to ignore_index)")
    return float((pred == gold).mean())


def macro_f1(predictions: Any, labels: Any, ignore_index: int | None = -100) -> float:
    """Unweighted mean of per-class F1 over the classes present in the labels or the predictions.

    Per class F1 = 2·TP / (2·TP + FP + FN); a class only ever predicted (never gold) scores 0,
    as in scikit-learn's `f1_score(average="macro")`.
    """
    pred, gold = _pair(predictions, labels, ignore_index)
    if gold.size == 0:
        raise InputError("macro-F1 of zero examples is undefined")
    scores = []
    for cls in np.union1d(gold, pred):
        tp = np.sum((pred == cls) & (gold == cls))
        fp = np.sum((pred == cls) & (gold != cls))
        fn = np.sum((pred != cls) & (gold == cls))
        scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores))


# ---- entities (decoded by bertkit.data.entities, seqeval's default mode) ----------------------------
#
# Precision, recall and F1 are micro-averaged over exact (type, start, end) matches.

def _prf(correct: int, num_pred: int, num_true: int) -> dict[str, float]:
    precision = correct / num_pred if num_pred else 0.0
    recall = correct / num_true if num_true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def entity_scores(true_tags: Iterable[Sequence[str]], pred_tags: Iterable[Sequence[str]],
                  by_type: bool = False) -> dict[str, Any]:
    """Entity-level micro precision/recall/F1 over sentences of BIO/BIOES/BMES tags (seqeval's default mode).

    Returns {"precision", "recall", "f1", "num_true", "num_pred", "num_correct"}, plus
    {"by_type": {type: {"precision", "recall", "f1", "support"}}} when `by_type`.
    """
    gold: set[tuple[int, str, int, int]] = set()
    pred: set[tuple[int, str, int, int]] = set()
    num_sentences = 0
    for n, (true_seq, pred_seq) in enumerate(zip(true_tags, pred_tags, strict=True)):
        if len(true_seq) != len(pred_seq):
            raise InputError(f"sentence {n}: {len(true_seq)} gold tags but {len(pred_seq)} predicted tags")
        gold.update((n, *entity) for entity in get_entities(true_seq))
        pred.update((n, *entity) for entity in get_entities(pred_seq))
        num_sentences += 1
    if num_sentences == 0:
        raise InputError("entity scores of zero sentences are undefined")
    result: dict[str, Any] = _prf(len(gold & pred), len(pred), len(gold))
    result.update(num_true=len(gold), num_pred=len(pred), num_correct=len(gold & pred))
    if by_type:
        result["by_type"] = {}
        for kind in sorted({e[1] for e in gold}):
            g = {e for e in gold if e[1] == kind}
            p = {e for e in pred if e[1] == kind}
            result["by_type"][kind] = {**_prf(len(g & p), len(p), len(g)), "support": len(g)}
    return result


# ---- BLEU and perplexity --------------------------------------------------------------------------

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def bleu(hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]],
         tokenize: str | None = None) -> float:
    """Corpus BLEU (0–100) by sacrebleu; `references[i]` is one reference string or a list of them.

    `tokenize=None` picks sacrebleu's "zh" tokenizer when the references are mostly CJK text, else "13a".
    """
    return bleu_details(hypotheses, references, tokenize)["bleu"]


def bleu_details(hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]],
                 tokenize: str | None = None) -> dict[str, Any]:
    """BLEU and its parts: the 1- to 4-gram precisions (%), the brevity penalty and the length ratio
    (hypothesis tokens / reference tokens). BLEU = BP · geometric mean of the precisions, so a model whose
    precisions are high but whose output is short (ratio < 1) loses to the brevity penalty alone."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise InputError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise InputError("BLEU of zero sentences is undefined")
    per_hyp = [[ref] if isinstance(ref, str) else list(ref) for ref in references]
    counts = {len(refs) for refs in per_hyp}
    if len(counts) != 1:
        raise InputError(f"every hypothesis needs the same number of references, got {sorted(counts)}")
    streams = [list(stream) for stream in zip(*per_hyp)]  # sacrebleu wants one list per reference set
    if tokenize is None:
        text = "".join(stream for refs in per_hyp for stream in refs)
        letters = sum(ch.isalpha() for ch in text)
        tokenize = "zh" if letters and len(_CJK.findall(text)) / letters > 0.5 else "13a"
    score = sacrebleu.corpus_bleu(list(hypotheses), streams, tokenize=tokenize)
    return {"bleu": float(score.score), "precisions": [float(p) for p in score.precisions],
            "brevity_penalty": float(score.bp), "length_ratio": float(score.ratio),
            "hypothesis_length": score.sys_len, "reference_length": score.ref_len, "tokenize": tokenize}


def perplexity(mean_loss: float) -> float:
    """exp(mean cross-entropy in nats); inf when that overflows a float."""
    if math.isnan(mean_loss):
        raise InputError("perplexity of a NaN loss is undefined")
    return math.exp(mean_loss) if mean_loss < 709.0 else math.inf
