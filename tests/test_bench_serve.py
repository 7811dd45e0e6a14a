"""benchmarks/bench_serve.py's naive server does the work `bertkit serve` does, on tiny saved models: its /rerank
scores are bertkit's probabilities of the positive label, and its long texts, read in the windows transformers'
tokenizer makes, get `encode --long-inputs chunk`'s vectors; and the cross-encoder's training pairs are what the
docstring says."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.inference import encode
from bertkit.inference.serving import ServedModel
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForSequenceClassification
from bertkit.models.bert.modeling import BertModel
from bertkit.tokenizer import BertTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "a", "dog", "good", "bad"]
TINY = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=16, initializer_range=0.3)
TEXTS = ["the cat sat on the mat", "good", "a bad dog", "the dog sat on a mat"]
LONG = " ".join(["the cat sat on the mat", "a good dog sat", "a bad cat"] * 4)  # 52 tokens, 16 positions


def load_bench():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_serve.py"
    spec = importlib.util.spec_from_file_location("bench_serve", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_serve"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = load_bench()


def save(model, path: Path) -> Path:
    model.save_pretrained(path)
    BertTokenizer({token: i for i, token in enumerate(VOCAB)}).save_pretrained(path)
    return path


def test_the_cross_encoders_pairs_are_each_title_with_its_own_body_and_the_next_articles():
    rows = bench.rerank_pairs([("t0", "body\tzero\n"), (" t 1 ", "b" * 400), ("t2", "two")])
    assert rows == [("t0", "body zero", 1), ("t0", "b" * 300, 0), ("t 1", "b" * 300, 1), ("t 1", "two", 0),
                    ("t2", "two", 1), ("t2", "body zero", 0)]


def test_the_naive_reranker_scores_as_bertkit_serve_does(tmp_path):
    torch.manual_seed(0)
    config = BertConfig(**TINY, id2label={0: "0", 1: "1"}, text_pairs=True, extra={"finetuning_task": "pairs"})
    directory = save(BertForSequenceClassification(config), tmp_path)
    served = ServedModel.load(directory, "fp32")
    query = "the cat"
    probabilities = np.stack(served.run(served.rows([query] * len(TEXTS), TEXTS)))
    want = probabilities[:, served.rerank_label]
    ranks = bench.naive_reranker(str(directory))(query, TEXTS)
    assert [rank["index"] for rank in ranks] == list(np.argsort(-want, kind="stable"))
    np.testing.assert_allclose([rank["score"] for rank in sorted(ranks, key=lambda r: r["index"])], want, atol=1e-5,
                               rtol=0)
    assert len(set(np.round(want, 4))) == len(TEXTS)  # distinct scores: the order means something


def test_the_naive_embedder_reads_long_texts_in_bertkits_windows(tmp_path):
    torch.manual_seed(0)
    model = BertModel(BertConfig(**TINY)).eval()
    directory = save(model, tmp_path)
    tokenizer = BertTokenizer.from_pretrained(directory)
    texts = [TEXTS[0], LONG, TEXTS[2]]
    want = encode(model, tokenizer, texts, pooling="mean", normalize=True, long_inputs="chunk", chunk_stride=4)
    got = np.asarray(bench.naive_embedder(str(directory), "mean", "chunk", overlap=4)(texts))
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    # cut at the model's positions instead, the long text's vector is its first window's, not the pooled one
    cut = np.asarray(bench.naive_embedder(str(directory), "mean", "truncate")(texts))
    np.testing.assert_allclose(cut[[0, 2]], want[[0, 2]], atol=1e-5, rtol=0)
    assert np.abs(cut[1] - want[1]).max() > 1e-3
