"""`bertkit serve` on a ModernBERT directory that transformers wrote, over HTTP: /embed answers with transformers'
vectors (mean pooling, as the directory's sentence-transformers file declares it, and [CLS] when asked)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from serve_helpers import ServerProcess

transformers = pytest.importorskip("transformers")
pytest.importorskip("starlette")

TEXTS = ["今天天气很好", "明天会下雨，我们去公园", "好"]


@pytest.fixture(scope="module")
def modern_dir(tmp_path_factory):
    """A random transformers ModernBertModel (a global layer and two local ones over 4 tokens, texts longer than
    that), with a WordPiece vocabulary and sentence-transformers' pooling file saying mean."""
    from bertkit.tokenizer import BertTokenizer

    path = tmp_path_factory.mktemp("modern")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"今天天气很好明天会下雨我们去公园，"]
    (path / "vocab.txt").write_text("\n".join(dict.fromkeys(words)) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(str(path / "vocab.txt"))
    config = transformers.ModernBertConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=48,
                                           num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=64,
                                           pad_token_id=0, local_attention=4, global_attn_every_n_layers=3)
    torch.manual_seed(0)
    model = transformers.ModernBertModel(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True}))
    encoded = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"]).last_hidden_state
    weights = encoded["attention_mask"].unsqueeze(-1).float()
    return path, ((hidden * weights).sum(1) / weights.sum(1)).numpy(), hidden[:, 0].numpy()


def test_serve_answers_with_transformers_vectors(modern_dir):
    path, mean, cls = modern_dir
    with ServerProcess(path) as server:
        status, vectors = server.post("/embed", {"inputs": TEXTS, "normalize": False})
        assert status == 200
        np.testing.assert_allclose(vectors, mean, atol=1e-5, rtol=0)
        status, unit = server.post("/embed", {"inputs": TEXTS})  # normalised by default, as TEI's
        assert status == 200
        np.testing.assert_allclose(unit, mean / np.linalg.norm(mean, axis=1, keepdims=True), atol=1e-5, rtol=0)
    with ServerProcess(path, "--pooling", "cls") as server:
        status, vectors = server.post("/embed", {"inputs": TEXTS, "normalize": False})
        assert status == 200
        np.testing.assert_allclose(vectors, cls, atol=1e-5, rtol=0)


def test_serve_reads_a_modernbert_with_its_bpe_tokenizer(tmp_path):
    """A ModernBERT directory with its byte-level BPE tokenizer.json: /embed gives transformers' vectors (its own
    tokenizer making the ids), and /tokenize each token's id, text and span in the original text as transformers'
    offsets give them."""
    import warnings

    from test_bpe_tokenizer import modernbert_dir, train_tokenizer

    train_tokenizer(tmp_path / "tokenizer")
    theirs, directory = modernbert_dir(tmp_path / "tokenizer", tmp_path / "model")
    texts = ["The capital of France is [MASK].", "今天天气很好，我们去公园散步。", "emoji 😀 and  two   spaces"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = transformers.AutoTokenizer.from_pretrained(directory)
    encoded = reference(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = theirs(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"]).last_hidden_state
    cls = hidden[:, 0].numpy()
    with ServerProcess(directory) as server:
        status, vectors = server.post("/embed", {"inputs": texts, "normalize": False})
        assert status == 200
        np.testing.assert_allclose(vectors, cls, atol=1e-5, rtol=0)  # no pooling file: [CLS], as encode
        status, tokens = server.post("/tokenize", {"inputs": texts[2]})
        assert status == 200
    expected = reference(texts[2], return_offsets_mapping=True)
    assert [t["id"] for t in tokens[0]] == expected["input_ids"]
    spans = [(t["start"], t["stop"]) for t in tokens[0] if not t["special"]]
    assert spans == [tuple(span) for span, token in zip(expected["offset_mapping"], expected["input_ids"])
                     if token not in reference.all_special_ids]
