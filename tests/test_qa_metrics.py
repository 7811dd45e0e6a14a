"""Extractive QA scores as the official scripts compute them: SQuAD v1.1's (English) and CMRC 2018's (Chinese).

The expected values are what those scripts give on the same inputs, worked out below where they are not
obvious."""

import json

import pytest

from bertkit.data.qa import read_squad, sample_file
from bertkit.training.qa_metrics import (
    cmrc_exact_match,
    cmrc_f1,
    metric_language,
    mixed_segmentation,
    normalize_answer,
    qa_scores,
    squad_exact_match,
    squad_f1,
)


@pytest.mark.parametrize("prediction, reference, em, f1", [
    ("the Main Building", "Main Building", 1, 1.0),            # articles go
    ("Saint Bernadette Soubirous.", "saint bernadette soubirous", 1, 1.0),  # case and punctuation go
    ("A copper statue", "a copper statue of Christ", 0, 2 / 3),  # "copper statue": 2 of 2 words, 2 of 4
    ("in the late 1990s", "late 1990s", 0, 0.8),               # "in late 1990s": precision 2/3, recall 1
    ("an apple", "apple apple", 0, 2 * 1 * 0.5 / 1.5),         # words are a bag: one "apple" in common
    ("U.S.", "US", 1, 1.0),                                    # "." is punctuation, dropped inside words too
    ("Beyoncé's", "beyonces", 0, 0.0),                         # accents stay
    ("the", "a", 1, 0.0),                                      # both normalise to nothing: equal, but no word
    ("", "x", 0, 0.0),
])
def test_squad_v1_1_exact_match_and_f1(prediction, reference, em, f1):
    assert squad_exact_match(prediction, reference) == em
    assert squad_f1(prediction, reference) == pytest.approx(f1)


def test_squad_normalisation():
    assert normalize_answer("  The  Quick, (brown) fox — an ANIMAL!") == "quick brown fox — animal"


@pytest.mark.parametrize("prediction, reference, em, f1, segments", [
    ("光荣和ω-force", "光荣和ω-force", 1, 1.0, ["光", "荣", "和", "ωforce"]),  # a dropped "-" does not end the run
    ("光荣", "光荣和ω-force", 0, 2 / 3, ["光", "荣"]),                       # 2 of 2, 2 of 4 segments
    ("ω-force开发", "光荣和ω-force", 0, 2 * (1 / 3) * (1 / 4) / (1 / 3 + 1 / 4), ["ωforce", "开", "发"]),
    ("在1963年，", "1963年", 0, 0.8, ["在", "1963", "年"]),                  # ASCII digits: one word
    ("《战国无双3》", "战国无双3", 1, 1.0, ["战", "国", "无", "双", "3"]),      # 《》 are the script's marks
    ("任天堂游戏谜之村雨城", "村雨城", 0, 2 * 0.3 / 1.3, list("任天堂游戏谜之村雨城")),
    ("2010年1月1日（周五）", "2010年1月1日", 0, 2 * 0.75 / 1.75, ["2010", "年", "1", "月", "1", "日", "周", "五"]),
    ("Hello, World!", "hello world", 0, 1 / 3, ["hello", ",", "world", "!"]),  # "," is not its mark: LCS 1 of 4, 2
    ("北京 上海", "北京上海", 0, 1.0, ["北", "京", "上", "海"]),              # the space counts for exact match only
    ("ABC DEF", "abc-def", 0, 0.0, ["abc", "def"]),                           # the reference is one word "abcdef"
    ("don't stop", "do n't", 0, 0.8, ["do", "n't", "stop"]),                  # Treebank words: do + n't
    ("", "村雨城", 0, 0.0, []),
])
def test_cmrc_exact_match_f1_and_segments(prediction, reference, em, f1, segments):
    assert cmrc_exact_match(prediction, reference) == em
    assert cmrc_f1(prediction, reference) == pytest.approx(f1)
    assert mixed_segmentation(prediction, drop_punctuation=True) == segments


def test_the_two_scripts_differ_where_their_rules_differ():
    """Worked through both scripts by hand:
    - "the Super Bowl 50" against "Super Bowl 50": SQuAD drops the article, so EM 1; CMRC keeps it, segments
      the super bowl 50 against super bowl 50: LCS 3, precision 3/4, recall 1, F1 6/7, EM 0.
    - "1963." against "1963": SQuAD drops ASCII punctuation, EM 1; CMRC's list has no ASCII ".", so it stays a
      Treebank token of its own (1963 .): LCS 1, precision 1/2, recall 1, F1 2/3, EM 0.
    - "、" against "。": CMRC drops both marks, so the texts are equal (EM 1) but there is no segment in common
      (F1 0); SQuAD keeps both (not ASCII), EM 0 and F1 0.
    """
    cases = [("the Super Bowl 50", "Super Bowl 50", (1, 1.0), (0, 6 / 7)),
             ("1963.", "1963", (1, 1.0), (0, 2 / 3)),
             ("、", "。", (0, 0.0), (1, 0.0))]
    for prediction, reference, squad, cmrc in cases:
        assert (squad_exact_match(prediction, reference), squad_f1(prediction, reference)) == pytest.approx(squad)
        assert (cmrc_exact_match(prediction, reference), cmrc_f1(prediction, reference)) == pytest.approx(cmrc)


def test_exact_match_and_f1_take_their_best_reference_each():
    """As the scripts do (metric_max_over_ground_truths, calc_em_score / calc_f1_score): each measure is the maximum
    over the references on its own. "Denver Broncos defense" against ["Broncos", "the Denver Broncos"]: EM 0 with
    both; F1 with "Broncos" 2 * (1/3 * 1) / (4/3) = 1/2, with "the Denver Broncos" (denver broncos) 2 * (2/3 * 1) /
    (5/3) = 4/5, so F1 4/5. Two questions, the other answered exactly: EM 50, F1 (4/5 + 1) / 2 = 90."""
    references = {"a": ["Broncos", "the Denver Broncos"], "b": ["Carolina Panthers"]}
    scores = qa_scores({"a": "Denver Broncos defense", "b": "The Carolina Panthers!"}, references)
    assert (scores["metric"], scores["exact_match"]) == ("squad", 50.0)
    assert scores["f1"] == pytest.approx(90.0)


def test_cmrc_f1_is_the_longest_common_substring_not_the_bag_of_characters():
    # "雨村城" shares three characters with "村雨城" but the longest run in order is one: F1 = 1/3, not 1
    assert cmrc_f1("雨村城", "村雨城") == pytest.approx(1 / 3)
    assert squad_f1("b a c", "a b c") == 1.0  # SQuAD's bag of words does not care about order


def test_scores_take_the_best_reference_and_count_missing_predictions_as_zero():
    references = {"q1": ["村雨城", "任天堂游戏谜之村雨城"], "q2": ["光荣和ω-force"], "q3": ["1963年"]}
    scores = qa_scores({"q1": "村雨城", "q2": "光荣"}, references)
    assert scores["metric"] == "cmrc" and (scores["questions"], scores["answered"]) == (3, 2)
    assert scores["exact_match"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)
    english = qa_scores({"a": "the late 1990s"}, {"a": ["late 1990s", "in the late 1990s"], "b": ["x"]})
    assert english["metric"] == "squad"
    assert (english["exact_match"], english["f1"]) == (50.0, 50.0)


def test_unanswerable_questions_are_right_only_when_the_prediction_is_empty():
    references = {"u": [], "a": ["Main Building"]}
    assert qa_scores({"u": "", "a": "main building"}, references, "squad")["f1"] == 100.0
    assert qa_scores({"u": "the", "a": "main building"}, references, "squad")["exact_match"] == 100.0  # normalised
    assert qa_scores({"u": "Building", "a": "main building"}, references, "squad")["f1"] == 50.0
    assert qa_scores({"u": "", "a": "x"}, {"u": [], "a": ["村"]}, "cmrc")["f1"] == 50.0


def test_the_metric_follows_the_language_of_the_references():
    assert metric_language([["黑豹队"], ["308"]]) == "cmrc"
    assert metric_language([["308"], ["Denver Broncos"]]) == "squad"
    assert metric_language([["308"]]) == "squad"  # no letters: SQuAD's rules
    with pytest.raises(ValueError, match="metric must be one of squad, cmrc"):
        qa_scores({"a": "x"}, {"a": ["x"]}, "bleu")
    with pytest.raises(ValueError, match="zero questions"):
        qa_scores({}, {})


@pytest.mark.network
def test_cmrc_2018_dev_sample_scored_as_its_script_scores_it():
    """The first three questions of CMRC 2018's dev file, three references each. Worked through the script:
    DEV_0_QUERY_0 "光荣" against "光荣和ω-force": F1 2/3 (segments 光 荣 against 光 荣 和 ωforce), EM 0;
    DEV_0_QUERY_1 "任天堂游戏谜之村雨城" is the third reference: EM 1, F1 1;
    DEV_0_QUERY_2 "「战史演武」" against "「战史演武」&「争霸演武」" (segments 战 史 演 武 & 争 霸 演 武 once the marks
    go): LCS 4, precision 1, recall 4/9, F1 8/13; EM 0."""
    from conftest import fetch_or_skip

    fetch_or_skip("squad-excerpt")
    path = sample_file("cmrc2018", "dev")
    raw = json.loads(path.read_text(encoding="utf-8"))
    examples = read_squad(path, need_offsets=False)
    assert [e.id for e in examples] == [q["id"] for q in raw["data"][0]["paragraphs"][0]["qas"]]
    references = {e.id: [a.text for a in e.answers] for e in examples}
    assert references["DEV_0_QUERY_1"] == ["村雨城", "村雨城", "任天堂游戏谜之村雨城"]
    predictions = {"DEV_0_QUERY_0": "光荣", "DEV_0_QUERY_1": "任天堂游戏谜之村雨城", "DEV_0_QUERY_2": "「战史演武」"}
    scores = qa_scores(predictions, references)
    assert scores["metric"] == "cmrc"
    assert scores["exact_match"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * (2 / 3 + 1 + 8 / 13) / 3)
    gold = qa_scores({qid: answers[0] for qid, answers in references.items()}, references)
    assert (gold["exact_match"], gold["f1"]) == (100.0, 100.0)
