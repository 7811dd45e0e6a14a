"""Decoding answers: the n-best spans of every window against a brute-force search, null answers, and character
offsets that index the original context exactly (English and Chinese, through real tokenizers)."""

import itertools
import string

import numpy as np
import pytest
import torch

from bertkit.data.qa import QAExample, qa_windows
from bertkit.inference.qa import answer_questions, decode, explain_answer, qa_settings, window_spans
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForQuestionAnswering
from bertkit.tokenizer import BertTokenizer
from weights import randomise

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *string.ascii_lowercase,
         *(f"##{c}" for c in string.ascii_lowercase), *(f"w{i}" for i in range(40)), "who", ".", ","]


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer({token: i for i, token in enumerate(VOCAB)})


def brute_force(example, windows, logits, max_answer_length, impossible=False):
    """Every (window, start, end) of context tokens with start <= end < start + max_answer_length; the best by
    start + end logit, or no answer where the lowest null logit beats it."""
    best = None
    for window, (s, e) in zip(windows, logits):
        positions = range(window.context_start, window.context_end)
        for i, j in itertools.product(positions, positions):
            if i <= j < i + max_answer_length and (best is None or s[i] + e[j] > best[0]):
                chars = window.offsets[i - window.context_start][0], window.offsets[j - window.context_start][1]
                best = (s[i] + e[j], chars)
    null = min(s[0] + e[0] for s, e in logits)
    if impossible and null > best[0]:
        return "", None
    return example.context[best[1][0]:best[1][1]], best[1]


@pytest.mark.parametrize("seed", range(6))
def test_decoding_finds_the_best_span_over_all_windows(tokenizer, seed):
    rng = np.random.default_rng(seed)
    context = " ".join(rng.choice([f"w{i}" for i in range(40)] + ["abc", "xyz,", "q."], size=45))
    example = QAExample("x", "who w3", context)
    windows = qa_windows([example], tokenizer, 24, 6, labels=False)
    assert len(windows) >= 3
    logits = [(rng.normal(size=len(w.input_ids)) * 3, rng.normal(size=len(w.input_ids)) * 3) for w in windows]
    for max_answer_length in (1, 4, 30):
        text, chars = brute_force(example, windows, logits, max_answer_length)
        found = decode(example, windows, logits, n_best=100, max_answer_length=max_answer_length)
        assert (found["answer"], (found["start"], found["end"])) == (text, chars)
        assert context[found["start"]:found["end"]] == found["answer"]
        n_best = decode(example, windows, logits, n_best=20, max_answer_length=max_answer_length)
        assert n_best["answer"] == text  # 20 starts x 20 ends hold the best pair of these windows
    for impossible_logit in (-50.0, 50.0):  # [CLS] far below or far above every span
        logits[1][0][0] = logits[1][1][0] = impossible_logit
        for other in range(len(windows)):
            if other != 1:  # the null score is the lowest over the windows: window 1's
                logits[other][0][0] = logits[other][1][0] = 60.0
        text, _ = brute_force(example, windows, logits, 30, impossible=True)
        found = decode(example, windows, logits, max_answer_length=30, impossible=True)
        assert found["answer"] == text == ("" if impossible_logit > 0 else text)
        assert (found["start"] is None) == (impossible_logit > 0)
        assert decode(example, windows, logits, max_answer_length=30)["answer"] != ""  # no null without impossible


@pytest.mark.parametrize("first, last, where", [
    (10, 11, "at the end of window 0, inside window 1"),
    (11, 13, "across the end of window 0: whole only in window 1"),
    (16, 19, "from the first token of window 2 back into window 1: whole only in window 1"),
    (28, 29, "past the first window's max_length: only in window 3"),
])
def test_answers_at_window_boundaries_are_decoded_to_their_characters(tokenizer, first, last, where):
    """A 30-word context, max_length 16 and doc_stride 4: windows of context tokens [0, 12), [8, 20), [16, 28),
    [24, 30). The logits point at the answer's first and last token wherever the window holds them (found here by
    scanning the offsets, not through the labels), less strongly at the window's edge where it is cut: the answer
    decoded is the whole one, at the characters of the context it came from."""
    context = " ".join(f"w{k}" for k in range(30))
    start = context.index(f"w{first}", 3 * first)
    end = context.index(f"w{last}", 3 * last) + len(f"w{last}")
    example = QAExample("x", "who", context)
    windows = qa_windows([example], tokenizer, 16, 4, labels=False)
    assert [(w.offsets[0][0], w.offsets[-1][1]) for w in windows] == [
        (context.index("w0"), context.index("w11") + 3), (context.index("w8"), context.index("w19") + 3),
        (context.index("w16"), context.index("w27") + 3), (context.index("w24"), len(context))]
    logits = []
    for window in windows:
        s, e = np.full(len(window.input_ids), -5.0), np.full(len(window.input_ids), -5.0)
        inside = [window.context_start + k for k, (a, b) in enumerate(window.offsets) if a < end and b > start]
        if inside:
            s[inside[0]] = 8.0 if window.offsets[inside[0] - window.context_start][0] == start else 6.0
            e[inside[-1]] = 8.0 if window.offsets[inside[-1] - window.context_start][1] == end else 6.0
        logits.append((s, e))
    found = decode(example, windows, logits, max_answer_length=30)
    assert (found["start"], found["end"]) == (start, end), where
    assert found["answer"] == context[start:end] == " ".join(f"w{k}" for k in range(first, last + 1))
    whole = [k for k, w in enumerate(windows) if w.offsets[0][0] <= start and end <= w.offsets[-1][1]]
    assert found["window"] == whole[0]  # a window holding it whole (of two with the same logits, the first)
    assert decode(example, windows, logits, max_answer_length=last - first)["answer"] != found["answer"]


def test_spans_keep_end_after_start_and_within_the_length_limit(tokenizer):
    example = QAExample("x", "who", "w1 w2 w3 w4 w5")
    window = qa_windows([example], tokenizer, 20, 2, labels=False)[0]
    start = np.full(len(window.input_ids), -10.0)
    end = np.full(len(window.input_ids), -10.0)
    start[window.context_start + 3], end[window.context_start + 1] = 9.0, 9.0   # the best end is before the start
    end[window.context_start + 4] = 5.0
    spans = window_spans(window, start, end, max_answer_length=2)
    assert (spans[0].start_position, spans[0].end_position) == (window.context_start + 3, window.context_start + 4)
    assert all(s.start_position <= s.end_position < s.start_position + 2 for s in spans)
    result = decode(example, [window], [(start, end)], max_answer_length=2)
    assert result["answer"] == "w4 w5" and (result["start"], result["end"]) == (9, 14)
    # its score is p(start) p(end), each a softmax over the window's context tokens
    context = slice(window.context_start, window.context_end)
    p_start = np.exp(start[context]) / np.exp(start[context]).sum()
    p_end = np.exp(end[context]) / np.exp(end[context]).sum()
    assert result["score"] == pytest.approx(p_start[3] * p_end[4])


def tiny_reader(tokenizer_or_size, seed=0, **qa):
    vocab_size = tokenizer_or_size if isinstance(tokenizer_or_size, int) else len(tokenizer_or_size)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=128, qa=qa or None)
    return randomise(BertForQuestionAnswering(config), seed)


def test_answers_index_the_context_and_settings_come_from_the_model(tokenizer):
    model = tiny_reader(tokenizer, max_length=20, doc_stride=5, max_answer_length=3)
    assert qa_settings(model) == {"max_length": 20, "doc_stride": 5, "max_answer_length": 3, "impossible": False}
    assert qa_settings(model, max_length=500)["max_length"] == 128  # at most the model's positions
    contexts = ["w1 w2 abc.  w3,w4 " * 6, "  xyz w9  "]
    results = answer_questions(model, tokenizer, ["who w1", "w9"], contexts)
    for context, result in zip(contexts, results):
        assert context[result["start"]:result["end"]] == result["answer"] != ""
        assert len(tokenizer(result["answer"], add_special_tokens=False)["input_ids"]) <= 3
        assert 0 < result["score"] <= 1
    one = answer_questions(model, tokenizer, "who w1", contexts[0])
    assert one == results[0]


def test_empty_questions_and_contexts_are_refused(tokenizer):
    model = tiny_reader(tokenizer)
    with pytest.raises(ValueError, match=r"questions\[1\] is empty: there is nothing to ask"):
        answer_questions(model, tokenizer, ["who", " "], ["w1", "w2"])
    with pytest.raises(ValueError, match=r"contexts\[0\] is empty: there is nothing to find an answer in"):
        answer_questions(model, tokenizer, "who", "")
    with pytest.raises(ValueError, match="2 questions but 1 contexts"):
        answer_questions(model, tokenizer, ["who", "w1"], ["w2"])


def test_explain_answer_gives_the_probabilities_of_the_answers_window(tokenizer):
    model = tiny_reader(tokenizer, impossible=True)
    context = "w1 w2 w3 w4"
    shown = explain_answer(model, tokenizer, "who", context)
    assert shown["pieces"] == ["[CLS]", "w1", "w2", "w3", "w4"]
    assert shown["start_probabilities"].sum() == pytest.approx(1.0)
    assert shown["end_probabilities"].sum() == pytest.approx(1.0)
    if shown["start"] is None:
        assert shown["first"] is None
    else:
        assert "".join(shown["pieces"][shown["first"]:shown["last"] + 1]) == shown["answer"].replace(" ", "")


ODD_TEXTS = {
    "all-MiniLM-L6-v2": ("Beyoncé Giselle Knowles-Carter (born September 4, 1981) is an American singer.  Ｆｕｌｌ "
                         "width, ﬁnal ligatures, x², naïve café, emoji 🎉 and  doubled   spaces; Ⅻ ① end."),
    "m3e-small": ("《战国无双3》是由光荣和ω-force开发的动作游戏，于2010年1月1日（周五）发售。"
                  "ＡＢＣ１２３　全角，Beyoncé 🎉 结束。"),
}


@pytest.mark.network
@pytest.mark.parametrize("name", list(ODD_TEXTS))
def test_offsets_of_every_candidate_index_the_original_text(name):
    """Accents, full-width forms, ligatures, emoji and doubled spaces change what the tokenizer sees, never where
    an answer is: every candidate span's characters are an exact slice of the original context."""
    from conftest import model_dir_or_skip

    tokenizer = BertTokenizer.from_pretrained(model_dir_or_skip(name))
    context = ODD_TEXTS[name] * 3
    example = QAExample("x", "what?", context)
    windows = qa_windows([example], tokenizer, 48, 8, labels=False)
    assert len(windows) > 2
    rng = np.random.default_rng(0)
    whole_words = 0
    for window in windows:
        s, e = rng.normal(size=len(window.input_ids)), rng.normal(size=len(window.input_ids))
        tokens = tokenizer.convert_ids_to_tokens(window.input_ids)
        for span in window_spans(window, s, e, n_best=200, max_answer_length=12):
            piece = context[span.start:span.end]
            assert piece == piece.strip() and piece  # starts and ends on a token's characters
            if not tokens[span.start_position].startswith("##") and not tokens[span.end_position + 1].startswith("##"):
                whole_words += 1  # a span of whole words: its characters tokenize to its tokens again
                ids = tokenizer(piece, add_special_tokens=False)["input_ids"]
                assert ids == window.input_ids[span.start_position:span.end_position + 1], piece
    assert whole_words > 100
    model = tiny_reader(len(tokenizer), seed=1)
    result = answer_questions(model, tokenizer, "what?", context, max_length=48, doc_stride=8)
    assert context[result["start"]:result["end"]] == result["answer"]
