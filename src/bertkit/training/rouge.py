"""ROUGE-1, ROUGE-2 and ROUGE-L (Lin, 2004), scored on characters as Chinese summarisation is (LCSTS).

Per example, on token sequences (characters for Chinese, words for English):

- ROUGE-N: the n-grams the hypothesis and the reference share, each counted as often as it occurs in both
  (clipped counts); precision = shared / the hypothesis' n-grams, recall = shared / the reference's.
- ROUGE-L: the longest common subsequence (LCS, in order, not necessarily contiguous); precision = LCS / the
  hypothesis' length, recall = LCS / the reference's.
- F1 = 2PR / (P + R), 0 when nothing is shared; a side with no n-grams scores 0 (as Google's `rouge-score`).

`corpus_rouge` scores texts on their characters (lowercased, white space dropped: a summary's spacing is not its
content) and gives the corpus score as the mean of the per-example F1, times 100 (not an F1 of pooled counts):
the convention of LCSTS and of Google's `rouge-score` aggregation. Pure functions over sequences; no torch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from typing import NamedTuple

from bertkit.errors import InputError

__all__ = ["RougeScore", "rouge_n", "rouge_l", "lcs_length", "characters", "rouge_scores", "corpus_rouge"]

METRICS = ("rouge1", "rouge2", "rougeL")


class RougeScore(NamedTuple):
    """One example's score, each in [0, 1] (the field names of `rouge-score`'s Score)."""

    precision: float
    recall: float
    fmeasure: float


def _score(shared: int, hypothesis_count: int, reference_count: int) -> RougeScore:
    precision = shared / hypothesis_count if hypothesis_count else 0.0
    recall = shared / reference_count if reference_count else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return RougeScore(precision, recall, f1)


def _ngrams(tokens: Sequence[Hashable], n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def rouge_n(hypothesis: Sequence[Hashable], reference: Sequence[Hashable], n: int) -> RougeScore:
    """ROUGE-N of two token sequences: clipped n-gram overlap as precision, recall and F1."""
    if n < 1:
        raise InputError(f"ROUGE-N needs n of 1 or more, got {n}")
    hyp, ref = _ngrams(hypothesis, n), _ngrams(reference, n)
    return _score(sum((hyp & ref).values()), sum(hyp.values()), sum(ref.values()))


def lcs_length(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """The length of the longest common subsequence of a and b: dynamic programming, one row of b at a time,
    O(len(a)·len(b)) time, O(len(b)) memory."""
    row = [0] * (len(b) + 1)                  # row[j] = LCS(a[:i], b[:j]) for the current i
    for x in a:
        diagonal = 0                          # LCS(a[:i-1], b[:j-1])
        for j, y in enumerate(b, start=1):
            diagonal, row[j] = row[j], diagonal + 1 if x == y else max(row[j], row[j - 1])
    return row[-1]


def rouge_l(hypothesis: Sequence[Hashable], reference: Sequence[Hashable]) -> RougeScore:
    """ROUGE-L of two token sequences: their longest common subsequence as precision, recall and F1."""
    return _score(lcs_length(hypothesis, reference), len(hypothesis), len(reference))


def characters(text: str) -> list[str]:
    """The tokens Chinese ROUGE counts: each character, lowercased, white space dropped."""
    return [ch for ch in text.lower() if not ch.isspace()]


def rouge_scores(hypothesis: Sequence[Hashable], reference: Sequence[Hashable]) -> dict[str, RougeScore]:
    """{"rouge1", "rouge2", "rougeL"} of one example's token sequences."""
    return {"rouge1": rouge_n(hypothesis, reference, 1), "rouge2": rouge_n(hypothesis, reference, 2),
            "rougeL": rouge_l(hypothesis, reference)}


def corpus_rouge(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """{"rouge1", "rouge2", "rougeL"} of texts on their characters: the mean of the per-example F1, times 100."""
    for name, texts in (("summaries", hypotheses), ("references", references)):
        # a string is a sequence too, of characters: scored as such it would be that many one-character texts
        if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
            raise InputError(f"the {name} must be a list of texts, one per example, not {type(texts).__name__}")
        bad = next((i for i, text in enumerate(texts) if not isinstance(text, str)), None)
        if bad is not None:
            raise InputError(f"item {bad} of the {name} is {type(texts[bad]).__name__}, not a text")
    if len(hypotheses) != len(references):
        raise InputError(f"{len(hypotheses)} summaries for {len(references)} references: one each is needed")
    if not references:
        raise InputError("no summaries to score")
    totals = dict.fromkeys(METRICS, 0.0)
    for hypothesis, reference in zip(hypotheses, references):
        for name, score in rouge_scores(characters(hypothesis), characters(reference)).items():
            totals[name] += score.fmeasure
    return {name: 100 * total / len(references) for name, total in totals.items()}
