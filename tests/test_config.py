"""BertConfig: Hugging Face field names, validation, config.json round trips."""

import json

import pytest
import transformers

from bertkit.models.bert.configuration import BertConfig
from bertkit.models.configuration import ConfigError


def test_reads_what_transformers_writes(tmp_path):
    transformers.BertConfig(vocab_size=123, hidden_size=48, num_attention_heads=6, hidden_act="gelu_new",
                            layer_norm_eps=1e-5).save_pretrained(tmp_path)
    cfg = BertConfig.from_pretrained(tmp_path)
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim) == (123, 48, 6, 8)
    assert cfg.hidden_act == "gelu_new" and cfg.layer_norm_eps == 1e-5


def test_transformers_reads_what_we_write(tmp_path):
    BertConfig(vocab_size=77, hidden_size=20, num_attention_heads=5, intermediate_size=30,
               id2label={0: "neg", 1: "pos"}).save_pretrained(tmp_path)
    hf = transformers.BertConfig.from_pretrained(tmp_path)
    assert (hf.vocab_size, hf.hidden_size, hf.num_attention_heads, hf.intermediate_size) == (77, 20, 5, 30)
    assert hf.id2label == {0: "neg", 1: "pos"} and hf.label2id == {"neg": 0, "pos": 1}


def test_unknown_keys_are_kept_and_warned_about(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 16, "num_attention_heads": 2,
                                                      "my_setting": 3, "model_type": "bert"}))
    with pytest.warns(UserWarning, match="my_setting"):
        cfg = BertConfig.from_pretrained(tmp_path)
    assert cfg.extra["my_setting"] == 3
    cfg.save_pretrained(tmp_path / "out")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["my_setting"] == 3


@pytest.mark.parametrize("changes, message", [
    (dict(hidden_size=30, num_attention_heads=4), "not divisible"),
    (dict(num_hidden_layers=-1), "num_hidden_layers must be a positive integer"),
    (dict(vocab_size=0), "vocab_size must be a positive integer"),
    (dict(hidden_act="swish"), "hidden_act 'swish'"),
    (dict(position_embedding_type="rotary"), "position_embedding_type"),
    (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob"),
    (dict(pad_token_id=99, vocab_size=10), "pad_token_id"),
])
def test_invalid_values_raise_clear_errors(changes, message):
    with pytest.raises(ConfigError, match=message):
        BertConfig(**changes)


def test_bad_json_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        BertConfig.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": "big"}))
    with pytest.raises(ConfigError, match="hidden_size"):
        BertConfig.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="missing does not exist"):
        BertConfig.from_pretrained(tmp_path / "missing")
    (tmp_path / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="no config file"):
        BertConfig.from_pretrained(tmp_path)
