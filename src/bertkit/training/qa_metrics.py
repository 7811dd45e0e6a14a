"""Extractive QA scores as the official evaluation scripts compute them: exact match and F1, 0-100, each the
best over a question's reference answers, averaged over the questions.

- English (SQuAD v1.1's script): lowercase, drop ASCII punctuation and the articles a / an / the, split on
  white space; F1 over the bag of words. SQuAD v2.0's rule where a question has no answer: its reference is
  the empty answer, and an empty prediction scores 1 against it (`qa_scores`).
- Chinese (CMRC 2018's script): lowercase and strip; each Chinese character (U+4E00-U+9FA5) and each of the
  script's punctuation marks is a segment of its own, a run of other characters is split into words by NLTK's
  Treebank rules; F1 from the longest common *substring* of the two segment lists with the punctuation marks
  dropped; exact match compares the texts with those marks removed.

`qa_scores` picks the Chinese metric when most of the references' letters are CJK (as BLEU picks its tokenizer).
The one difference from CMRC's script: it runs nltk.word_tokenize, whose sentence splitter (Punkt) needs a model
download; here the Treebank word rules run without it, which differs only where a period ends a sentence inside
a run of non-Chinese text.
"""

from __future__ import annotations

import functools
import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence

from bertkit.errors import InputError

__all__ = ["squad_exact_match", "squad_f1", "cmrc_exact_match", "cmrc_f1", "qa_scores", "metric_language"]

# ---- SQuAD (English) -----------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lowercase, no ASCII punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def squad_exact_match(prediction: str, reference: str) -> float:
    """1.0 when the two answers are equal after normalisation, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(reference))


def squad_f1(prediction: str, reference: str) -> float:
    """Word-bag F1 of two normalised answers (SQuAD v1.1: 0 when they share no word, even two empty ones)."""
    predicted, gold = normalize_answer(prediction).split(), normalize_answer(reference).split()
    same = sum((Counter(predicted) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(gold)
    return 2 * precision * recall / (precision + recall)


# ---- CMRC 2018 (Chinese) -------------------------------------------------------------------------

# The script's marks, as it lists them ("……" is two characters, so one character never matches it: kept as listed)
CMRC_PUNCTUATION = frozenset(['-', ':', '_', '*', '^', '/', '\\', '~', '`', '+', '=',
                              '，', '。', '：', '？', '！', '“', '”', '；', '’', '《', '》', '……', '·', '、',
                              '「', '」', '（', '）', '－', '～', '『', '』'])
_CHINESE = re.compile(r"[\u4e00-\u9fa5]")


@functools.cache
def _word_tokenizer():
    from nltk.tokenize.destructive import NLTKWordTokenizer  # the Treebank rules; no model download

    return NLTKWordTokenizer()


def mixed_segmentation(text: str, drop_punctuation: bool = False) -> list[str]:
    """CMRC's segments: each Chinese character and punctuation mark alone, runs of other text split into words.

    As the script does, a dropped mark does not end a run: "ω-force" becomes the one word "ωforce"."""
    segments: list[str] = []
    run = ""
    for ch in text.lower().strip():
        if drop_punctuation and ch in CMRC_PUNCTUATION:
            continue
        if _CHINESE.match(ch) or ch in CMRC_PUNCTUATION:
            if run:
                segments += _word_tokenizer().tokenize(run)
                run = ""
            segments.append(ch)
        else:
            run += ch
    if run:
        segments += _word_tokenizer().tokenize(run)
    return segments


def _longest_common_substring(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest run of segments that both lists hold, in order and unbroken."""
    best, previous = 0, [0] * (len(b) + 1)
    for x in a:
        current = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                current[j + 1] = previous[j] + 1
                best = max(best, current[j + 1])
        previous = current
    return best


def cmrc_f1(prediction: str, reference: str) -> float:
    """F1 of the longest common substring of the two answers' segments, punctuation dropped."""
    predicted = mixed_segmentation(prediction, drop_punctuation=True)
    gold = mixed_segmentation(reference, drop_punctuation=True)
    common = _longest_common_substring(gold, predicted)
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def _without_punctuation(text: str) -> str:
    return "".join(ch for ch in text.lower().strip() if ch not in CMRC_PUNCTUATION)


def cmrc_exact_match(prediction: str, reference: str) -> float:
    """1.0 when the answers are equal once lowercased, stripped and rid of CMRC's punctuation marks."""
    return float(_without_punctuation(prediction) == _without_punctuation(reference))


# ---- over a data set -----------------------------------------------------------------------------

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
METRICS = {"squad": (squad_exact_match, squad_f1), "cmrc": (cmrc_exact_match, cmrc_f1)}


def metric_language(references: Sequence[Sequence[str]]) -> str:
    """"cmrc" when most letters of the references are CJK, else "squad"."""
    text = "".join(answer for answers in references for answer in answers)
    letters = sum(ch.isalpha() for ch in text)
    return "cmrc" if letters and len(_CJK.findall(text)) / letters > 0.5 else "squad"


def qa_scores(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]],
              metric: str | None = None) -> dict[str, float | int | str]:
    """{"exact_match", "f1"} (0-100) over every question of `references` ({id: reference answers}); a question
    missing from `predictions` scores 0, as in the official scripts. `metric` "squad" or "cmrc", None to choose by
    the references' language.

    A question with no reference answer (SQuAD 2.0's unanswerable ones) has the empty answer as its reference, and
    an empty prediction scores 1 on both measures there (SQuAD v2.0's rule, used for the Chinese metric too)."""
    if not references:
        raise InputError("QA scores of zero questions are undefined")
    metric = metric or metric_language(list(references.values()))
    if metric not in METRICS:
        raise InputError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}")
    exact_match, f1 = METRICS[metric]
    em_total = f1_total = 0.0
    for qid, answers in references.items():
        if qid not in predictions:
            continue
        prediction = predictions[qid]
        if not answers:  # SQuAD v2.0's rule for a question without an answer
            agree = float(not (normalize_answer(prediction) if metric == "squad" else _without_punctuation(prediction)))
            em_total, f1_total = em_total + agree, f1_total + agree
            continue
        em_total += max(exact_match(prediction, answer) for answer in answers)
        f1_total += max(f1(prediction, answer) for answer in answers)
    n = len(references)
    return {"exact_match": 100.0 * em_total / n, "f1": 100.0 * f1_total / n, "questions": n,
            "answered": sum(qid in predictions for qid in references), "metric": metric}
