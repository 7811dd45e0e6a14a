"""ViT against transformers: directories load both ways, hidden states, pooled vectors, logits and attention
probabilities agree within 1e-5 (fp32; relative to the reference's magnitude where it exceeds 1, see
tests/tolerance.py) on random configs of several image and patch sizes."""

import json

import pytest
import torch
import transformers

from bertkit.models.vit.configuration import ViTConfig
from bertkit.models.vit.modeling import ViTForImageClassification, ViTModel
from tolerance import assert_close
from weights import randomise

CONFIGS = {
    "mnist-p7": dict(image_size=28, patch_size=7, num_channels=1, hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=37),
    "mnist-p4-relu": dict(image_size=28, patch_size=4, num_channels=1, hidden_size=24, num_hidden_layers=3,
                          num_attention_heads=3, intermediate_size=48, hidden_act="relu", layer_norm_eps=1e-6),
    "rgb-32-p8-no-qkv-bias": dict(image_size=32, patch_size=8, num_channels=3, hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=20, qkv_bias=False),
    "rgb-rect-24x40-p8x4": dict(image_size=[24, 40], patch_size=[8, 4], num_channels=3, hidden_size=20,
                                num_hidden_layers=2, num_attention_heads=5, intermediate_size=30,
                                hidden_act="gelu_new", pooler_output_size=12, pooler_act="relu"),
}
LABELS = {0: "zero", 1: "one", 2: "two", 3: "three"}


def _pixels(config: ViTConfig, batch: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randn(batch, config.num_channels, *config.image_hw, generator=g)


def _hf_config(config: ViTConfig) -> transformers.ViTConfig:
    hf = transformers.ViTConfig(**{k: v for k, v in config.to_dict().items() if k not in ("model_type", "label2id")})
    hf._attn_implementation = "eager"  # the implementation that returns attention probabilities
    return hf


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a - b).abs().max())


def _assert_agree(ours, theirs, config: ViTConfig, classifier: bool) -> None:
    pixels = _pixels(config)
    for attentions in (False, True):
        with torch.no_grad():
            a = ours(pixels, output_attentions=attentions, output_hidden_states=True)
            b = theirs(pixels, output_attentions=attentions, output_hidden_states=True)
        if classifier:
            assert_close(a.logits, b.logits, msg="logits")
        else:
            assert_close(a.last_hidden_state, b.last_hidden_state, msg="last_hidden_state")
            if b.pooler_output is None:
                assert a.pooler_output is None
            else:
                assert_close(a.pooler_output, b.pooler_output, msg="pooler_output")
        assert len(a.hidden_states) == len(b.hidden_states) == config.num_hidden_layers + 1
        for i, (x, y) in enumerate(zip(a.hidden_states, b.hidden_states)):
            assert_close(x, y, msg=f"hidden_states[{i}]")
        if attentions:
            T = config.num_patches + 1
            assert len(a.attentions) == len(b.attentions) == config.num_hidden_layers
            for x, y in zip(a.attentions, b.attentions):
                assert x.shape == (3, config.num_attention_heads, T, T)
                assert _max_diff(x, y) <= 1e-5  # probabilities: magnitude at most 1, so an absolute bound
        else:
            assert a.attentions is None


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("pooler", [True, False], ids=["pooler", "no-pooler"])
def test_vit_model_loads_both_ways(name, pooler, tmp_path):
    config = ViTConfig(**CONFIGS[name])
    theirs = randomise(transformers.ViTModel(_hf_config(config), add_pooling_layer=pooler), seed=3)
    theirs.save_pretrained(tmp_path / "theirs")
    # a pooler-less directory is read whole by a pooler-less model
    ours = ViTModel(ViTConfig.from_pretrained(tmp_path / "theirs"), add_pooling_layer=pooler)
    assert ours.load_weights(tmp_path / "theirs", allow_fresh_head=False) == []
    ours.eval()
    _assert_agree(ours, theirs, config, classifier=False)

    randomise(ours, seed=4).save_pretrained(tmp_path / "ours")
    back = transformers.ViTModel.from_pretrained(tmp_path / "ours", add_pooling_layer=pooler,
                                                 attn_implementation="eager").eval()
    _assert_agree(ours, back, config, classifier=False)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_vit_classifier_loads_both_ways(name, tmp_path):
    config = ViTConfig(**CONFIGS[name], id2label=LABELS)
    theirs = randomise(transformers.ViTForImageClassification(_hf_config(config)), seed=5)
    theirs.save_pretrained(tmp_path / "theirs")
    ours = ViTForImageClassification.from_pretrained(tmp_path / "theirs")
    assert ours.config.id2label == LABELS
    _assert_agree(ours, theirs, config, classifier=True)

    randomise(ours, seed=6).save_pretrained(tmp_path / "ours")
    saved = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert saved["model_type"] == "vit" and saved["architectures"] == ["ViTForImageClassification"]
    back = transformers.AutoModelForImageClassification.from_pretrained(tmp_path / "ours",
                                                                        attn_implementation="eager").eval()
    assert type(back).__name__ == "ViTForImageClassification" and back.config.id2label == LABELS
    _assert_agree(ours, back, config, classifier=True)
    labels = torch.tensor([0, 3, 1])
    with torch.no_grad():
        loss = ours(_pixels(config), labels=labels).loss
        expected = back(_pixels(config), labels=labels).loss
    assert_close(loss, expected, msg="loss")


def test_a_classifier_reads_a_bare_encoder_and_the_other_way(tmp_path):
    config = ViTConfig(**CONFIGS["mnist-p7"], id2label=LABELS)
    encoder = randomise(transformers.ViTModel(_hf_config(config)), seed=7)
    encoder.save_pretrained(tmp_path / "encoder")
    with pytest.warns(UserWarning, match="no weights for classifier.bias, classifier.weight"):
        classifier = ViTForImageClassification.from_pretrained(tmp_path / "encoder", id2label=LABELS)
    pixels = _pixels(config)
    with torch.no_grad():  # the encoder is the one that was saved (its pooler left out)
        ours = classifier.vit(pixels).last_hidden_state
        assert_close(ours, encoder(pixels).last_hidden_state)
    randomise(classifier, seed=8).save_pretrained(tmp_path / "classifier")
    with pytest.warns(UserWarning, match="no weights for pooler.dense.bias, pooler.dense.weight"):
        bare = ViTModel.from_pretrained(tmp_path / "classifier")
    assert bare.loaded_but_unused == ["classifier.bias", "classifier.weight"]
    with torch.no_grad():
        assert _max_diff(bare(pixels).last_hidden_state, classifier.vit(pixels).last_hidden_state) == 0.0


def test_a_sinusoidal_vit_is_refused_by_transformers(tmp_path):
    config = ViTConfig(**CONFIGS["mnist-p7"], position_embedding_type="sinusoidal", id2label=LABELS)
    model = ViTForImageClassification(config).eval()
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "bertkit-vit" and saved["position_embedding_type"] == "sinusoidal"
    with pytest.raises(ValueError, match="bertkit-vit"):
        transformers.AutoModelForImageClassification.from_pretrained(tmp_path)
    again = ViTForImageClassification.from_pretrained(tmp_path)
    pixels = _pixels(config)
    with torch.no_grad():
        assert _max_diff(again(pixels).logits, model(pixels).logits) == 0.0
