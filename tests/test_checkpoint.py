"""Loading is strict and its errors name the problem; the key quirks are ironed out in one place."""

import json

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from bertkit.cli import main
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.modeling import BertModel
from bertkit.models.checkpoint import CheckpointError, normalize_keys, save_weights
from bertkit.models.reference import NumpyBert
from tolerance import assert_close

TINY = dict(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24,
            max_position_embeddings=32)


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = BertModel(BertConfig(**TINY)).eval()
    model.save_pretrained(tmp_path / "m")
    return model, tmp_path / "m"


def test_truncated_safetensors_names_the_file(saved):
    _, path = saved
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    for load in (BertModel.from_pretrained, NumpyBert.from_pretrained):
        with pytest.raises(CheckpointError, match=r"model\.safetensors.*truncated or corrupt"):
            load(path)


def test_corrupt_bin_names_the_file(saved):
    model, path = saved
    (path / "model.safetensors").unlink()
    torch.save(model.state_dict(), path / "pytorch_model.bin")
    assert BertModel.from_pretrained(path)  # the intact file loads
    (path / "pytorch_model.bin").write_bytes(b"PK\x03\x04 this is not a checkpoint")
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin"):
        BertModel.from_pretrained(path)


def test_missing_weights_file(saved):
    _, path = saved
    (path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="neither model.safetensors nor pytorch_model.bin"):
        BertModel.from_pretrained(path)


def test_shape_mismatch_lists_each_tensor(saved):
    _, path = saved
    state = load_file(path / "model.safetensors")
    state["pooler.dense.weight"] = torch.zeros(16, 15)
    state["encoder.layer.1.output.dense.bias"] = torch.zeros(17)
    save_file(state, path / "model.safetensors")
    with pytest.raises(CheckpointError) as err:
        BertModel.from_pretrained(path)
    text = str(err.value)
    assert "2 mis-shaped" in text
    assert "pooler.dense.weight: " in text and "(16, 15), model (16, 16)" in text
    assert "encoder.layer.1.output.dense.bias" in text


def test_config_that_does_not_match_the_weights(saved):
    _, path = saved
    cfg = json.loads((path / "config.json").read_text())
    cfg["num_hidden_layers"] = 3
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"16 missing, 0 unexpected.*config\.json") as err:
        BertModel.from_pretrained(path)
    assert "missing:    encoder.layer.2.attention.self.query.weight" in str(err.value)
    cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"] = 1, 32, 2
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="unexpected: encoder.layer.1"):
        BertModel.from_pretrained(path)


def test_unexpected_tensor_is_an_error(saved):
    _, path = saved
    state = load_file(path / "model.safetensors")
    state["encoder.extra.weight"] = torch.zeros(2)
    save_file(state, path / "model.safetensors")
    with pytest.raises(CheckpointError, match="unexpected: encoder.extra.weight"):
        BertModel.from_pretrained(path)


def test_legacy_gamma_beta_and_position_ids(saved):
    model, path = saved
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in model.state_dict().items()}
    state["embeddings.position_ids"] = torch.arange(32)[None]
    save_file(state, path / "model.safetensors")
    loaded = BertModel.from_pretrained(path)
    ids = torch.randint(0, 60, (2, 5))
    with torch.no_grad():
        assert_close(loaded(ids).last_hidden_state, model(ids).last_hidden_state)
    assert set(normalize_keys({"a.LayerNorm.gamma": 1, "embeddings.position_ids": 2})) == {"a.LayerNorm.weight"}


def test_task_checkpoint_loads_into_the_bare_encoder(tmp_path):
    torch.manual_seed(0)
    cfg = transformers.BertConfig(**TINY)
    hf = transformers.BertForPreTraining(cfg).eval()
    hf.save_pretrained(tmp_path)
    ours = BertModel.from_pretrained(tmp_path)
    assert any(k.startswith("cls.") for k in ours.loaded_but_unused)
    ids = torch.randint(1, 60, (2, 6))
    with torch.no_grad():
        # the parity bound (1e-5): bertkit pads attention keys to whole blocks at inference, a few ulps apart
        assert_close(ours(ids).last_hidden_state, hf.bert(ids).last_hidden_state, rtol=1e-5)
    seq, _ = NumpyBert.from_pretrained(tmp_path)(ids.numpy())
    assert_close(seq, hf.bert(ids).last_hidden_state)


def test_save_writes_each_tied_tensor_once(tmp_path):
    w = torch.randn(4, 3)
    save_weights({"bert.embeddings.word_embeddings.weight": w, "cls.predictions.decoder.weight": w}, tmp_path / "x")
    assert list(load_file(tmp_path / "x")) == ["bert.embeddings.word_embeddings.weight"]


def test_cli_info(saved, capsys):
    _, path = saved
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    n = BertModel(BertConfig(**TINY)).num_parameters()
    assert f"parameters {n:,}" in out and "safetensors" in out and "layers            2" in out
    assert main(["info", str(path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
