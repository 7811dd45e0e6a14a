"""ONNX export: the graph onnxruntime runs gives bertkit's outputs within 1e-4 at batch sizes and lengths other
than the traced ones, with and without padding; classifiers export their logits; a ModernBERT's graph takes no
token_type_ids; `bertkit export` writes a directory that loads again, refuses to overwrite, and refuses models it
cannot export."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("onnxscript", reason="the onnx extra is not installed (pip install 'bertkit[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed (pip install 'bertkit[onnx]')")

from bertkit.cli import main  # noqa: E402
from bertkit.inference.export import ONNX_INT8_NAME, ONNX_NAME, ExportError, export_onnx  # noqa: E402
from bertkit.inference.loading import load_text_model as load_model  # noqa: E402
from bertkit.models.bert.configuration import BertConfig  # noqa: E402
from bertkit.models.bert.heads import BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification  # noqa: E402
from bertkit.models.bert.modeling import BertModel  # noqa: E402
from bertkit.models.modernbert.configuration import ModernBertConfig  # noqa: E402
from bertkit.models.modernbert.modeling import (  # noqa: E402
    ModernBertForMaskedLM,
    ModernBertForSequenceClassification,
    ModernBertForTokenClassification,
    ModernBertModel,
)
from bertkit.tokenizer import BertTokenizer  # noqa: E402
from conftest import model_dir_or_skip  # noqa: E402
from tolerance import assert_close  # noqa: E402
from weights import randomise  # noqa: E402

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnop"]
TINY = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=40, type_vocab_size=2)
SHAPES = [(1, 1), (1, 9), (3, 5), (4, 17), (2, 40)]  # traced at (2, 8): other batches, lengths, the longest


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer({token: i for i, token in enumerate(VOCAB)}, backend="python")


def inputs(batch: int, length: int, seed: int, padded: bool) -> dict[str, np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, len(VOCAB), (batch, length), generator=g)
    mask = torch.ones_like(ids)
    if padded and length > 2:
        lengths = torch.randint(2, length + 1, (batch,), generator=g)
        lengths[0] = length - 1  # at least one padded row
        mask = (torch.arange(length) < lengths[:, None]).long()
        ids = ids.masked_fill(mask == 0, 0)
    types = torch.zeros_like(ids)
    types[:, length // 2:] = 1
    return {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": types.numpy()}


def expected(model, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    with torch.no_grad():
        out = model(*(torch.from_numpy(feed[name]) for name in ("input_ids", "attention_mask", "token_type_ids")))
    if hasattr(out, "logits"):
        return [out.logits.numpy()]
    return [t.numpy() for t in (out.last_hidden_state, out.pooler_output) if t is not None]


def check_parity(model, path, rtol: float = 1e-4) -> None:
    """The graph's outputs against the model's, the graph fed the inputs it declares (a ModernBERT's has no
    token_type_ids; the model is given them and reads none)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    declared = [i.name for i in session.get_inputs()]
    for n, (batch, length) in enumerate(SHAPES):
        for padded in (False, True):
            feed = inputs(batch, length, seed=n, padded=padded)
            got = session.run(None, {name: feed[name] for name in declared})
            want = expected(model, feed)
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert g.shape == w.shape and g.dtype == np.float32
                assert_close(g, w, rtol=rtol, msg=f"{batch}x{length} padded={padded}")


@pytest.fixture(scope="module")
def encoder_export(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    model = BertModel(BertConfig(**TINY, initializer_range=0.2)).eval()
    out = tmp_path_factory.mktemp("onnx") / "encoder"
    return model, out, export_onnx(model, tokenizer, out, int8=True)


def test_encoder_graph_matches_bertkit_at_dynamic_shapes(encoder_export):
    model, out, info = encoder_export
    assert info["kind"] == "encoder" and info["outputs"] == ["last_hidden_state", "pooler_output"]
    session = ort.InferenceSession(str(out / ONNX_NAME), providers=["CPUExecutionProvider"])
    assert [(i.name, i.shape, i.type) for i in session.get_inputs()] == [
        (name, ["batch", "sequence"], "tensor(int64)") for name in ("input_ids", "attention_mask", "token_type_ids")]
    check_parity(model, out / ONNX_NAME)
    # padding changes nothing for the real tokens: the mask is in the graph, not traced away
    feed = inputs(2, 12, seed=9, padded=True)
    hidden = session.run(None, feed)[0]
    alone = session.run(None, {k: v[:1, :feed["attention_mask"][0].sum()] for k, v in feed.items()})[0]
    assert_close(hidden[0, :alone.shape[1]], alone[0])


def test_directory_holds_config_tokenizer_and_int8_graph(encoder_export, tokenizer):
    model, out, info = encoder_export
    assert {ONNX_NAME, ONNX_INT8_NAME, "config.json", "vocab.txt"} <= set(info["files"])
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertModel"]
    assert BertTokenizer.from_pretrained(out).encode("abc") == tokenizer.encode("abc")
    feed = inputs(3, 11, seed=4, padded=True)
    int8 = ort.InferenceSession(str(out / ONNX_INT8_NAME), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    fp32 = expected(model, feed)[0]
    cosine = (int8 * fp32).sum(-1) / (np.linalg.norm(int8, axis=-1) * np.linalg.norm(fp32, axis=-1))
    assert cosine.min() > 0.98 and np.abs(int8 - fp32).max() > 1e-4  # quantized: close, not equal


@pytest.mark.parametrize("cls", [BertForSequenceClassification, BertForTokenClassification])
def test_classifier_graphs_give_bertkit_logits(cls, tmp_path, tokenizer):
    torch.manual_seed(1)
    model = cls(BertConfig(**TINY, id2label={0: "O", 1: "B-X", 2: "I-X"})).eval()
    info = export_onnx(model, tokenizer, tmp_path / "out")
    assert info["kind"] == "classifier" and info["outputs"] == ["logits"]
    check_parity(model, tmp_path / "out" / ONNX_NAME)
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == [cls.__name__]


def test_export_command_writes_refuses_overwrite_and_other_models(tmp_path, tokenizer, capsys):
    torch.manual_seed(2)
    model = BertForMaskedLM(BertConfig(**TINY)).eval()  # a pretraining checkpoint: its encoder is exported
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    assert main(["export", "--model", str(tmp_path / "m"), "--onnx", str(tmp_path / "x")]) == 0
    out = capsys.readouterr().out
    assert "wrote" in out and "encoder: inputs input_ids, attention_mask, token_type_ids" in out
    assert "outputs last_hidden_state (float32)" in out  # no pooler in a masked-LM model
    check_parity(model.bert, tmp_path / "x" / ONNX_NAME)
    assert main(["export", "--model", str(tmp_path / "m"), "--onnx", str(tmp_path / "x")]) == 2
    assert f"--onnx {tmp_path / 'x'} already holds a bertkit run or model" in capsys.readouterr().err
    (tmp_path / "x" / "notes.txt").write_text("mine")
    assert main(["export", "--model", str(tmp_path / "m"), "--onnx", str(tmp_path / "x"), "--overwrite"]) == 0
    assert (tmp_path / "x" / "notes.txt").read_text() == "mine"  # replaced what bertkit wrote, and nothing else
    check_parity(model.bert, tmp_path / "x" / ONNX_NAME)
    assert main(["export", "--model", str(tmp_path / "m"), "--onnx", str(tmp_path / "m")]) == 2
    assert "is the model being exported" in capsys.readouterr().err
    assert (tmp_path / "m" / "config.json").is_file()
    with pytest.raises(ExportError, match="export the float32 model"):
        export_onnx(model.bert.to(torch.bfloat16), tokenizer, tmp_path / "y")
    assert not (tmp_path / "y").exists()


MODERN = dict(vocab_size=len(VOCAB), hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
              max_position_embeddings=40, pad_token_id=0, local_attention=8,
              layer_types=["full_attention", "sliding_attention", "sliding_attention"])


@pytest.mark.parametrize("cls, labels", [(ModernBertModel, None), (ModernBertForSequenceClassification, 3),
                                         (ModernBertForTokenClassification, 3)])
def test_modernbert_graphs_take_no_segments_and_give_bertkit_outputs(cls, labels, tmp_path, tokenizer):
    """A ModernBERT (local and global layers, inputs up to 40 tokens against a window of 9) exports with
    input_ids and attention_mask alone: it has no segments. Its graph gives bertkit's outputs within 1e-4 at
    other batches and lengths than the traced ones, padded or not."""
    torch.manual_seed(3)
    config = ModernBertConfig(**MODERN, id2label={i: f"L{i}" for i in range(labels)} if labels else None)
    model = randomise(cls(config))
    info = export_onnx(model, tokenizer, tmp_path / "out")
    assert info["inputs"] == ["input_ids", "attention_mask"]
    assert info["kind"] == ("encoder" if labels is None else "classifier")
    assert info["outputs"] == (["last_hidden_state"] if labels is None else ["logits"])
    session = ort.InferenceSession(str(tmp_path / "out" / ONNX_NAME), providers=["CPUExecutionProvider"])
    assert [(i.name, i.shape) for i in session.get_inputs()] == [("input_ids", ["batch", "sequence"]),
                                                                  ("attention_mask", ["batch", "sequence"])]
    check_parity(model, tmp_path / "out" / ONNX_NAME)
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == [cls.__name__]


def test_export_command_takes_a_modernbert_directory(tmp_path, tokenizer, capsys):
    """`bertkit export` on a ModernBERT masked-LM directory writes its encoder's graph, without token_type_ids."""
    torch.manual_seed(4)
    model = randomise(ModernBertForMaskedLM(ModernBertConfig(**MODERN)))
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    capsys.readouterr()
    assert main(["export", "--model", str(tmp_path / "m"), "--onnx", str(tmp_path / "x")]) == 0
    assert "encoder: inputs input_ids, attention_mask (int64, batch x sequence); outputs last_hidden_state" in \
        capsys.readouterr().out
    check_parity(model.model, tmp_path / "x" / ONNX_NAME)
    assert json.loads((tmp_path / "x" / "config.json").read_text())["architectures"] == ["ModernBertModel"]


@pytest.mark.network
@pytest.mark.slow  # exports a real model (~20 s)
def test_m3e_small_graph_matches_bertkit(tmp_path):
    model, tokenizer = load_model(model_dir_or_skip("m3e-small"))
    export_onnx(model, tokenizer, tmp_path / "onnx")
    session = ort.InferenceSession(str(tmp_path / "onnx" / ONNX_NAME), providers=["CPUExecutionProvider"])
    feed = {k: v.numpy() for k, v in tokenizer(["今天天气很好", "明天会下雨，记得带伞。", "好"], padding=True,
                                                 return_tensors="pt").items()}
    for got, want in zip(session.run(None, feed), expected(model, feed)):
        assert_close(got, want, rtol=1e-4)
