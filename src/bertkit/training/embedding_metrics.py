"""How good sentence vectors are: the standard metrics of retrieval, bitext mining, clustering and STS, as pure
functions of vectors and gold labels (NumPy only; `bertkit evaluate --task ...` encodes the texts and calls these).

    retrieval   MRR@10, nDCG@10 and recall@k of the documents ranked by cosine to each query (binary relevance)
    bitext      each sentence's nearest candidate by cosine is its translation or not: accuracy, and F1 as MTEB's
                bitext mining computes it (each candidate a class, averaged over the gold ones)
    clustering  k-means (k-means++ seeding, a fixed seed, the best of n_init runs) of the unit vectors, scored by
                V-measure against the gold classes
    sts         Spearman's rank correlation between the pairs' cosines and their gold scores

Each is checked against a hand-worked example, and against scikit-learn / SciPy where they compute the same
(tests/test_embedding_metrics.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from bertkit.errors import InputError

RECALL_AT = (1, 5, 10, 100)


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero), in float32."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def top_k(queries: np.ndarray, corpus: np.ndarray, k: int, block: int = 1024) -> np.ndarray:
    """(Q, min(k, N)) indices of each query's k documents of highest cosine, best first (ties: the lower index
    first), computed `block` queries at a time so the (Q, N) scores are never held whole."""
    queries, corpus = unit_rows(queries), unit_rows(corpus)
    k = min(k, len(corpus))
    found = []
    for start in range(0, len(queries), block):
        scores = queries[start:start + block] @ corpus.T                       # (b, N)
        # a stable sort of the negated scores keeps equal scores in index order
        found.append(np.argsort(-scores, axis=1, kind="stable")[:, :k])
    return np.concatenate(found) if found else np.zeros((0, k), dtype=np.int64)


def retrieval_scores(ranked: np.ndarray, relevant: Sequence[frozenset[int] | set[int]],
                     recall_at: Sequence[int] = RECALL_AT) -> dict[str, float]:
    """MRR@10, nDCG@10 and recall@k of ranked document indices (Q, ≥ max k) against each query's relevant set,
    averaged over queries.

    MRR@10: 1 / the rank of the first relevant document among the first 10 (0 when none is there).
    nDCG@10: sum over the first 10 ranks r of rel_r / log2(r + 1), over the same sum for the ideal ranking.
    recall@k: the share of a query's relevant documents among its first k."""
    if len(ranked) != len(relevant):
        raise InputError(f"{len(ranked)} rankings for {len(relevant)} queries")
    if not len(relevant):
        raise InputError("no queries to score")
    discounts = 1.0 / np.log2(np.arange(2, 12))                                  # ranks 1..10
    mrr = ndcg = 0.0
    recall = dict.fromkeys(recall_at, 0.0)
    for row, gold in zip(ranked, relevant):
        if not gold:
            raise InputError("a query without a relevant document cannot be scored")
        hits = np.array([int(i) in gold for i in row[:max(10, *recall_at)]], dtype=bool)
        first = np.flatnonzero(hits[:10])
        mrr += 1.0 / (first[0] + 1) if len(first) else 0.0
        ideal = discounts[:min(len(gold), 10)].sum()
        ndcg += float((hits[:10] * discounts[:len(hits[:10])]).sum() / ideal)
        for k in recall_at:
            recall[k] += hits[:k].sum() / len(gold)
    n = len(relevant)
    return {"mrr@10": mrr / n, "ndcg@10": ndcg / n, **{f"recall@{k}": value / n for k, value in recall.items()}}


def bitext_scores(source: np.ndarray, target: np.ndarray) -> dict[str, float]:
    """Each source sentence's nearest target by cosine, where target[i] translates source[i]: accuracy, and the F1
    of MTEB's bitext mining (scikit-learn's f1_score(gold, found, average="weighted")). With each target a class
    holding one gold sentence, that F1 is the mean over targets j of [found_j = j] · 2 / (1 + the number of
    sentences that found j): a right answer that others also chose counts less."""
    if len(source) != len(target) or not len(source):
        raise InputError(f"bitext mining needs aligned sentences; got {len(source)} and {len(target)}")
    found = top_k(source, target, 1)[:, 0]
    gold = np.arange(len(source))
    right = found == gold
    chosen = np.bincount(found, minlength=len(target))
    f1 = np.where(right, 2.0 / (1.0 + chosen[gold]), 0.0)
    return {"accuracy": float(right.mean()), "f1": float(f1.mean())}


# ---- clustering ----------------------------------------------------------------------------------

def kmeans(vectors: np.ndarray, k: int, seed: int = 0, n_init: int = 10, max_iter: int = 300) -> np.ndarray:
    """Cluster labels (N,) of k-means on `vectors`: k-means++ seeding, Lloyd's iterations until no point moves,
    the run of least inertia among `n_init` (seeded by `seed`: the same labels on every run). A cluster left empty
    takes the point farthest from its centre."""
    x = np.asarray(vectors, dtype=np.float64)
    if not 1 <= k <= len(x):
        raise InputError(f"k-means needs 1 <= k <= the number of points, got k={k} for {len(x)}")
    rng = np.random.default_rng(seed)
    squared = (x * x).sum(1)
    best, best_inertia = None, math.inf
    for _ in range(n_init):
        centres = _plus_plus(x, squared, k, rng)
        labels = np.full(len(x), -1)
        for _ in range(max_iter):
            distances = squared[:, None] - 2 * x @ centres.T + (centres * centres).sum(1)[None, :]
            new = distances.argmin(1)
            if np.array_equal(new, labels):
                break
            labels = new
            for c in range(k):
                members = labels == c
                if members.any():
                    centres[c] = x[members].mean(0)
                else:  # an empty cluster restarts at the worst-placed point
                    far = distances[np.arange(len(x)), labels].argmax()
                    centres[c], labels[far] = x[far], c
        inertia = float(((x - centres[labels]) ** 2).sum())
        if inertia < best_inertia:
            best, best_inertia = labels.copy(), inertia
    return best


def _plus_plus(x: np.ndarray, squared: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ (Arthur & Vassilvitskii, 2007): each next centre drawn with probability ∝ its squared distance
    to the nearest centre so far."""
    centres = [x[rng.integers(len(x))]]
    nearest = ((x - centres[0]) ** 2).sum(1)
    for _ in range(1, k):
        total = nearest.sum()
        pick = rng.choice(len(x), p=nearest / total) if total > 0 else rng.integers(len(x))
        centres.append(x[pick])
        nearest = np.minimum(nearest, ((x - x[pick]) ** 2).sum(1))
    return np.array(centres)


def _entropy(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def v_measure(gold: Sequence, found: Sequence) -> float:
    """V-measure (Rosenberg & Hirschberg, 2007): the harmonic mean of homogeneity, 1 - H(class | cluster) / H(class),
    and completeness, 1 - H(cluster | class) / H(cluster) (each 1 where its entropy is 0). scikit-learn's
    v_measure_score."""
    if len(gold) != len(found) or not len(gold):
        raise InputError(f"V-measure needs one cluster per labelled text; got {len(found)} for {len(gold)}")
    _, gold_ids = np.unique(np.asarray(gold), return_inverse=True)
    _, found_ids = np.unique(np.asarray(found), return_inverse=True)
    table = np.zeros((gold_ids.max() + 1, found_ids.max() + 1))
    np.add.at(table, (gold_ids, found_ids), 1)
    h_class, h_cluster = _entropy(table.sum(1)), _entropy(table.sum(0))
    n = table.sum()
    joint = table[table > 0] / n
    mutual = h_class + h_cluster + float((joint * np.log(joint)).sum())        # I(class; cluster)
    homogeneity = 1.0 if h_class == 0 else mutual / h_class
    completeness = 1.0 if h_cluster == 0 else mutual / h_cluster
    total = homogeneity + completeness
    return 0.0 if total == 0 else 2 * homogeneity * completeness / total


def clustering_scores(vectors: np.ndarray, labels: Sequence[str], seed: int = 0) -> dict[str, float]:
    """k-means of the unit vectors into as many clusters as there are gold classes, scored by V-measure."""
    k = len(set(labels))
    return {"v_measure": v_measure(labels, kmeans(unit_rows(vectors), k, seed=seed)), "clusters": float(k)}


# ---- STS -----------------------------------------------------------------------------------------

def ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks from 1, ties sharing their average rank (SciPy's rankdata(method="average"))."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="stable")
    ranked = np.empty(len(values))
    sorted_values = values[order]
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            ranked[order[start:end]] = (start + end + 1) / 2                    # ranks start+1 .. end, averaged
            start = end
    return ranked


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson's correlation of the ranks (SciPy's spearmanr)."""
    if len(x) != len(y) or len(x) < 2:
        raise InputError(f"Spearman's correlation needs two equal series of at least 2; got {len(x)} and {len(y)}")
    a, b = ranks(x), ranks(y)
    a, b = a - a.mean(), b - b.mean()
    denominator = math.sqrt(float((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / denominator) if denominator else math.nan


def sts_scores(first: np.ndarray, second: np.ndarray, gold: Sequence[float]) -> dict[str, float]:
    """Spearman's rho between the pairs' cosines and their gold scores."""
    cosines = (unit_rows(first) * unit_rows(second)).sum(1)
    return {"spearman": spearman(cosines, gold)}
