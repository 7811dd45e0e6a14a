"""The ViT on its own: the patch grid, the 2-D sinusoidal positions, clear errors for images it cannot read."""

import pytest
import torch

import bertkit
from bertkit.models.configuration import ConfigError
from bertkit.models.functional import sinusoidal_positions
from bertkit.models.vit.configuration import ViTConfig
from bertkit.models.vit.modeling import ViTForImageClassification, ViTModel, sinusoidal_positions_2d

TINY = dict(image_size=28, patch_size=7, num_channels=1, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64)


def test_exported_from_bertkit():
    assert bertkit.ViTModel is ViTModel and bertkit.ViTForImageClassification is ViTForImageClassification
    assert bertkit.ViTConfig is ViTConfig


def test_the_sequence_is_the_class_token_and_one_vector_per_patch():
    config = ViTConfig(**TINY)
    model = ViTModel(config).eval()
    assert config.grid == (4, 4) and config.num_patches == 16
    with torch.no_grad():
        out = model(torch.randn(2, 1, 28, 28), output_attentions=True)
    assert out.last_hidden_state.shape == (2, 17, 32) and out.pooler_output.shape == (2, 32)
    for probs in out.attentions:
        assert probs.shape == (2, 4, 17, 17)
        assert torch.allclose(probs.sum(-1), torch.ones(2, 4, 17), atol=1e-5)


def test_a_patch_changes_only_through_its_own_token_in_the_embeddings():
    model = ViTModel(ViTConfig(**TINY)).eval()
    x = torch.randn(1, 1, 28, 28)
    y = x.clone()
    y[0, 0, 7:14, 21:28] += 1.0                       # the patch in grid row 1, column 3: token 1 + 1·4 + 3 = 8
    with torch.no_grad():
        changed = (model.embeddings(x) - model.embeddings(y)).abs().amax(-1)[0]
    assert changed.nonzero().flatten().tolist() == [8]


def test_2d_sinusoidal_positions_encode_row_and_column():
    table = sinusoidal_positions_2d(3, 5, 8)                 # (15, 8): row in dims 0-3, column in 4-7
    one_d = sinusoidal_positions(5, 4)
    for r in range(3):
        for c in range(5):
            assert torch.equal(table[r * 5 + c, :4], one_d[r]) and torch.equal(table[r * 5 + c, 4:], one_d[c])
    assert sinusoidal_positions_2d(2, 2, 7).shape == (4, 7)


def test_sinusoidal_positions_are_fixed_and_unsaved():
    model = ViTModel(ViTConfig(**TINY, position_embedding_type="sinusoidal"))
    assert "embeddings.position_embeddings" not in dict(model.named_parameters())
    assert not any("sinusoidal" in k for k in model.state_dict())
    assert torch.equal(model.embeddings.sinusoidal_table[0, 0], torch.zeros(32))   # the class token has none


@pytest.mark.parametrize("pixels, message", [
    (torch.randn(1, 28, 28), r"must be a \(batch, 1, 28, 28\) tensor of images, got \(1, 28, 28\)"),
    (torch.zeros(1, 1, 28, 28, dtype=torch.uint8), "must be floating point"),
    (torch.randn(2, 3, 28, 28), "has 3 channels, the model reads 1"),
    (torch.randn(2, 1, 32, 32), "images of 32 × 32 pixels, the model reads 28 × 28"),
    (torch.randn(0, 1, 28, 28), "empty batch"),
    (torch.full((1, 1, 28, 28), float("nan")), "NaN or infinite"),
    ([[0.0]], "tensor of images, got list"),
])
def test_images_the_model_cannot_read_are_named(pixels, message):
    with pytest.raises(ValueError, match=message):
        ViTModel(ViTConfig(**TINY))(pixels)


def test_labels_outside_the_classes_are_named():
    model = ViTForImageClassification(ViTConfig(**TINY, id2label={0: "a", 1: "b", 2: "c"}))
    with pytest.raises(ValueError, match=r"label ids must be in \[0, 3\)"):
        model(torch.randn(2, 1, 28, 28), labels=torch.tensor([0, 3]))
    loss = model(torch.randn(2, 1, 28, 28), labels=torch.tensor([0, 2])).loss
    loss.backward()
    assert model.vit.embeddings.cls_token.grad.abs().sum() > 0


@pytest.mark.parametrize("changes, message", [
    (dict(image_size=30), "image height 30 is not a multiple of the patch height 7"),
    (dict(image_size=[28, 27]), "image width 27 is not a multiple of the patch width 7"),
    (dict(patch_size=0), "patch_size must be a positive integer"),
    (dict(hidden_size=30), "not divisible by num_attention_heads"),
    (dict(position_embedding_type="rope"), "position_embedding_type 'rope'"),
    (dict(pooler_act="swish"), "pooler_act 'swish'"),
])
def test_bad_configs_are_named(changes, message):
    with pytest.raises(ConfigError, match=message):
        ViTConfig(**{**TINY, **changes})


def test_config_round_trip_and_model_types(tmp_path):
    config = ViTConfig(**TINY, id2label={0: "cat", 1: "dog"})
    assert ViTConfig.from_pretrained(config.save_pretrained(tmp_path)) == config
    assert "position_embedding_type" not in config.to_dict() and config.to_dict()["model_type"] == "vit"
    assert ViTConfig.from_dict({**TINY, "num_labels": 3}).id2label == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}
    with pytest.raises(ConfigError, match="model_type 'bert'"):
        ViTConfig.from_dict({**TINY, "model_type": "bert"})
