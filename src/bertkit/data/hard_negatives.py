"""Hard negatives: for each (anchor, positive) pair, documents a model ranks high for the anchor that are not its
positive. Trained against them (`finetune --task embedding` on rows anchor, positive, negative), a model learns the
distinctions in-batch negatives are too easy to teach: with 32 random documents in a batch, the positive is
usually found at once and the loss says little.

A high-ranked document may also be an unlabelled positive (the same story told again, a second answer), so a
candidate is skipped when

- it scores at least `margin` x the positive's score for the anchor (too close to call), or
- it is a near copy of the positive itself (cosine >= `duplicate` between the two documents).

The negatives are drawn at random (seeded) from the first `candidates` documents of the ranking (the anchor's
own positives aside) that are not skipped: the very top is where the unlabelled positives gather. A pair whose
positive the model ranks below `max_positive_rank` may be mislabelled (a title that does not belong to its body):
such rows are dropped when that limit is given. Rows with fewer hard candidates than asked are filled with random
documents that the rules would not skip, counted in `Mined.filled`.

Vectors are unit rows (cosine = dot product); the maths is NumPy, a block of queries at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bertkit.errors import InputError

BLOCK = 1024  # queries scored at a time: BLOCK x documents floats


@dataclass(frozen=True)
class Mined:
    """Per query: its negatives (document indices; empty where the row was dropped), whether it was kept, the
    rank (1 = first) the model gave its positive, and how many negatives had to be drawn at random."""

    negatives: list[list[int]]
    kept: np.ndarray
    positive_rank: np.ndarray
    filled: int


def check_mining(negatives: int, candidates: int, margin: float, duplicate: float,
                 max_positive_rank: int | None) -> None:
    if negatives < 1:
        raise InputError(f"negatives must be at least 1, not {negatives}")
    if candidates < negatives:
        raise InputError(f"candidates ({candidates}) must be at least negatives ({negatives}): the negatives are "
                         "drawn from the first `candidates` documents")
    if not 0 < margin <= 1:
        raise InputError(f"margin must be in (0, 1], not {margin}: a candidate scoring margin x the positive's "
                         "score or more is skipped")
    if not -1 < duplicate <= 1:
        raise InputError(f"duplicate must be in (-1, 1], not {duplicate}: a cosine between two documents")
    if max_positive_rank is not None and max_positive_rank < 1:
        raise InputError(f"max_positive_rank must be at least 1, not {max_positive_rank}")


def fill(allowed: np.ndarray, loose: np.ndarray, count: int, rng: np.random.Generator) -> list[int]:
    """`count` random indices where `allowed` holds, or, where too few do, where `loose` holds."""
    pool = np.flatnonzero(allowed if allowed.sum() >= count else loose)
    return [int(j) for j in rng.choice(pool, count, replace=False)]


def mine_hard_negatives(queries: np.ndarray, documents: np.ndarray, positive: Sequence[int],
                        related: Sequence[frozenset[int]] | None = None, *, negatives: int = 1,
                        candidates: int = 30, margin: float = 0.95, duplicate: float = 0.9,
                        max_positive_rank: int | None = None, seed: int = 0) -> Mined:
    """Negatives for query i from `documents` (unit rows), `positive[i]` its positive's index; `related[i]`: the
    documents never to give query i (its other positives; default: just `positive[i]`)."""
    check_mining(negatives, candidates, margin, duplicate, max_positive_rank)
    positive = np.asarray(positive, dtype=np.int64)
    n_docs = len(documents)
    if len(queries) != len(positive):
        raise InputError(f"{len(queries)} queries but {len(positive)} positives")
    related = related or [frozenset((int(p),)) for p in positive]
    if n_docs - max(len(r) for r in related) < negatives:
        most = max(len(r) for r in related)
        own = "positive is" if most == 1 else f"{most} positives are"
        raise InputError(f"the data has {n_docs:,} distinct document{'s' if n_docs != 1 else ''} (positives), and a "
                         f"query's own {own} among them: fewer than the {negatives} "
                         f"other{'s' if negatives != 1 else ''} --negatives asks for a query; give pairs with more "
                         "different positives, or fewer --negatives")
    rng = np.random.default_rng(seed)
    found: list[list[int]] = []
    kept = np.ones(len(queries), dtype=bool)
    ranks = np.zeros(len(queries), dtype=np.int64)
    filled = 0
    depth = min(n_docs, candidates + max(len(r) for r in related))  # enough to find `candidates` others
    for start in range(0, len(queries), BLOCK):
        scores = queries[start:start + BLOCK] @ documents.T
        own = scores[np.arange(len(scores)), positive[start:start + BLOCK]]
        ranks[start:start + len(scores)] = (scores > own[:, None]).sum(axis=1) + 1
        top = np.argpartition(-scores, depth - 1, axis=1)[:, :depth]
        for row, i in enumerate(range(start, start + len(scores))):
            if max_positive_rank is not None and ranks[i] > max_positive_rank:
                kept[i] = False
                found.append([])
                continue
            order = [int(j) for j in top[row][np.argsort(-scores[row, top[row]], kind="stable")]
                     if j not in related[i]][:candidates]
            near = documents[order] @ documents[positive[i]] if order else np.zeros(0)
            hard = [j for j, copy in zip(order, near) if scores[row, j] < margin * own[row] and copy < duplicate]
            chosen = [hard[k] for k in sorted(rng.choice(len(hard), min(negatives, len(hard)), replace=False))]
            missing = negatives - len(chosen)
            if missing:  # too few hard ones: random documents the rules let through, as in-batch negatives are
                loose = np.ones(n_docs, dtype=bool)
                loose[[*related[i], *chosen]] = False
                allowed = (loose & (scores[row] < margin * own[row])
                           & (documents @ documents[positive[i]] < duplicate))
                chosen += fill(allowed, loose, missing, rng)
                filled += missing
            found.append(chosen)
    return Mined(found, kept, ranks, filled)
