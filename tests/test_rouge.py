"""Character ROUGE (training/rouge.py): hand-worked examples, and Google's rouge-score on English words."""

import pytest

from bertkit.errors import InputError
from bertkit.training.rouge import characters, corpus_rouge, lcs_length, rouge_l, rouge_n, rouge_scores


def test_rouge_of_two_chinese_titles_worked_by_hand():
    hyp, ref = characters("我爱北京天安门"), characters("我爱天安门广场")
    # unigrams: 7 each, shared 我 爱 天 安 门 = 5 -> P = R = F = 5/7
    assert rouge_n(hyp, ref, 1) == pytest.approx((5 / 7, 5 / 7, 5 / 7))
    # bigrams: 我爱 爱北 北京 京天 天安 安门 vs 我爱 爱天 天安 安门 门广 广场, shared 我爱 天安 安门 = 3 of 6 each
    assert rouge_n(hyp, ref, 2) == pytest.approx((0.5, 0.5, 0.5))
    # LCS 我爱天安门 = 5 of 7 each
    assert lcs_length(hyp, ref) == 5
    assert rouge_l(hyp, ref) == pytest.approx((5 / 7, 5 / 7, 5 / 7))


def test_counts_are_clipped_and_precision_and_recall_differ():
    hyp, ref = list("的的的的"), list("的是的")
    # 的 4 times in the hypothesis, twice in the reference: 2 shared. P = 2/4, R = 2/3, F = 2PR/(P+R) = 4/7
    assert rouge_n(hyp, ref, 1) == pytest.approx((0.5, 2 / 3, 4 / 7))
    # bigrams 的的 x3 against 的是, 是的: none shared
    assert rouge_n(hyp, ref, 2) == (0.0, 0.0, 0.0)
    # LCS 的的 = 2: P = 2/4, R = 2/3, F = 4/7
    assert rouge_l(hyp, ref) == pytest.approx((0.5, 2 / 3, 4 / 7))


def test_lcs_of_the_textbook_pair_and_empty_sides():
    assert lcs_length("ABCBDAB", "BDCABA") == 4            # BCBA (Cormen et al.)
    assert lcs_length("", "abc") == lcs_length("abc", "") == 0
    for score in rouge_scores([], list("标题")).values():
        assert score == (0.0, 0.0, 0.0)
    assert rouge_n(list("一"), list("一"), 2) == (0.0, 0.0, 0.0)  # no bigram on either side
    with pytest.raises(InputError, match="n of 1 or more"):
        rouge_n(["a"], ["a"], 0)


def test_characters_drop_white_space_and_lowercase():
    assert characters(" A股 大涨\t3%\n") == ["a", "股", "大", "涨", "3", "%"]


def test_the_corpus_score_is_the_mean_of_per_example_f1_times_100():
    scores = corpus_rouge(["我爱北京天安门", "天气"], ["我爱天安门广场", "新闻"])
    # example 1: F1 5/7, 1/2, 5/7 (above); example 2 shares nothing: 0, 0, 0. Means x 100:
    assert scores == pytest.approx({"rouge1": 100 * 5 / 14, "rouge2": 25.0, "rougeL": 100 * 5 / 14})
    assert corpus_rouge(["同 样"], ["同样"]) == pytest.approx({"rouge1": 100.0, "rouge2": 100.0, "rougeL": 100.0})
    with pytest.raises(InputError, match="2 summaries for 1 reference"):
        corpus_rouge(["a", "b"], ["a"])
    with pytest.raises(InputError, match="no summaries"):
        corpus_rouge([], [])


@pytest.mark.parametrize("hypotheses, references, message", [
    (None, None, "the summaries must be a list of texts, one per example, not NoneType"),
    ("ab", "ab", "the summaries must be a list of texts, one per example, not str"),  # not two one-letter texts
    (["ab"], "ab", "the references must be a list of texts, one per example, not str"),
    ([None], ["a"], "item 0 of the summaries is NoneType, not a text"),
    (["a", "b"], ["a", 3], "item 1 of the references is int, not a text"),
])
def test_what_is_not_a_list_of_texts_is_one_clear_error(hypotheses, references, message):
    with pytest.raises(InputError, match=message):
        corpus_rouge(hypotheses, references)


ENGLISH = [
    ("the cat was found under the bed", "the cat was under the bed"),
    ("police killed the gunman", "the gunman was shot down by police"),
    ("a a a b", "a b a c a"),
    ("completely different words", "nothing in common here"),
]


@pytest.mark.parametrize("hypothesis,reference", ENGLISH)
def test_agrees_with_google_rouge_score_on_english_words(hypothesis, reference):
    rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")
    expected = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"]).score(reference, hypothesis)
    ours = rouge_scores(hypothesis.split(), reference.split())
    for name in ("rouge1", "rouge2", "rougeL"):
        assert tuple(ours[name]) == pytest.approx(tuple(expected[name]), abs=1e-12), name
