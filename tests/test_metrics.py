"""Metrics against values computed by hand (and seqeval's documented examples)."""

import math

import numpy as np
import pytest
import torch

from bertkit.training.metrics import accuracy, bleu, bleu_details, entity_scores, get_entities, macro_f1, perplexity


def test_accuracy_counts_matches_and_skips_ignored_labels():
    assert accuracy([1, 0, 2, 2], [1, 1, 2, 0]) == 0.5
    # -100 positions (not predicted, e.g. unmasked MLM tokens) are skipped: 2 of the 3 remaining match
    assert accuracy(torch.tensor([[1, 5], [2, 2]]), np.array([[1, -100], [2, 0]])) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="differ in size"):
        accuracy([1, 2], [1])
    with pytest.raises(ValueError, match="zero examples"):
        accuracy([1], [-100])


def test_macro_f1_averages_per_class_f1_over_gold_and_predicted_classes():
    # class 0: TP 1 FP 1 FN 1 -> 0.5; class 1: TP 2 FP 1 -> 0.8; class 2: FN 1 -> 0
    assert macro_f1([0, 1, 1, 1, 0], [0, 0, 1, 1, 2]) == pytest.approx((0.5 + 0.8 + 0.0) / 3)
    # class 3 is only predicted: it counts, with F1 0; class 0: TP 1 FN 1 -> 2/3
    assert macro_f1([0, 3], [0, 0]) == pytest.approx((2 / 3 + 0.0) / 2)
    assert macro_f1([2, 2, 7], [2, 2, 7]) == 1.0


@pytest.mark.parametrize("tags, expected", [
    (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 1), ("LOC", 3, 3)]),  # seqeval's docstring example
    (["I-PER", "I-PER", "O"], [("PER", 0, 1)]),                          # I- without B- starts an entity
    (["O", "I-ORG"], [("ORG", 1, 1)]),
    (["B-PER", "I-LOC"], [("PER", 0, 0), ("LOC", 1, 1)]),                # a type change splits
    (["B-PER", "B-PER"], [("PER", 0, 0), ("PER", 1, 1)]),
    (["S-PER", "B-LOC", "I-LOC", "E-LOC", "O", "E-ORG"], [("PER", 0, 0), ("LOC", 1, 3), ("ORG", 5, 5)]),
    (["B-PER", "E-PER", "I-PER"], [("PER", 0, 1), ("PER", 2, 2)]),       # E ends, the I after it starts anew
    (["B-PER", "M-PER", "E-PER", "S-LOC", "B-ORG", "E-ORG"],             # BMES: M reads as I
     [("PER", 0, 2), ("LOC", 3, 3), ("ORG", 4, 5)]),
    (["B-PER", "M-PER", "B-PER", "E-PER"], [("PER", 0, 1), ("PER", 2, 3)]),
    (["O", "O"], []),
])
def test_get_entities_follows_seqeval_default_mode(tags, expected):
    assert get_entities(tags) == expected


def test_get_entities_rejects_unknown_tags():
    for bad in ("X-PER", "PER", "B-"):
        with pytest.raises(ValueError, match="invalid entity tag"):
            get_entities(["O", bad])


def test_entity_scores_reproduce_seqeval_example_and_per_type_report():
    gold = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    pred = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    scores = entity_scores(gold, pred, by_type=True)
    assert (scores["precision"], scores["recall"], scores["f1"]) == (0.5, 0.5, 0.5)
    assert (scores["num_true"], scores["num_pred"], scores["num_correct"]) == (2, 2, 1)
    assert scores["by_type"]["MISC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert scores["by_type"]["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}


def test_entity_scores_count_exact_spans_per_sentence():
    gold = [["B-PER", "E-PER", "O", "S-LOC"], ["B-ORG", "M-ORG", "E-ORG"], ["S-PER"]]
    pred = [["B-PER", "E-PER", "O", "O"], ["B-ORG", "E-ORG", "O"], ["S-PER"]]
    # gold 4 entities; pred 3 (PER, ORG(0,1) -- wrong span, PER); correct 2
    scores = entity_scores(gold, pred)
    assert scores["precision"] == pytest.approx(2 / 3)
    assert scores["recall"] == pytest.approx(2 / 4)
    assert scores["f1"] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    # the same entity in a different sentence is not a match
    assert entity_scores([["S-PER"], ["O"]], [["O"], ["S-PER"]])["f1"] == 0.0
    with pytest.raises(ValueError, match="sentence 0"):
        entity_scores([["O", "O"]], [["O"]])


def test_bleu_by_hand_and_tokenizer_choice():
    # n-gram precisions 5/6, 3/5, 2/4, 1/3, equal lengths: BLEU = (1/12) ** (1/4)
    assert bleu(["the cat sat on the mat"], ["the cat sat on a mat"]) == pytest.approx(100 * (1 / 12) ** 0.25)
    assert bleu(["the cat sat on the mat"], [["a dog", "the cat sat on the mat"]]) == pytest.approx(100.0)
    # Chinese: character n-grams all match, brevity penalty exp(1 - 9/7)
    hyp, ref = ["我爱北京天安门"], ["我爱北京天安门广场"]
    assert bleu(hyp, ref) == pytest.approx(100 * math.exp(1 - 9 / 7))
    assert bleu(hyp, ref, tokenize="zh") == bleu(hyp, ref)
    assert bleu(hyp, ref, tokenize="13a") == 0.0  # one unsplit "word" per line: why "zh" matters
    with pytest.raises(ValueError, match="same number of references"):
        bleu(["a", "b"], [["a"], ["b", "c"]])


def test_bleu_details_split_a_short_translation_into_precision_and_brevity():
    # every character n-gram of the hypothesis is right; only its length (7 of 9 characters) costs
    details = bleu_details(["我爱北京天安门"], ["我爱北京天安门广场"])
    assert details["precisions"] == pytest.approx([100.0] * 4)
    assert details["length_ratio"] == pytest.approx(7 / 9)
    assert details["brevity_penalty"] == pytest.approx(math.exp(1 - 9 / 7))
    assert details["bleu"] == pytest.approx(100 * math.exp(1 - 9 / 7)) and details["tokenize"] == "zh"
    # longer than the reference: no penalty, precisions fall instead
    longer = bleu_details(["the cat sat on the mat today"], ["the cat sat on the mat"])
    assert longer["brevity_penalty"] == 1.0 and longer["length_ratio"] == pytest.approx(7 / 6)
    assert longer["precisions"][0] == pytest.approx(100 * 6 / 7)


def test_perplexity_is_exp_of_mean_loss():
    assert perplexity(math.log(20.0)) == pytest.approx(20.0)
    assert perplexity(0.0) == 1.0
    assert perplexity(1000.0) == math.inf
    with pytest.raises(ValueError):
        perplexity(float("nan"))
