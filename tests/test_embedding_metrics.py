"""The metrics of sentence vectors, each against a hand-worked example, and against scikit-learn and SciPy where they
compute the same (skipped where they are not installed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bertkit.training.embedding_metrics import (
    bitext_scores,
    clustering_scores,
    kmeans,
    ranks,
    retrieval_scores,
    spearman,
    sts_scores,
    top_k,
    v_measure,
)


def test_retrieval_by_hand():
    ranked = np.array([[1, 2, 0, 3, 4, 5, 6, 7, 8, 9, 10],     # the relevant document 2 second
                       [0, 1, 3, 2, 4, 5, 6, 7, 8, 9, 10],     # relevant 0 and 3: first and third
                       [0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 4]])    # relevant 4: eleventh, past the cut
    scores = retrieval_scores(ranked, [{2}, {0, 3}, {4}], recall_at=(1, 5, 10))
    assert scores["mrr@10"] == pytest.approx((1 / 2 + 1 + 0) / 3)
    ndcg = [(1 / math.log2(3)) / 1, (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3)), 0]
    assert scores["ndcg@10"] == pytest.approx(sum(ndcg) / 3)
    assert scores["recall@1"] == pytest.approx((0 + 0.5 + 0) / 3)
    assert scores["recall@5"] == pytest.approx((1 + 1 + 0) / 3) == scores["recall@10"]


def test_top_k_ranks_by_cosine_ties_in_index_order():
    queries = np.array([[1.0, 0.0], [0.0, 2.0]])
    corpus = np.array([[0.0, 1.0], [3.0, 0.1], [1.0, 0.0], [2.0, 0.0], [0.0, 5.0]])
    assert top_k(queries, corpus, 3).tolist() == [[2, 3, 1], [0, 4, 1]]


def test_bitext_accuracy_and_mtebs_f1_by_hand():
    source = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    target = np.array([[1.0, 0.0], [0.0, -1.0], [0.1, 1.0]])
    # sentences 0 and 1 both find target 0; sentence 2 finds its own
    scores = bitext_scores(source, target)
    assert scores["accuracy"] == pytest.approx(2 / 3)
    assert scores["f1"] == pytest.approx((2 / 3 + 0 + 1) / 3)


def test_bitext_f1_is_scikit_learns_weighted_f1():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    source = rng.normal(size=(60, 8))
    target = source + rng.normal(scale=1.5, size=source.shape)
    found = top_k(source, target, 1)[:, 0]
    gold = np.arange(60)
    scores = bitext_scores(source, target)
    assert 0 < scores["accuracy"] < 1
    assert scores["f1"] == pytest.approx(sklearn_metrics.f1_score(gold, found, average="weighted",
                                                                  zero_division=0))
    assert scores["accuracy"] == pytest.approx(sklearn_metrics.accuracy_score(gold, found))


def test_v_measure_by_hand():
    assert v_measure(["a", "a", "b", "b"], [7, 7, 3, 3]) == pytest.approx(1.0)
    assert v_measure(["a", "a", "b", "b"], [0, 1, 0, 1]) == pytest.approx(0.0)
    # H(class) = ln 2, H(cluster) = H(3/4, 1/4), I = ln 2 + H(cluster) - H(joint (1/2, 1/4, 1/4))
    h_class, h_cluster = math.log(2), -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    mutual = h_class + h_cluster + (0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    h, c = mutual / h_class, mutual / h_cluster
    assert v_measure(["a", "a", "b", "b"], [0, 0, 0, 1]) == pytest.approx(2 * h * c / (h + c))
    assert v_measure(["a", "a", "b", "b"], [0, 0, 0, 1]) == pytest.approx(0.3437, abs=1e-4)


def test_v_measure_is_scikit_learns():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(1)
    for _ in range(5):
        gold, found = rng.integers(0, 6, 200), rng.integers(0, 9, 200)
        found[:100] = gold[:100]  # half agree: a V-measure neither 0 nor 1
        assert v_measure(gold, found) == pytest.approx(sklearn_metrics.v_measure_score(gold, found), abs=1e-12)
    assert v_measure([1, 1, 1], [0, 1, 2]) == pytest.approx(sklearn_metrics.v_measure_score([1, 1, 1], [0, 1, 2]))


def test_kmeans_finds_separate_groups_the_same_way_every_time():
    rng = np.random.default_rng(2)
    centres = rng.normal(scale=10, size=(4, 5))
    labels = np.repeat(np.arange(4), 25)
    points = centres[labels] + rng.normal(size=(100, 5))
    found = kmeans(points, 4, seed=0)
    assert v_measure(labels, found) == pytest.approx(1.0)
    assert np.array_equal(found, kmeans(points, 4, seed=0))
    assert clustering_scores(points, [str(x) for x in labels])["v_measure"] == pytest.approx(1.0)


def test_spearman_by_hand_with_ties():
    assert ranks([10, 20, 20, 5]).tolist() == [2, 3.5, 3.5, 1]
    # ranks of y: 1, 2, 3.5, 5, 3.5; covariance of the centred ranks 8, variances 10 and 9.5
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_spearman_is_scipys():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    x = rng.integers(0, 10, 80).astype(float)  # many ties
    y = x + rng.normal(size=80)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    assert ranks(x).tolist() == stats.rankdata(x).tolist()


def test_sts_scores_rank_cosines_against_gold():
    first = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    second = np.array([[1.0, 0.1], [1.0, 1.0], [0.0, 1.0]])   # cosines fall: 0.995, 0.707, 0
    assert sts_scores(first, second, [5.0, 3.0, 0.5])["spearman"] == pytest.approx(1.0)
    assert sts_scores(first, second, [0.0, 3.0, 5.0])["spearman"] == pytest.approx(-1.0)
