"""Long texts read whole (bertkit.inference.long_inputs): windows that cover every token with the overlap asked for,
a text that fits one window pooled to exactly its own vector, a text of several windows pooled as a direct
computation pools it, and `bertkit encode --long-inputs chunk` giving those vectors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertkit.cli import main
from bertkit.inference import EncodedText, encode
from bertkit.inference.long_inputs import (
    check_overlap,
    default_overlap,
    pool_windows,
    split_row,
    split_rows,
    window_spans,
)
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.modeling import BertModel
from bertkit.tokenizer import BertTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "a", "dog", "good", "bad"]
SHORT = ["the cat sat on the mat", "good", "a bad dog"]
LONG = " ".join(["the cat sat on the mat", "a good dog sat", "a bad cat"] * 4)  # 52 tokens, 16 positions


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=48, max_position_embeddings=16, initializer_range=0.3)).eval()
    tokenizer = BertTokenizer({token: i for i, token in enumerate(VOCAB)})
    path = tmp_path_factory.mktemp("encoder")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return model, tokenizer, path


def test_windows_cover_every_token_with_the_overlap_asked_for():
    assert window_spans(40, size=14, overlap=4) == [(0, 14), (10, 24), (20, 34), (30, 40)]
    assert window_spans(14, size=14, overlap=4) == [(0, 14)]
    assert window_spans(15, size=14, overlap=0) == [(0, 14), (14, 15)]
    assert window_spans(0, size=14, overlap=3) == [(0, 0)]
    for length in range(1, 60):
        spans = window_spans(length, size=7, overlap=2)
        covered = [k for start, stop in spans for k in range(start, stop)]
        assert set(covered) == set(range(length)) and spans[-1][1] == length
        assert all(b[0] - a[0] == 5 for a, b in zip(spans, spans[1:]))  # each moves on by size - overlap
    assert default_overlap(512) == 127 and check_overlap(None, 16) == 3 and check_overlap(13, 16) == 13
    for bad in (14, -1, 2.5, True):
        with pytest.raises(ValueError, match="chunk_stride must be a whole number from 0 to 13"):
            check_overlap(bad, 16)


def test_a_row_is_split_into_windows_each_in_cls_and_sep():
    row = EncodedText([2, *range(100, 130), 3], [0] * 32)
    windows = split_row(row, max_length=16, overlap=4)
    assert [w.input_ids[1:-1] for w in windows] == [list(range(100 + a, 100 + b))
                                                   for a, b in window_spans(30, 14, 4)]
    assert all(w.input_ids[0] == 2 and w.input_ids[-1] == 3 and len(w.input_ids) <= 16 for w in windows)
    assert all(w.token_type_ids == [0] * len(w.input_ids) for w in windows)
    short = EncodedText([2, 7, 8, 3], [0] * 4)
    assert split_row(short, 16, 4) == [short] and split_row(short, 16, 4)[0] is short
    windows, counts = split_rows([short, row, short], 16, 4)
    assert counts == [1, 3, 1] and len(windows) == 5


def test_pooling_one_window_is_its_vector_and_several_their_weighted_mean():
    rng = np.random.default_rng(0)
    one = rng.standard_normal(32).astype(np.float32)
    assert pool_windows([one], [7]) is one and pool_windows([one], [7], "first") is one
    vectors = [rng.standard_normal(32).astype(np.float32) for _ in range(3)]
    pooled = pool_windows(vectors, [14, 14, 3])
    assert pooled.dtype == np.float32
    np.testing.assert_allclose(pooled, (14 * vectors[0] + 14 * vectors[1] + 3 * vectors[2]) / 31, rtol=1e-6)
    assert pool_windows(vectors, [14, 14, 3], "first") is vectors[0]
    with pytest.raises(ValueError, match="chunk pooling must be one of"):
        pool_windows(vectors, [1, 1, 1], "max")


def direct_chunked(model, tokenizer, text: str, overlap: int, pooling: str = "cls") -> np.ndarray:
    """A long text's vector computed by hand: each window alone through the model, weighted by its tokens."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    vectors, weights = [], []
    for start, stop in window_spans(len(ids), 14, overlap):
        window = torch.tensor([[tokenizer.cls_token_id, *ids[start:stop], tokenizer.sep_token_id]])
        with torch.no_grad():
            hidden = model(window).last_hidden_state[0]
        vectors.append((hidden[0] if pooling == "cls" else hidden.mean(0)).double())
        weights.append(stop - start)
    return (sum(w * v for w, v in zip(weights, vectors)) / sum(weights)).float().numpy()


def test_encode_chunks_a_long_text_and_leaves_texts_that_fit_exactly_as_they_were(encoder):
    model, tokenizer, _ = encoder
    assert len(tokenizer(LONG)["input_ids"]) == 54
    for normalize in (False, True):
        plain = encode(model, tokenizer, SHORT, normalize=normalize, pooling="mean")
        chunked = encode(model, tokenizer, SHORT, normalize=normalize, pooling="mean", long_inputs="chunk")
        assert np.array_equal(plain, chunked)  # bit for bit: texts that fit take the same path
    vectors = encode(model, tokenizer, [SHORT[0], LONG], long_inputs="chunk", chunk_stride=4)
    # batched beside the long text's windows, so padded otherwise: equal within float error
    np.testing.assert_allclose(vectors[0], encode(model, tokenizer, SHORT[:1])[0], atol=1e-5, rtol=0)
    np.testing.assert_allclose(vectors[1], direct_chunked(model, tokenizer, LONG, 4), atol=1e-5, rtol=0)
    unit = encode(model, tokenizer, [LONG], long_inputs="chunk", chunk_stride=4, normalize=True)[0]
    np.testing.assert_allclose(unit, F.normalize(torch.from_numpy(vectors[1]), dim=0).numpy(), atol=1e-6)
    first = encode(model, tokenizer, [LONG], long_inputs="chunk", chunk_pooling="first")[0]
    with pytest.warns(UserWarning, match="truncated"):  # the first window is the text cut to fit
        np.testing.assert_allclose(first, encode(model, tokenizer, [LONG])[0], atol=1e-6)
    with pytest.raises(ValueError, match="long_inputs must be"):
        encode(model, tokenizer, SHORT, long_inputs="split")


def test_encode_command_line_chunks_long_texts(encoder, tmp_path, capsys):
    model, tokenizer, path = encoder
    out = tmp_path / "vectors.npy"
    assert main(["encode", "--model", str(path), "--long-inputs", "chunk", "--chunk-stride", "5", "--pooling", "mean",
                 "--out", str(out), SHORT[1], LONG]) == 0
    vectors = np.load(out)
    np.testing.assert_allclose(vectors[0], encode(model, tokenizer, SHORT[1:2], pooling="mean")[0], atol=1e-5, rtol=0)
    np.testing.assert_allclose(vectors[1], direct_chunked(model, tokenizer, LONG, 5, "mean"), atol=1e-5, rtol=0)
    capsys.readouterr()
    for argv, words in ((["--long-inputs", "chunk", "--no-truncation"], "--no-truncation refuses long texts"),
                        (["--chunk-stride", "3"], "are for --long-inputs chunk"),
                        (["--long-inputs", "chunk", "--chunk-stride", "14"],
                         "--chunk-stride must be a whole number from 0 to 13")):
        assert main(["encode", "--model", str(path), *argv, "good"]) == 2
        assert words in capsys.readouterr().err
