"""BertTokenizer on a tiny vocabulary: the basic split, WordPiece, pairs, padding, truncation, offsets,
decoding, files and errors, with expected values worked out by hand, for both backends."""

from __future__ import annotations

import json
import sys
import warnings

import pytest

from bertkit import BertTokenizer
from bertkit.tokenizer.basic import BasicTokenizer, WordPiece
from bertkit.tokenizer.fast import available as fast_available

BACKENDS = ["python"] + (["fast"] if fast_available() else [])
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "the", "fox", "hello", "world",
          "##s", "!", ",", "你", "好", "a", "##a", "don", "'", "t", "."]
VOCAB = {token: index for index, token in enumerate(TOKENS)}
PAD, UNK, CLS, SEP, MASK = range(5)
ID = VOCAB.__getitem__


@pytest.fixture(params=BACKENDS)
def tok(request) -> BertTokenizer:
    return BertTokenizer(dict(VOCAB), backend=request.param)


# ---- the basic split and WordPiece ---------------------------------------------------------------------

def test_basic_split_cleans_splits_and_lowercases():
    basic = BasicTokenizer(lowercase=True)
    # NUL is dropped (joining "the" and "fox"), tab is a space, CJK and punctuation stand alone, accents go
    assert basic.split("Héllo,  WORLD!你好\tthe\x00fox\u200b") == ["hello", ",", "world", "!", "你", "好", "thefox"]
    assert BasicTokenizer(lowercase=False).split("Héllo") == ["Héllo"]
    assert BasicTokenizer(lowercase=False, strip_accents=True).split("Héllo") == ["Hello"]
    assert BasicTokenizer(lowercase=True, strip_accents=False).split("Héllo") == ["héllo"]
    assert BasicTokenizer(tokenize_chinese_chars=False).split("你好 世界") == ["你好", "世界"]
    # the CJK extension B ideograph is its own word; U+2B820.. is not in tokenizers' CJK ranges, so it is not
    assert basic.split("a\U00020000b\U0002b820c") == ["a", "\U00020000", "b\U0002b820c"]


def test_split_keeps_original_positions():
    basic = BasicTokenizer(lowercase=True)
    # words unchanged by normalisation carry their start; changed ones carry each character's source index
    assert basic.split_with_alignment("ab Cé") == [("ab", 0), ("ce", [3, 4])]
    assert basic.split_with_alignment("x\x00y") == [("xy", [0, 2])]


def test_wordpiece_longest_match_first():
    wordpiece = WordPiece(VOCAB, "[UNK]", max_input_chars_per_word=100)
    assert wordpiece.pieces["unaffable"] == ((ID("un"), 0, 2), (ID("##aff"), 2, 5), (ID("##able"), 5, 9))
    assert wordpiece.ids["unaffablex"] == (UNK,)  # one piece missing makes the whole word unknown
    assert wordpiece.ids["a" * 100] == (ID("a"),) + (ID("##a"),) * 99
    assert wordpiece.ids["a" * 101] == (UNK,)  # longer than max_input_chars_per_word
    with pytest.raises(ValueError, match="unknown token"):
        WordPiece({"a": 0}, "[UNK]")


def test_special_tokens_are_never_split(tok):
    assert tok.tokenize("hello[MASK]world") == ["hello", "[MASK]", "world"]
    assert tok.tokenize("[mask]") == ["[UNK]", "[UNK]", "[UNK]"]  # lowercase text is not the special token
    assert tok("[CLS]")["input_ids"] == [CLS, CLS, SEP]


# ---- calls ----------------------------------------------------------------------------------------------

def test_single_text_and_pair(tok):
    assert tok("Hello world!") == {"input_ids": [CLS, ID("hello"), ID("world"), ID("!"), SEP],
                                   "token_type_ids": [0] * 5, "attention_mask": [1] * 5}
    pair = tok("hello", "the fox")
    assert pair["input_ids"] == [CLS, ID("hello"), SEP, ID("the"), ID("fox"), SEP]
    assert pair["token_type_ids"] == [0, 0, 0, 1, 1, 1]
    assert tok.encode("hello", "world", add_special_tokens=False) == [ID("hello"), ID("world")]


@pytest.mark.parametrize("text", ["", "   \t\n ", "\x00\u200b"])
def test_empty_and_blank_text(tok, text):
    assert tok(text, return_offsets_mapping=True) == {"input_ids": [CLS, SEP], "token_type_ids": [0, 0],
                                                      "attention_mask": [1, 1], "offset_mapping": [(0, 0), (0, 0)]}


def test_thousand_character_word(tok):
    encoding = tok("a" * 1000 + " fox", return_offsets_mapping=True)
    assert encoding["input_ids"] == [CLS, UNK, ID("fox"), SEP]
    assert encoding["offset_mapping"] == [(0, 0), (0, 1000), (1001, 1004), (0, 0)]


def test_offsets_point_into_the_original_text(tok):
    text = "HÉLLO, wörld!\u00a0Unaffable你"
    encoding = tok(text, return_offsets_mapping=True)
    assert tok.convert_ids_to_tokens(encoding["input_ids"]) == [
        "[CLS]", "hello", ",", "world", "!", "un", "##aff", "##able", "你", "[SEP]"]
    spans = [text[start:end] for start, end in encoding["offset_mapping"][1:-1]]
    assert spans == ["HÉLLO", ",", "wörld", "!", "Un", "aff", "able", "你"]


def test_batch_padding_and_masks(tok):
    batch = tok(["hello", "the fox !"], ["world", ""], padding=True, return_special_tokens_mask=True)
    # an empty text_pair in a batch is still a (empty) second text: [CLS] A [SEP] [SEP]
    assert batch["input_ids"] == [[CLS, ID("hello"), SEP, ID("world"), SEP, PAD],
                                  [CLS, ID("the"), ID("fox"), ID("!"), SEP, SEP]]
    assert batch["token_type_ids"] == [[0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 1]]
    assert batch["attention_mask"] == [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]]
    assert batch["special_tokens_mask"] == [[1, 0, 1, 0, 1, 1], [1, 0, 0, 0, 1, 1]]
    left = tok(["hello", "the fox"], padding="max_length", max_length=5, padding_side="left")
    assert left["input_ids"] == [[PAD, PAD, CLS, ID("hello"), SEP], [PAD, CLS, ID("the"), ID("fox"), SEP]]


def test_truncation_strategies(tok):
    text, pair = "the fox the fox the fox", "hello world"  # 6 and 2 tokens
    # longest_first: 7 - 3 specials leaves 4; the pair's 2 fit in half, the first text gets the rest
    assert tok(text, pair, truncation=True, max_length=7)["input_ids"] == [
        CLS, ID("the"), ID("fox"), SEP, ID("hello"), ID("world"), SEP]
    assert tok(text, pair, truncation="only_first", max_length=6)["input_ids"] == [
        CLS, ID("the"), SEP, ID("hello"), ID("world"), SEP]
    with pytest.raises(ValueError, match="too short"):
        tok(text, pair, truncation="only_second", max_length=6)
    with pytest.raises(ValueError, match="text_pair"):
        tok(text, truncation="only_second", max_length=4)
    windows = tok(text, truncation=True, max_length=5, stride=1, return_overflowing_tokens=True)
    assert windows["input_ids"] == [[CLS, 8, 9, 8, SEP], [CLS, 8, 9, 8, SEP], [CLS, 8, 9, SEP]]
    assert windows["overflow_to_sample_mapping"] == [0, 0, 0]
    with pytest.raises(ValueError, match="stride"):
        tok(text, truncation=True, max_length=4, stride=2)


def test_too_long_without_truncation_warns_once():
    tok = BertTokenizer(dict(VOCAB), model_max_length=4, backend="python")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(tok("the fox the fox")["input_ids"]) == 6  # not truncated, but warned
        tok("the fox the fox")
        assert len(tok("the fox the fox", truncation=True)["input_ids"]) == 4
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1
    assert "longer than the specified maximum sequence length for this model (6 > 4)" in messages[0]


def test_tensors_and_attribute_access(tok):
    torch = pytest.importorskip("torch")
    batch = tok(["hello", "the fox"], padding=True, return_tensors="pt")
    assert batch.input_ids.dtype == torch.long and tuple(batch.input_ids.shape) == (2, 4)
    assert batch.to("cpu")["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert tok("hello", return_tensors="np")["input_ids"].shape == (1, 3)
    with pytest.raises(ValueError, match="padding=True"):
        tok(["hello", "the fox"], return_tensors="pt")


# ---- decoding ---------------------------------------------------------------------------------------------

def test_decode(tok):
    ids = tok("Hello, the fox! Unaffable 你好")["input_ids"]
    assert tok.decode(ids) == "[CLS] hello, the fox! unaffable 你 好 [SEP]"
    assert tok.decode(ids, skip_special_tokens=True) == "hello, the fox! unaffable 你 好"
    contraction = [ID("don"), ID("'"), ID("t"), ID(".")]
    assert tok.decode(contraction) == "don ' t."  # the WordPiece decoder's own clean-up is per token
    assert tok.decode(contraction, clean_up_tokenization_spaces=True) == "don't."
    assert tok.batch_decode([[ID("fox"), ID("##s")], [ID("##s")]]) == ["foxs", "##s"]
    assert tok.decode(ID("fox")) == "fox"


# ---- files and errors -----------------------------------------------------------------------------------

def test_save_and_load_round_trip(tmp_path):
    original = BertTokenizer(dict(VOCAB), do_lower_case=False, model_max_length=64, backend="python")
    written = original.save_pretrained(tmp_path)
    assert sorted(p.name for p in written) == ["special_tokens_map.json", "tokenizer_config.json", "vocab.txt"]
    assert (tmp_path / "vocab.txt").read_text(encoding="utf-8").split("\n")[:3] == ["[PAD]", "[UNK]", "[CLS]"]
    loaded = BertTokenizer.from_pretrained(tmp_path, backend="python")
    assert (loaded.vocab, loaded.do_lower_case, loaded.model_max_length) == (VOCAB, False, 64)
    assert loaded("Hello the fox") == original("Hello the fox")


def test_loads_tokenizer_json_normaliser_without_config(tmp_path):
    data = {"model": {"type": "WordPiece", "vocab": VOCAB, "unk_token": "[UNK]", "max_input_chars_per_word": 100},
            "normalizer": {"type": "BertNormalizer", "lowercase": False, "strip_accents": None,
                           "handle_chinese_chars": True, "clean_text": True},
            "added_tokens": [{"id": MASK, "content": "[MASK]", "special": True}]}
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    tok = BertTokenizer.from_pretrained(tmp_path, backend="python")
    assert not tok.do_lower_case
    assert tok.tokenize("Hello hello") == ["[UNK]", "hello"]
    # a tokenizer_config.json, when present, wins over tokenizer.json (as in transformers)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}), encoding="utf-8")
    assert BertTokenizer.from_pretrained(tmp_path, backend="python").tokenize("Hello") == ["hello"]


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such"):
        BertTokenizer.from_pretrained(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="vocab.txt or tokenizer.json"):
        BertTokenizer.from_pretrained(tmp_path)


@pytest.mark.parametrize("missing", ["[UNK]", "[CLS]", "[SEP]"])
def test_vocab_without_required_special_token(missing):
    vocab = {token: i for i, token in enumerate(t for t in TOKENS if t != missing)}
    with pytest.raises(ValueError, match=f"no '\\{missing[:-1]}\\]'"):
        BertTokenizer(vocab, backend="python")


def test_padding_needs_a_pad_token():
    tok = BertTokenizer({t: i for i, t in enumerate(TOKENS[1:])}, pad_token=None, backend="python")
    assert tok(["fox", "the fox"])["input_ids"][0] == [1, 8, 2]  # fine without padding
    with pytest.raises(ValueError, match="no padding token"):
        tok(["fox", "the fox"], padding=True)


def test_bad_inputs(tok):
    with pytest.raises(ValueError, match=r"text\[1\] is int"):
        tok(["hello", 3, "fox"])
    with pytest.raises(ValueError, match=r"text_pair\[0\] is NoneType"):
        tok(["hello"], [None])
    with pytest.raises(ValueError, match="empty batch"):
        tok([])
    with pytest.raises(ValueError, match="must be a str or a list of str"):
        tok(42)
    with pytest.raises(ValueError, match="same length"):
        tok(["a"], "b")
    with pytest.raises(ValueError, match="padding must be"):
        tok("a", padding="sideways")
    with pytest.raises(ValueError, match="backend"):
        BertTokenizer(dict(VOCAB), backend="rust")


def test_fast_backend_without_tokenizers(monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if not installed: importing it fails
    with pytest.raises(ImportError, match="pip install 'bertkit\\[fast\\]'"):
        BertTokenizer(dict(VOCAB), backend="fast")
    assert BertTokenizer(dict(VOCAB), backend="auto").backend == "python"


@pytest.mark.skipif(len(BACKENDS) < 2, reason="the tokenizers package is not installed")
def test_backends_agree():
    texts = ["Hello, WORLD! 你好", "unaffable the fox's", "\u00e9t\u00e9 \x00 [MASK]\u0301", "  "]
    python, fast = (BertTokenizer(dict(VOCAB), backend=b) for b in ("python", "fast"))
    kwargs = dict(padding=True, return_offsets_mapping=True, return_special_tokens_mask=True)
    assert python(texts, texts[::-1], **kwargs) == fast(texts, texts[::-1], **kwargs)


def test_pickles_for_data_loader_workers(tok):
    import pickle

    tok("warm the caches: héllo")
    copy = pickle.loads(pickle.dumps(tok))
    assert copy.backend == tok.backend
    assert copy("HÉLLO the fox", return_offsets_mapping=True) == tok("HÉLLO the fox", return_offsets_mapping=True)


# ---- long texts tokenized from their beginnings ----------------------------------------------------------

# what a text can hold around a cut: CJK, Latin words and their pieces, accents (precomposed and combining), a final
# sigma, digits, punctuation, BERT's white space and what only looks like it (\x1c is removed, not a space), control
# and invisible characters, special tokens
PIECES = ["北", "京", "天", "气", "好", "张", "三", "hello", "world", "Héllo", "Cafe\u0301", "ΑΣ", "İ", "2019", "x",
          ".", ",", "!", "[", "]", "[MASK]", "[SEP]", " ", " ", "  ", "\t", "\n", "\r\n", "\u3000", "\xa0", "\u2009",
          "\x1c", "\x00", "\u200b", "\x85", "\ufffd", "𠀀"]


def _long_texts(seed: int, n: int = 40) -> list[str]:
    import random

    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 260))) for _ in range(n)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("options", [{}, {"do_lower_case": False}, {"strip_accents": True},
                                     {"tokenize_chinese_chars": False}])
def test_a_long_text_cut_from_its_beginning_is_cut_as_when_tokenized_whole(backend, options):
    """`encode_cut` tokenizes a long single text only as far as its kept tokens reach (`tokenizer.beginnings`): the
    rows and offsets must be those of the whole text cut, the text must be said cut exactly when it is, and the
    backend must have read less than the whole of the long texts."""
    pieces = ["北", "京", "天", "气", "张", "三", "hel", "##lo", "##l", "wor", "##ld", "caf", "##e", "##é", "2019",
              "20", "##19", "x", "[", "]", "ας", "ασ", "i", "h", "##e", "é", "##́", "Σ", "##Σ", "𠀀"]
    tok = BertTokenizer({**VOCAB, **{t: len(VOCAB) + i for i, t in enumerate(dict.fromkeys(pieces))}},
                        backend=backend, **options)
    texts = _long_texts(seed=len(options) + 7)
    read = []
    encode = tok._backend.encode

    def counting(batch, offsets=False):
        read.append(sum(map(len, batch)))
        return encode(batch, offsets=offsets)

    for max_length in (2, 5, 17, 64):
        whole = [len(ids) + 2 for ids, _ in encode(texts)]
        want = tok(texts, truncation=True, max_length=max_length, return_offsets_mapping=True)
        read.clear()
        tok._backend.encode = counting
        try:
            rows, lengths = tok.encode_cut(texts, max_length=max_length, offsets=True)
        finally:
            tok._backend.encode = encode
        assert [row.input_ids for row in rows] == want["input_ids"]
        assert [row.offsets for row in rows] == [[tuple(span) for span in spans] for spans in want["offset_mapping"]]
        assert [n is None or n > max_length for n in lengths] == [n > max_length for n in whole]
        assert all(n is None or n == w for n, w in zip(lengths, whole))
        if max_length <= 17:  # the long texts were read in part
            assert None in lengths and sum(read) < sum(map(len, texts)), (read, sum(map(len, texts)))


def test_a_special_token_holding_a_space_turns_beginnings_off():
    tok = BertTokenizer(VOCAB, additional_special_tokens=["new york"])
    assert tok.word_boundary() is None
    rows, lengths = tok.encode_cut(["hello " * 40], max_length=5)
    assert lengths == [42] and rows[0].input_ids == tok("hello " * 40, truncation=True, max_length=5)["input_ids"]
    boundary = BertTokenizer(VOCAB).word_boundary()
    assert [bool(boundary.match(c)) for c in " \u3000\xa0北𠀀\x1c\x85\u200bx."] == [True] * 5 + [False] * 5
    assert not BertTokenizer(VOCAB, tokenize_chinese_chars=False).word_boundary().match("北")
