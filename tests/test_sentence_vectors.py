"""Sentence vectors that do not depend on the batch, the sentence-transformers files a model directory declares them
in, and the real models against sentence-transformers itself."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertkit.inference import encode
from bertkit.inference.encode import declared_settings
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.modeling import BertModel
from bertkit.models.functional import KEY_BLOCK, keys_in_whole_blocks
from bertkit.models.sentence_files import (
    SentenceConfig,
    SentenceModuleWarning,
    read_sentence_config,
    write_sentence_config,
)
from bertkit.tokenizer import BertTokenizer
from conftest import model_dir_or_skip
from weights import randomise

pytestmark = pytest.mark.usefixtures("one_thread")

LETTERS = "abcdefghijklmnopqrstuvwxyz"
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *LETTERS]


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer({token: i for i, token in enumerate(VOCAB)}, backend="python")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=96, max_position_embeddings=256)
    return randomise(BertModel(config), seed=1)


def letters(n: int, length: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(LETTERS) for _ in range(rng.randint(length // 2, length))) for _ in range(n)]


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("normalize", [False, True])
def test_a_text_gets_the_same_vector_alone_among_short_texts_and_among_long_ones(model, tokenizer, pooling,
                                                                                normalize):
    """fp32, within 1e-6: the vector of a text does not depend on what it is batched with (its padding, the batch's
    size and longest row). The server (bertkit.inference.serving.ServedModel) runs the same `sentence_vectors` over
    the same padded batches, so this holds for `bertkit serve` too (test_served_vectors_are_encodes below)."""
    texts = ["a b c", "hello", "the quick brown fox", "x" * 30, " ".join("abcdefghijklmnopq")]
    shorts, longs = letters(12, 8, seed=2), letters(12, 200, seed=3)
    settings = dict(pooling=pooling, normalize=normalize)
    alone = np.stack([encode(model, tokenizer, text, **settings) for text in texts])
    among_short = encode(model, tokenizer, [*shorts[:6], *texts, *shorts[6:]], **settings)[6:6 + len(texts)]
    among_long = encode(model, tokenizer, [*longs[:6], *texts, *longs[6:]], **settings)[6:6 + len(texts)]
    mixed = encode(model, tokenizer, [*longs, *texts], batch_size=len(texts) + len(longs), **settings)[len(longs):]
    for batched in (among_short, among_long, mixed):
        assert np.abs(batched - alone).max() <= 1e-6
    assert np.abs(alone[0] - alone[1]).max() > 1e-2  # the texts' vectors differ: a mix-up could not pass


def sdpa(query, key, value, mask):
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask)


def test_masked_keys_padded_to_whole_blocks_change_nothing_but_the_rounding_path():
    torch.manual_seed(0)
    for length in (1, 5, 16, 27, 40):
        q, k, v = (torch.randn(2, 4, length, 8) for _ in range(3))
        key, value, mask = keys_in_whole_blocks(k, v, None)
        assert key.shape[-2] % KEY_BLOCK == 0 and value.shape == key.shape
        alone = sdpa(q, key, value, mask)
        assert (alone - sdpa(q, k, v, None)).abs().max() <= 1e-6
        # the same rows padded in a batch (pad keys masked), then to whole blocks: exactly the lone rows' values
        pad = 50 - length
        k_pad, v_pad = (torch.cat([x, torch.randn(2, 4, pad, 8)], 2) for x in (k, v))
        bias = torch.zeros(2, 1, 1, 50).masked_fill(torch.arange(50) >= length, torch.finfo(torch.float32).min)
        assert torch.equal(sdpa(q, *keys_in_whole_blocks(k_pad, v_pad, bias)), alone)


def test_served_vectors_are_encodes(model, tokenizer, tmp_path):
    """`bertkit serve` turns a batch of requests into one padded batch and runs `sentence_vectors`, the function
    `encode` runs: the same vectors, whatever else the batch held."""
    pytest.importorskip("starlette")
    from bertkit.inference.serving import ServedModel

    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    served = ServedModel.load(tmp_path, pooling="mean")
    texts = ["a b c", *letters(5, 100, seed=4)]
    expected = encode(model, tokenizer, texts[:1], pooling="mean")[0]
    assert np.abs(served.run(served.rows(texts))[0] - expected).max() <= 1e-6


# ---- what a directory declares -------------------------------------------------------------------

def test_sentence_files_round_trip_and_what_each_declares(tmp_path):
    assert read_sentence_config(tmp_path) == SentenceConfig()
    write_sentence_config(tmp_path, SentenceConfig("cls", True, 128), hidden_size=64)
    assert read_sentence_config(tmp_path) == SentenceConfig("cls", True, 128)
    modules = json.loads((tmp_path / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling", "Normalize"]
    assert modules[0]["path"] == "" and (tmp_path / "2_Normalize").is_dir()
    pooling = json.loads((tmp_path / "1_Pooling" / "config.json").read_text())
    assert pooling["word_embedding_dimension"] == 64 and pooling["pooling_mode_cls_token"]
    write_sentence_config(tmp_path, SentenceConfig("mean", False, None), hidden_size=64)  # written again: no Normalize
    assert read_sentence_config(tmp_path) == SentenceConfig("mean", False, 512)
    assert not (tmp_path / "2_Normalize").exists()


def test_m3e_and_older_layouts_and_unknown_modules(tmp_path):
    (tmp_path / "config.json").write_text('{"uniem_embedding_strategy": "last_mean"}')
    assert read_sentence_config(tmp_path).pooling == "mean"
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode": "cls"}')  # sentence-transformers 5's
    (tmp_path / "2_Normalize").mkdir()
    assert read_sentence_config(tmp_path) == SentenceConfig("cls", True, None)
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_max_tokens": true}')
    assert read_sentence_config(tmp_path).pooling is None
    (tmp_path / "modules.json").write_text(json.dumps([
        {"path": "", "type": "sentence_transformers.models.Transformer"},
        {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]))
    with pytest.warns(SentenceModuleWarning, match="Dense"):
        assert read_sentence_config(tmp_path).normalize is False  # modules.json, not the directory, says


def test_declared_settings_fill_in_what_is_not_given(tmp_path):
    assert declared_settings(tmp_path) == SentenceConfig("cls", False, None)
    write_sentence_config(tmp_path, SentenceConfig("mean", True, 64), hidden_size=8)
    assert declared_settings(tmp_path) == SentenceConfig("mean", True, 64)
    assert declared_settings(tmp_path, pooling="cls", normalize=False, max_length=32) == SentenceConfig("cls", False,
                                                                                                        32)


# ---- real models against sentence-transformers ---------------------------------------------------

SENTENCES = ["今天天气很好", "北京是中国的首都，也是一座历史悠久的城市。", "A man is playing a guitar.",
             "The new movie is awesome", "我喜欢看电影", "x"]


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("name", ["all-MiniLM-L6-v2", "m3e-small"])
def test_bertkit_encode_gives_sentence_transformers_vectors(name):
    st = pytest.importorskip("sentence_transformers")
    from bertkit.inference.loading import load_text_model

    path = model_dir_or_skip(name)
    reference = st.SentenceTransformer(str(path), device="cpu")
    model, tokenizer = load_text_model(path, "encode")
    settings = declared_settings(path)
    for normalize in (False, True):
        # sentence-transformers normalises with its Normalize module (all-MiniLM-L6-v2 has one) or when asked
        modules = [module for module in reference if type(module).__name__ != "Normalize"]
        plain = st.SentenceTransformer(modules=modules, device="cpu")
        expected = plain.encode(SENTENCES, convert_to_numpy=True, normalize_embeddings=normalize)
        vectors = encode(model, tokenizer, SENTENCES, pooling=settings.pooling, normalize=normalize,
                         max_length=settings.max_seq_length)
        assert np.abs(vectors - expected).max() <= 1e-5, (name, normalize)
    # as the directory declares it: normalised for all-MiniLM-L6-v2, not for m3e-small
    declared = encode(model, tokenizer, SENTENCES, pooling=settings.pooling, normalize=settings.normalize,
                      max_length=settings.max_seq_length)
    assert np.abs(declared - reference.encode(SENTENCES, convert_to_numpy=True)).max() <= 1e-5
    # the one object, as SentenceTransformer(path).encode: no pooling given, what the directory declares
    from bertkit import SentenceEncoder

    vectors = SentenceEncoder.from_pretrained(path).encode(SENTENCES)
    assert np.abs(vectors - reference.encode(SENTENCES, convert_to_numpy=True)).max() <= 1e-5


def test_the_encode_command_reads_what_the_directory_declares(model, tokenizer, tmp_path, capsys):
    from bertkit.cli import main

    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    write_sentence_config(tmp_path / "m", SentenceConfig("mean", True, 6), hidden_size=64)
    (tmp_path / "in.txt").write_text("a b c d e f g h i j\nx y\n")
    assert main(["encode", "--model", str(tmp_path / "m"), "--input", str(tmp_path / "in.txt"),
                 "--out", str(tmp_path / "v.npy"), "--device", "cpu"]) == 0  # where encode() runs, beside a GPU too
    assert "mean pooling, normalized" in capsys.readouterr().out
    expected = encode(model, tokenizer, ["a b c d e f g h i j", "x y"], pooling="mean", normalize=True,
                      max_length=6)
    assert np.abs(np.load(tmp_path / "v.npy") - expected).max() <= 1e-6
    assert main(["encode", "--model", str(tmp_path / "m"), "--input", str(tmp_path / "in.txt"), "--pooling", "cls",
                 "--no-normalize", "--max-length", "24", "--out", str(tmp_path / "w.npy"), "--device", "cpu"]) == 0
    plain = encode(model, tokenizer, ["a b c d e f g h i j", "x y"], pooling="cls", max_length=24)
    assert np.abs(np.load(tmp_path / "w.npy") - plain).max() <= 1e-6
