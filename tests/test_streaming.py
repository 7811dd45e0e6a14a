"""Files of any length in bounded memory: lines read a block at a time, encode and predict a chunk of texts at a time,
vectors written to the .npy as they come; the same results as the in-memory path, to the bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.data.readers import NotTextError, iter_decoded_lines
from bertkit.inference import batching, encode, predict
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForSequenceClassification
from bertkit.tokenizer import BertTokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"今天气很好北京是中国的首都上海经济"]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("block", [1, 2, 3, 7, 64, 1 << 20])
def test_lines_read_a_block_at_a_time_are_the_lines(tmp_path, block):
    path = tmp_path / "x.txt"
    path.write_bytes("".join(f"行{i}\r\n" if i % 3 else f"line {i}\n" for i in range(5000)).encode())
    lines = list(iter_decoded_lines(path, block_bytes=block))
    assert len(lines) == 5000 and lines[1] == (2, "行1") and lines[-1] == (5000, "行4999")
    for data, want in ((b"a\nb", [(1, "a"), (2, "b")]), (b"a\n\n", [(1, "a"), (2, "")]), (b"", []),
                       (b"\xef\xbb\xbfhi\n", [(1, "hi")]), (b"ok\n\xff\xfe\nok\n", [(1, "ok"), (2, None), (3, "ok")])):
        path.write_bytes(data)
        assert list(iter_decoded_lines(path, block_bytes=block)) == want


def test_a_file_that_turns_out_not_to_be_text_is_named_early(tmp_path):
    path = tmp_path / "gbk.txt"
    path.write_bytes("北京欢迎你\n".encode("gbk") * 5000)
    lines = iter_decoded_lines(path)
    with pytest.raises(NotTextError, match="1,000 of 1,000 lines do not decode"):
        for _ in lines:  # stopped after the first thousand lines, not at the end of the file
            pass


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("model")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=24, id2label={0: "a", 1: "b"})
    BertForSequenceClassification(config).save_pretrained(path)
    BertTokenizer({t: i for i, t in enumerate(VOCAB)}).save_pretrained(path)
    return path


def _texts(n: int) -> list[str]:
    rng = np.random.default_rng(0)
    chars = VOCAB[5:]
    return ["".join(rng.choice(chars, size=int(rng.integers(1, 30)))) for _ in range(n)]


def test_encode_and_predict_run_chunk_by_chunk_with_the_same_results(model_dir, monkeypatch):
    model = BertForSequenceClassification.from_pretrained(model_dir)
    tokenizer = BertTokenizer.from_pretrained(model_dir)
    texts = _texts(50)
    whole = encode(model, tokenizer, texts)
    monkeypatch.setattr(batching, "CHUNK_TEXTS", 7)
    chunked = encode(model, tokenizer, texts)
    np.testing.assert_array_equal(chunked[:7], encode(model, tokenizer, texts[:7]))   # one chunk: encoded alone
    np.testing.assert_allclose(chunked, whole, atol=1e-5, rtol=0)                    # other batches, same vectors
    assert [p["label"] for p in predict(model, tokenizer, texts)] == [p["label"] for p in
                                                                       predict(model, tokenizer, texts[:25])
                                                                       + predict(model, tokenizer, texts[25:])]


def test_a_long_input_file_is_encoded_as_a_stream_into_the_npy(model_dir, tmp_path, monkeypatch, capsys):
    texts = _texts(40)
    lines = texts[:10] + ["", "  "] + texts[10:]           # blank lines are skipped (and said), rows stay in order
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setattr(batching, "CHUNK_TEXTS", 6)        # seven chunks
    assert main(["encode", "--model", str(model_dir), "--input", str(tmp_path / "in.txt"), "--out",
                 str(tmp_path / "v.npy"), "--device", "cpu"]) == 0  # where encode() below runs, beside a GPU too
    out, err = capsys.readouterr()
    assert "wrote" in out and "40 vectors of 32" in out and "skipped 2 lines, kept 40" in err
    model = BertForSequenceClassification.from_pretrained(model_dir)
    streamed = np.load(tmp_path / "v.npy")
    np.testing.assert_array_equal(streamed, encode(model, BertTokenizer.from_pretrained(model_dir), texts))
    assert main(["predict", "--model", str(model_dir), "--input", str(tmp_path / "in.txt"), "--json"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.split('"text": "')[1].split('"')[0] for line in printed] == texts
