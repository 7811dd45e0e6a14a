"""BPETokenizer against transformers' PreTrainedTokenizerFast on a ModernBERT-style tokenizer.json: same ids, token
types and masks, decoding, files both ways; what is not implemented is refused; load_tokenizer picks the class; and a
ModernBERT directory with its BPE tokenizer read end to end by `bertkit encode`, `finetune` and `pretrain --init`.

Model hubs are out of reach, so the tokenizer is made here in ModernBERT's shape: a byte-level BPE trained by
`tokenizers` (on English, Chinese, emoji, digits and runs of whitespace), NFC, GPT-2's split without a prefix space,
added tokens at the end of the vocabulary ([MASK] taking the space before it, a run of spaces, a placeholder the
normaliser sees) and the post-processor "[CLS] $A [SEP]" / "[CLS] $A [SEP] $B:1 [SEP]:1".
"""

from __future__ import annotations

import json
import os
import random
import warnings
from pathlib import Path

import numpy as np
import pytest

from bertkit.errors import DataError
from bertkit.tokenizer import BertTokenizer, BPETokenizer, load_tokenizer
from bertkit.tokenizer.bytelevel import BytePairEncoding
from test_tokenizer_parity import outcome

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only; never wait for the hub

BACKENDS = ["python", "fast"]
SPECIALS = dict(unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]")
CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's what they've said, and we'll see.",
    "Transformers read text as tokens; byte-level BPE spells every text in 256 byte characters.",
    "  Indented lines,\ttabs\tand\nnew lines\n\n   with runs of    spaces.",
    "Café, naïve, résumé and déjà vu: accents on the letters.",
    "今天天气很好，我们去公园散步。北京是中国的首都，明天会下雨。",
    "Emoji 😀 🎉 👍🏽 🇫🇷 and a family 👩‍👩‍👧 in a line.",
    "Numbers 12345, 3.14159, 2024-01-01 and 1,000,000.",
    # letters, numbers and spaces where Python's \s, \d and \w, or the regex package's newer Unicode, differ from
    # tokenizers': learned merges across the pieces a wrong split would make
    "x\x1cy !\x1c! ǅx Ⅻ1 ٣4 ²3 \U0001e5d0a !\U00010940! !\U00011de0!",
]
TEXTS = [
    "The capital of France is [MASK].",
    "  leading spaces, and trailing ones   ",
    "multiple     spaces\tand\ttabs\nnew\n\n lines",
    "Café naïve, and e\u0301 decomposed (NFC makes it é)",
    # marks only Python's Unicode tables know, which tokenizers' NFC neither reorders nor composes
    "a\u0898\u0334 and \U00011935\U00011930",
    "今天天气很好，我们去公园散步。",
    "emoji 😀🎉 👍🏽 🇫🇷 and 👩‍👩‍👧 together",
    "numbers 12345 3.14159 2024-01-01 ½ ①②",
    "It's don't we'll they've I'M",
    "[MASK][MASK] and [CLS] x [SEP] literally",
    "an address |||IP_ADDRESS||| hidden",
    "",
    " ",
    "unseen words: zyzzyva quixotic " * 12,
    "x\x1cy !\x1c! ǅx Ⅻ1 ٣4 ²3 \U0001e5d0a !\U00010940! !\U00011de0!",
]
PAIRS = ["a pair", "", "  [MASK]  ", "北京是中国的首都", "x" * 40, "dog", "😀", "1 2 3", "y", "Café", "z", "  ",
         "short", "x\x1fy", "o\u0301"]


def train_tokenizer(directory: Path) -> None:
    """A ModernBERT-style tokenizer directory: tokenizer.json, tokenizer_config.json, special_tokens_map.json."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(CORPUS * 20, trainer)
    tokenizer.add_tokens([AddedToken("   ", normalized=True), AddedToken("|||IP_ADDRESS|||", normalized=True)])
    tokenizer.add_special_tokens([AddedToken("<|padding|>", normalized=False),
                                  *(AddedToken(token, normalized=False) for token in ("[UNK]", "[CLS]", "[SEP]",
                                                                                      "[PAD]")),
                                  AddedToken("[MASK]", lstrip=True, normalized=False)])
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    added = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))["added_tokens"]
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192, "clean_up_tokenization_spaces":
              True, "model_input_names": ["input_ids", "attention_mask"], **SPECIALS,
              "added_tokens_decoder": {str(token.pop("id")): token for token in added}}
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (directory / "special_tokens_map.json").write_text(json.dumps(SPECIALS, indent=2), encoding="utf-8")


def edit_tokenizer_json(directory: Path, edit) -> None:
    path = directory / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def prefix_space_variant(data: dict) -> None:
    """RoBERTa's choices instead: a prefix space, no normaliser, whole words the vocabulary holds kept whole, and
    [MASK] taking the space after it."""
    data["pre_tokenizer"]["add_prefix_space"] = True
    data["normalizer"] = None
    data["model"]["ignore_merges"] = True
    for token in data["added_tokens"]:
        if token["content"] == "[MASK]":
            token["lstrip"], token["rstrip"] = False, True


@pytest.fixture(scope="module")
def modern_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("modernbert-tokenizer")
    train_tokenizer(directory)
    return directory


@pytest.fixture(scope="module", params=["modernbert", "prefix-space"])
def variant_dir(request, modern_dir, tmp_path_factory) -> Path:
    if request.param == "modernbert":
        return modern_dir
    directory = tmp_path_factory.mktemp("prefix-space-tokenizer")
    train_tokenizer(directory)
    edit_tokenizer_json(directory, prefix_space_variant)
    config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    mask = next(token for token in config["added_tokens_decoder"].values() if token["content"] == "[MASK]")
    mask["lstrip"], mask["rstrip"] = False, True
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


def reference(directory: Path):
    """transformers' tokenizer for the file, as the task asks: PreTrainedTokenizerFast(tokenizer_file=...)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.PreTrainedTokenizerFast(tokenizer_file=str(directory / "tokenizer.json"), **SPECIALS)


CALLS = [dict(), dict(padding=True), dict(padding=True, truncation=True, max_length=12),
         dict(padding="max_length", truncation=True, max_length=40), dict(truncation="only_first", max_length=24),
         dict(truncation=True, max_length=16, return_overflowing_tokens=True, stride=2),
         dict(padding=True, pad_to_multiple_of=8, return_special_tokens_mask=True),
         dict(padding=True, truncation=True, max_length=16, return_tensors="pt")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_ids_equal_transformers(variant_dir, backend):
    """Single texts and pairs, one at a time and batched, with padding, truncation and overflow: every list equal."""
    ours, theirs = BPETokenizer.from_pretrained(variant_dir, backend=backend), reference(variant_dir)
    assert ours.backend == backend
    failed = []
    for kwargs in CALLS:
        for pairs in (None, PAIRS):
            expected = outcome(theirs, TEXTS, pairs, return_token_type_ids=True, **kwargs)
            assert outcome(ours, TEXTS, pairs, **kwargs) == expected, (kwargs, pairs is not None)
            if expected == "error":
                failed.append((kwargs.get("truncation"), pairs is not None))
    assert failed == [("only_first", True)]  # a first text too short to cut alone: an error in both
    for text, pair in zip(TEXTS, PAIRS):
        assert outcome(ours, text) == outcome(theirs, text, return_token_type_ids=True), text
        assert outcome(ours, text, pair) == outcome(theirs, text, pair, return_token_type_ids=True), (text, pair)
        assert ours.tokenize(text) == theirs.tokenize(text), text
        assert ours.tokenize(text, pair, add_special_tokens=True) == theirs.tokenize(text, pair,
                                                                                     add_special_tokens=True)
        assert ours.encode(text) == theirs.encode(text)
    mask_row = ours("Paris is [MASK].")["input_ids"]
    assert mask_row.count(ours.mask_token_id) == 1 and mask_row[0] == ours.cls_token_id
    assert [ours.convert_ids_to_tokens(i) for i in mask_row] == theirs.convert_ids_to_tokens(mask_row)


def test_the_vocabulary_and_special_tokens_are_transformers(modern_dir):
    ours, theirs = BPETokenizer.from_pretrained(modern_dir), reference(modern_dir)
    assert ours.get_vocab() == theirs.get_vocab()
    assert (ours.vocab_size, len(ours)) == (theirs.vocab_size, len(theirs))
    assert len(ours) == ours.vocab_size + 8  # the added tokens: a run of spaces, a placeholder, six special ones
    for name in ("pad_token_id", "cls_token_id", "sep_token_id", "mask_token_id", "unk_token_id"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert sorted(ours.all_special_ids) == sorted(theirs.all_special_ids) == list(range(len(ours) - 5, len(ours)))
    tokens = ["Ġthe", "[MASK]", "|||IP_ADDRESS|||", "not-a-token"]
    assert ours.convert_tokens_to_ids(tokens) == theirs.convert_tokens_to_ids(tokens)
    with warnings.catch_warnings():  # the directory as AutoTokenizer reads it: tokenizer_config.json too
        warnings.simplefilter("ignore")
        auto = transformers.AutoTokenizer.from_pretrained(modern_dir)
    assert ours.model_max_length == auto.model_max_length == 8192
    assert outcome(ours, TEXTS, PAIRS, truncation=True) == outcome(auto, TEXTS, PAIRS, truncation=True,
                                                                   return_token_type_ids=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_decode_round_trips(variant_dir, backend):
    """ids -> text gives the (normalised) text back where no added token took whitespace, and transformers' text
    everywhere, special tokens kept or skipped; a character cut in the middle of its bytes is U+FFFD in both."""
    ours, theirs = BPETokenizer.from_pretrained(variant_dir, backend=backend), reference(variant_dir)
    nfc = json.loads((variant_dir / "tokenizer.json").read_text(encoding="utf-8"))["normalizer"] is not None
    rows = ours(TEXTS, PAIRS)["input_ids"]
    for text, ids in zip(TEXTS, rows):
        plain = ours(text, add_special_tokens=False)["input_ids"]
        if "[" not in text and not (ours.add_prefix_space and text and not text.startswith(" ")):
            assert ours.decode(plain) == (tokenizers.normalizers.NFC().normalize_str(text) if nfc else text)
        assert ours.decode(ids) == theirs.decode(ids)
        assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True)
    assert ours.batch_decode(rows, skip_special_tokens=True) == theirs.batch_decode(rows, skip_special_tokens=True)
    assert ours.decode(ours("Paris is [MASK].")["input_ids"]) == theirs.decode(theirs("Paris is [MASK].")["input_ids"])
    owl = ours("an owl 🦉", add_special_tokens=False)["input_ids"]  # unseen in training: its 4 bytes in pieces
    cut = [ours.decode(owl[:k]) for k in range(1, len(owl) + 1)]
    assert cut == [theirs.decode(owl[:k]) for k in range(1, len(owl) + 1)]
    assert cut[-1].endswith("owl 🦉") and any(text.endswith("\ufffd") for text in cut)


@pytest.mark.parametrize("backend", BACKENDS)
def test_save_pretrained_loads_in_transformers(variant_dir, tmp_path, backend):
    """What save_pretrained writes, AutoTokenizer loads with the same ids; so does BPETokenizer itself."""
    ours = BPETokenizer.from_pretrained(variant_dir, backend=backend)
    written = ours.save_pretrained(tmp_path / "saved")
    assert sorted(path.name for path in written) == ["special_tokens_map.json", "tokenizer.json",
                                                     "tokenizer_config.json"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = transformers.AutoTokenizer.from_pretrained(tmp_path / "saved")
    again = BPETokenizer.from_pretrained(tmp_path / "saved", backend=backend)
    expected = outcome(reference(variant_dir), TEXTS, PAIRS, padding=True, return_token_type_ids=True)
    assert outcome(loaded, TEXTS, PAIRS, padding=True, return_token_type_ids=True) == expected
    assert outcome(again, TEXTS, PAIRS, padding=True) == outcome(ours, TEXTS, PAIRS, padding=True) == expected
    assert loaded.decode(expected["input_ids"][0]) == ours.decode(expected["input_ids"][0])
    assert (loaded.pad_token_id, loaded.mask_token_id) == (ours.pad_token_id, ours.mask_token_id)


def test_a_tokenizer_built_in_code_gets_its_special_tokens(modern_dir, tmp_path):
    """BPETokenizer(vocab, merges): the special tokens it names and the vocabulary lacks are added after the last id,
    matched before the split, and what it saves transformers reads with the same ids."""
    model = json.loads((modern_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"]
    ours = BPETokenizer(model["vocab"], model["merges"], nfc=True, backend="python")
    n = len(model["vocab"])
    assert [ours.unk_token_id, ours.sep_token_id, ours.pad_token_id, ours.cls_token_id, ours.mask_token_id] == [
        n, n + 1, n + 2, n + 3, n + 4]
    row = ours("a [MASK] b")["input_ids"]
    assert row[0] == n + 3 and row[-1] == n + 1 and n + 4 in row
    ours.save_pretrained(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert outcome(loaded, TEXTS, PAIRS, padding=True, return_token_type_ids=True) == outcome(ours, TEXTS, PAIRS,
                                                                                             padding=True)


def test_merges_follow_tokenizers_order():
    """Merges that compete for a symbol, and tokens that two different pairs make: the lowest rank first, the
    leftmost of equal ranks, one merge at a time (not every occurrence of a pair at once), as `tokenizers`."""
    from tokenizers import Tokenizer, models

    rng = random.Random(0)
    for _ in range(20):
        vocab = {char: i for i, char in enumerate("abcd")}
        merges = []
        while len(merges) < 25:
            a, b = rng.choice(list(vocab)), rng.choice(list(vocab))
            if len(a + b) <= 5 and (a, b) not in merges:
                vocab.setdefault(a + b, len(vocab))
                merges.append((a, b))
        rng.shuffle(merges)  # ranks in any order: a merge may use a token made by a later-ranked one
        words = ["".join(rng.choice("abcd") for _ in range(rng.randint(1, 14))) for _ in range(150)]
        ours = BytePairEncoding(vocab, merges)
        theirs = Tokenizer(models.BPE(vocab=vocab, merges=merges))
        assert [list(ours.ids[word]) for word in words] == [encoding.ids for encoding in theirs.encode_batch(words)]


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(model={"type": "Unigram", "unk_id": 0, "vocab": [["[UNK]", 0.0], ["a", -1.0]]}),
     "the model is 'Unigram'"),
    (lambda d: d.update(pre_tokenizer={"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                                       "split": True}), "the pre_tokenizer 'Metaspace' is not implemented"),
    (lambda d: d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}),
     "the pre_tokenizer 'Sequence' is not implemented"),
    (lambda d: d.update(normalizer={"type": "Lowercase"}), "the normalizer 'Lowercase' is not implemented"),
    (lambda d: d.update(normalizer={"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]}),
     "the normalizer 'Sequence' is not implemented"),
    (lambda d: d.update(decoder={"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}),
     "the decoder is 'Metaspace'"),
    (lambda d: d.update(post_processor={"type": "RobertaProcessing", "sep": ["[SEP]", 602], "cls": ["[CLS]", 603],
                                        "trim_offsets": True, "add_prefix_space": False}),
     "the post_processor is not implemented"),
    (lambda d: d["model"].update(dropout=0.1), "BPE dropout 0.1 is not implemented"),
    (lambda d: d["model"].update(byte_fallback=True), "byte_fallback"),
    (lambda d: d["added_tokens"][-1].update(single_word=True), "'[MASK]' has single_word, which is not implemented"),
])
def test_what_is_not_implemented_is_refused(modern_dir, tmp_path, edit, message):
    """A tokenizer.json whose pipeline bertkit does not implement is an error naming the file and the step, never a
    tokenizer that gives other ids; transformers loads each of these (they are real tokenizers, not broken files)."""
    directory = tmp_path / "tok"
    directory.mkdir()
    (directory / "tokenizer.json").write_bytes((modern_dir / "tokenizer.json").read_bytes())
    edit_tokenizer_json(directory, edit)
    tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))  # a tokenizer `tokenizers` reads
    for load in (BPETokenizer.from_pretrained, load_tokenizer):
        with pytest.raises(DataError) as caught:
            load(directory)
        if "Unigram" not in message or load is BPETokenizer.from_pretrained:
            assert message in str(caught.value)
        assert str(directory / "tokenizer.json") in str(caught.value)


def test_a_configuration_that_disagrees_with_tokenizer_json_is_refused(modern_dir, tmp_path):
    """tokenizer_config.json flagging an added token otherwise than tokenizer.json: transformers would change the
    token, so bertkit refuses rather than guess."""
    directory = tmp_path / "tok"
    directory.mkdir()
    for name in ("tokenizer.json", "special_tokens_map.json"):
        (directory / name).write_bytes((modern_dir / name).read_bytes())
    config = json.loads((modern_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    next(token for token in config["added_tokens_decoder"].values() if token["content"] == "[MASK]")["lstrip"] = False
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(DataError, match=r"the added token '\[MASK\]' has lstrip False there but True"):
        BPETokenizer.from_pretrained(directory)


# more places where offsets are easy to get wrong: composition that NFC reorders or lengthens, Hangul jamo, emoji
# whose bytes fall into several tokens, [MASK] taking spaces on either side
OFFSET_TEXTS = [*TEXTS, "  two leading", "a\t\tb\n\n  c ",
                "e\u0301\u0323 \u1100\u1161\u11a8 \u0958 \uac00\u0323\u0f73 x",
                "an owl 🦉 and 👩‍👩‍👧 here", "x [MASK] y", " [MASK] ", "  [MASK]", "1234567 89", "naïve cafe\u0301 ok"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_offsets_equal_transformers(variant_dir, backend):
    """return_offsets_mapping: each token's span in the original text equal to transformers', for single texts and
    pairs, through truncation, overflow windows and padding, with the ids beside them."""
    ours, theirs = BPETokenizer.from_pretrained(variant_dir, backend=backend), reference(variant_dir)
    pairs = [*PAIRS, *OFFSET_TEXTS[len(PAIRS):]][::-1]
    for kwargs in CALLS:
        for second in (None, pairs):
            expected = outcome(theirs, OFFSET_TEXTS, second, return_token_type_ids=True, return_offsets_mapping=True,
                               **kwargs)
            got = outcome(ours, OFFSET_TEXTS, second, return_offsets_mapping=True, **kwargs)
            assert got == expected, (kwargs, second is not None)
            if expected != "error":
                assert "offset_mapping" in got
    for text, pair in zip(OFFSET_TEXTS, pairs):
        for args in ((text,), (text, pair)):
            got = ours(*args, return_offsets_mapping=True)["offset_mapping"]
            assert got == theirs(*args, return_offsets_mapping=True)["offset_mapping"], args
    windows = ours(OFFSET_TEXTS[2], truncation=True, max_length=8, stride=3, return_overflowing_tokens=True,
                   return_offsets_mapping=True)["offset_mapping"]
    assert len(windows) > 2 and windows[1][1:4] == windows[0][-4:-1]  # the windows overlap by the stride


@pytest.mark.parametrize("backend", BACKENDS)
def test_offsets_are_spans_of_the_original_text(modern_dir, backend):
    """The spans themselves: a token keeps the space it starts with, [MASK] spans the space it took, every token of
    an emoji's bytes spans the whole emoji, a composed é spans the e it was aligned with, special tokens (0, 0)."""
    ours = BPETokenizer.from_pretrained(modern_dir, backend=backend)
    text = "is [MASK] 🦉 e\u0301x"
    encoding = ours(text, return_offsets_mapping=True)
    tokens = ours.convert_ids_to_tokens(encoding["input_ids"])
    spans = [text[start:stop] for start, stop in encoding["offset_mapping"]]
    assert encoding["offset_mapping"][0] == encoding["offset_mapping"][-1] == (0, 0)
    assert tokens[1:4] == ["i", "s", "[MASK]"] and spans[1:4] == ["i", "s", " [MASK]"]
    owl = [span for token, span in zip(tokens, spans) if token not in ("Ġ", "[CLS]", "[SEP]") and span.strip() in
           ("🦉", "")]
    assert len(owl) >= 2 and set(owl) <= {"🦉", " 🦉"}  # the owl's four bytes in several tokens, all the owl
    assert spans[-3:-1] == ["e", "x"] and tokens[-3] == "Ã©"  # é (from e + U+0301) is the e; the mark has no token


def test_nfc_alignment_is_tokenizers(tmp_path):
    """The character alignment NFC leaves, which offsets are read through, equal to `tokenizers`' on random texts
    of starters, marks that reorder and compose, characters that decompose, and Hangul jamo."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    from bertkit.tokenizer import unicode_tables as uni

    per_char = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    per_char.normalizer = normalizers.NFC()
    per_char.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), "isolated")  # one piece per character
    alphabet = [*"aeoK \u00e9\u212b\u1e9b\u0301\u0323\u0334\u0308\u0344\u0958\u0f73\u093c\u0915",
                *"\u1100\u1161\u11a8\uac00",
                "\u0898", "\U00011935", "\U00011930", "😀", "今"]
    rng = random.Random(1)
    changed = 0
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        normal, origin = uni.nfc_aligned(text)
        assert normal == per_char.normalizer.normalize_str(text)
        assert [(index, index + 1) for index in origin] == per_char.encode(text).offsets, text
        changed += normal != text
    assert changed > 1000


def test_load_tokenizer_picks_the_class(modern_dir, tmp_path):
    """vocab.txt or a WordPiece tokenizer.json: a BertTokenizer; a BPE tokenizer.json (its directory or the file): a
    BPETokenizer. Each reads its files as transformers does."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s"]
    BertTokenizer({word: i for i, word in enumerate(words)}).save_pretrained(tmp_path / "vocab")
    wordpiece = Tokenizer(models.WordPiece({word: i for i, word in enumerate(words)}, unk_token="[UNK]"))
    wordpiece.normalizer = normalizers.BertNormalizer(lowercase=True)
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    (tmp_path / "wordpiece").mkdir()
    wordpiece.save(str(tmp_path / "wordpiece" / "tokenizer.json"))
    for directory in (tmp_path / "vocab", tmp_path / "wordpiece"):
        tokenizer = load_tokenizer(directory)
        assert type(tokenizer) is BertTokenizer
        assert tokenizer("Hello worlds")["input_ids"] == [2, 5, 6, 7, 3]
    expected = reference(modern_dir)(TEXTS[0])["input_ids"]
    for path in (modern_dir, modern_dir / "tokenizer.json"):
        tokenizer = load_tokenizer(path, backend="python")
        assert type(tokenizer) is BPETokenizer and tokenizer.backend == "python"
        assert tokenizer(TEXTS[0])["input_ids"] == expected


# ---- a ModernBERT directory with its BPE tokenizer, end to end --------------------------------------------------

def modernbert_dir(tokenizer_dir: Path, directory: Path, head: str = "ModernBertModel"):
    """A tiny random transformers ModernBERT saved with the BPE tokenizer's files; (its model, the directory)."""
    import torch

    ours = BPETokenizer.from_pretrained(tokenizer_dir)
    config = transformers.ModernBertConfig(
        vocab_size=len(ours), hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
        max_position_embeddings=256, local_attention=8, global_attn_every_n_layers=2,
        pad_token_id=ours.pad_token_id, cls_token_id=ours.cls_token_id, sep_token_id=ours.sep_token_id,
        bos_token_id=ours.cls_token_id, eos_token_id=ours.sep_token_id)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = getattr(transformers, head)(config).eval()
    with torch.no_grad():  # away from the initialisation's zeros and ones, so that every weight counts
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    model.save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (directory / name).write_bytes((tokenizer_dir / name).read_bytes())
    return model, directory


def test_encode_reads_a_modernbert_directory_with_its_bpe_tokenizer(modern_dir, tmp_path):
    """`bertkit encode --pooling mean` on the directory: transformers' vectors (its own tokenizer, AutoTokenizer on
    the same directory, makes the ids) within 1e-5."""
    import torch

    from bertkit.cli import main

    theirs, directory = modernbert_dir(modern_dir, tmp_path / "model")
    texts = ["The capital of France is [MASK].", "今天天气很好，我们去公园散步。", "emoji 😀🎉 and  two   spaces",
             "Café naïve e\u0301"]
    out = tmp_path / "vectors.npy"
    assert main(["encode", "--model", str(directory), *texts, "--pooling", "mean", "--out", str(out)]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        encoded = transformers.AutoTokenizer.from_pretrained(directory)(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = theirs(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"]).last_hidden_state
    weights = encoded["attention_mask"].unsqueeze(-1).float()
    expected = ((hidden * weights).sum(1) / weights.sum(1)).numpy()
    np.testing.assert_allclose(np.load(out), expected, atol=1e-5, rtol=0)


def test_finetune_and_pretrain_init_read_a_modernbert_with_its_bpe_tokenizer(modern_dir, tmp_path, capsys):
    """`finetune --task classify` trains the directory's classifier on its BPE ids and saves the tokenizer with the
    best model (transformers loads both, the same ids); `predict` reads it; `pretrain --init` continues the masked LM
    on a corpus read through the same tokenizer, and refuses whole-word masking with it; ner, which tokenizes each
    word on its own, is refused for it by name."""
    from bertkit.cli import main

    _, directory = modernbert_dir(modern_dir, tmp_path / "model", head="ModernBertForMaskedLM")
    rng = np.random.default_rng(0)
    for split, count in (("train", 160), ("dev", 40), ("test", 40)):
        rows = []
        for i in range(count):
            label = ["good", "bad"][i % 2]
            filler = " ".join(rng.choice(["the", "fox", "dog", "今天", "😀"], size=rng.integers(1, 4)))
            rows.append(f"{filler} {'good' if label == 'good' else 'bad'} {filler}\t{label}")
        (tmp_path / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert main(["finetune", "--task", "classify", "--model", str(directory), "--train", str(tmp_path / "train.tsv"),
                 "--dev", str(tmp_path / "dev.tsv"), "--test", str(tmp_path / "test.tsv"), "--max-length", "32",
                 "--no-progress", "--max-steps", "40", "--batch-size", "16", "--learning-rate", "3e-3", "--out",
                 str(tmp_path / "run")]) == 0
    results = json.loads((tmp_path / "run" / "finetune_results.json").read_text())
    assert results["test_accuracy"] >= 0.9
    best = tmp_path / "run" / "best"
    assert type(load_tokenizer(best)) is BPETokenizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        saved = transformers.AutoTokenizer.from_pretrained(best)
    assert saved(TEXTS, PAIRS)["input_ids"] == reference(modern_dir)(TEXTS, PAIRS)["input_ids"]
    capsys.readouterr()
    assert main(["predict", "--model", str(best), "the good dog", "a bad fox"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "good" in lines[0] and "bad" in lines[1]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(" ".join(CORPUS[k % len(CORPUS)] for k in range(i, i + 3)) + "\n\n"
                              for i in range(60)), encoding="utf-8")
    assert main(["pretrain", "--init", str(directory), "--objective", "mlm", "--corpus", str(corpus), "--out",
                 str(tmp_path / "more"), "--max-steps", "3", "--batch-size", "8", "--max-seq-length", "64",
                 "--no-progress"]) == 0
    assert type(load_tokenizer(tmp_path / "more")) is BPETokenizer
    capsys.readouterr()
    (tmp_path / "tags.conll").write_text("good B-X\ndog O\n\n" * 20, encoding="utf-8")
    path = str(tmp_path / "tags.conll")
    assert main(["finetune", "--task", "ner", "--model", str(directory), "--train", path, "--dev", path, "--test",
                 path, "--max-steps", "1", "--out", str(tmp_path / "ner")]) == 2
    err = capsys.readouterr().err
    assert "--task ner is not implemented for the byte-level BPE tokenizer" in err
    assert "it tokenizes each word on its own" in err
    assert main(["pretrain", "--init", str(directory), "--objective", "mlm", "--wwm", "--corpus", str(corpus), "--out",
                 str(tmp_path / "wwm"), "--max-steps", "1", "--no-progress"]) == 2
    assert "whole-word masking (--wwm) is not implemented for the byte-level BPE" in capsys.readouterr().err
    assert transformers.ModernBertForMaskedLM.from_pretrained(tmp_path / "more").config.vocab_size == len(
        load_tokenizer(directory))


def test_finetune_qa_trains_a_modernbert_reader_with_its_bpe_tokenizer(modern_dir, tmp_path, capsys):
    """`finetune --task qa` finds each answer's tokens by their offsets, so it trains a ModernBERT reader on BPE ids:
    the labelled tokens are the answer's, and `predict` answers with a span of the context, words without the
    space their first token starts with; a tagger with the BPE tokenizer is refused by name."""
    from bertkit.cli import main
    from bertkit.data.qa import qa_windows, read_squad
    from test_qa_cli import toy_squad

    _, directory = modernbert_dir(modern_dir, tmp_path / "model", head="ModernBertForMaskedLM")
    for split, count, seed in (("train", 48, 0), ("dev", 12, 1)):
        (tmp_path / f"{split}.json").write_text(json.dumps(toy_squad(count, seed)), encoding="utf-8")
    tokenizer = BPETokenizer.from_pretrained(directory)
    examples = read_squad(tmp_path / "train.json")
    windows = qa_windows(examples, tokenizer, 64, 16)
    labelled = [w for w in windows if w.start_position]
    assert len(labelled) >= len(examples)  # every answer whole in at least one window
    for window in labelled:
        example = examples[window.example]
        first, last = window.start_position - window.context_start, window.end_position - window.context_start
        covered = example.context[window.offsets[first][0]:window.offsets[last][1]]
        assert covered.strip() == example.answers[0].text, (covered, example.answers[0].text)
    assert main(["finetune", "--task", "qa", "--model", str(directory), "--train", str(tmp_path / "train.json"),
                 "--dev", str(tmp_path / "dev.json"), "--max-length", "64", "--doc-stride", "16",
                 "--max-answer-length", "4", "--max-steps", "6", "--batch-size", "8", "--learning-rate", "1e-3",
                 "--eval-every", "3", "--no-progress", "--out", str(tmp_path / "run")]) == 0
    results = json.loads((tmp_path / "run" / "finetune_results.json").read_text())
    assert results["train_examples"] == 48 and results["dev_f1"] is not None
    best = tmp_path / "run" / "best"
    assert type(load_tokenizer(best)) is BPETokenizer
    context = examples[0].context
    capsys.readouterr()
    assert main(["predict", "--model", str(best), "--json", "--context", context, "--question",
                 examples[0].question]) == 0
    [answer] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert context[answer["start"]:answer["end"]] == answer["answer"] != ""
    assert answer["answer"] == answer["answer"].strip() and 0 < answer["score"] <= 1
    _, tagger = modernbert_dir(modern_dir, tmp_path / "tagger", head="ModernBertForTokenClassification")
    assert main(["predict", "--model", str(tagger), "the good dog"]) == 2
    assert "tagging (entity spans) is not implemented for the byte-level BPE tokenizer" in capsys.readouterr().err


def test_attention_reads_a_modernbert_with_its_bpe_tokenizer(modern_dir, tmp_path, capsys):
    """`bertkit attention` on the directory: the page's tokens are transformers' (byte characters, [MASK] with the
    space it took), its weights transformers' attention probabilities."""
    import torch

    from bertkit.cli import main
    from test_attention_viewer import page_data

    theirs, directory = modernbert_dir(modern_dir, tmp_path / "model")
    text = "The capital of France is [MASK]. 今天 😀"
    assert main(["attention", text, "--model", str(directory), "--out", str(tmp_path / "page.html")]) == 0
    [kind] = page_data((tmp_path / "page.html").read_text(encoding="utf-8"))["kinds"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = transformers.AutoTokenizer.from_pretrained(directory)
    encoded = auto([text], return_tensors="pt")
    assert kind["query_tokens"] == auto.convert_ids_to_tokens(encoded["input_ids"][0].tolist())
    theirs.config._attn_implementation = "eager"
    with torch.no_grad():
        attentions = theirs(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"],
                            output_attentions=True).attentions
    np.testing.assert_allclose(np.array(kind["attentions"]), torch.cat(attentions).numpy(), atol=6e-5, rtol=0)
