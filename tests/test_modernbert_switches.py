"""bertkit's switches on the modern encoder, each turning one of ModernBERT's changes back to BERT's (or its
LayerNorm into an RMSNorm): each piece computes its formula, every variant runs unpadded as padded and saves and
loads, and a changed config is written under a model_type transformers refuses instead of misreading. SwiGLU (a
gated feed-forward with SiLU) is ModernBERT's own `hidden_activation="silu"` and is checked against transformers."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from bertkit.models.modernbert.configuration import (
    FULL,
    MODERN_SETTINGS,
    SLIDING,
    VARIANT_MODEL_TYPE,
    ModernBertConfig,
)
from bertkit.models.modernbert.modeling import ModernBertForMaskedLM, ModernBertModel
from bertkit.models.registry import family_of
from test_modernbert import batch
from test_modernbert import transformers_model as model_of
from tolerance import assert_close

transformers = pytest.importorskip("transformers")

SWITCHES = [dict(position_embedding_type="absolute"), dict(gated_mlp=False), dict(normalize_before=False),
            dict(norm_type="rms_norm"),
            dict(position_embedding_type="absolute", gated_mlp=False, normalize_before=False, norm_type="rms_norm")]


def config(**changes) -> ModernBertConfig:
    return ModernBertConfig(vocab_size=99, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                            num_attention_heads=4, local_attention=4, pad_token_id=0, max_position_embeddings=64,
                            layer_types=[FULL, SLIDING, SLIDING], **changes)


def test_absolute_positions_are_a_learned_table_added_before_the_norm():
    model = model_of(ModernBertModel, config(position_embedding_type="absolute"))
    ids, _ = batch()
    emb = model.embeddings
    expected = F.layer_norm(emb.tok_embeddings(ids) + emb.position_embeddings.weight[:21], (32,), emb.norm.weight)
    assert_close(emb(ids), expected)
    # the layers turn nothing: with the table zeroed and every layer global, reversing a text reverses its vectors
    with torch.no_grad():
        emb.position_embeddings.weight.zero_()
        for layer in model.layers:
            layer.attention_type = FULL
        forward, backward = model(ids[:1, :6]).last_hidden_state, model(ids[:1, :6].flip(1)).last_hidden_state
    assert_close(forward[0].flip(0), backward[0])


def test_the_plain_feed_forward_is_berts():
    model = model_of(ModernBertModel, config(gated_mlp=False))
    mlp = model.layers[0].mlp
    assert mlp.Wi.out_features == 48  # one half, not two
    x = torch.randn(2, 5, 32)
    assert_close(mlp(x), mlp.Wo(F.gelu(mlp.Wi(x))))
    gated = model_of(ModernBertModel, config()).layers[0].mlp
    a, g = gated.Wi(x).chunk(2, dim=-1)
    assert_close(gated(x), gated.Wo(F.gelu(a) * g))
    swiglu = model_of(ModernBertModel, config(hidden_activation="silu")).layers[0].mlp
    a, g = swiglu.Wi(x).chunk(2, dim=-1)
    assert_close(swiglu(x), swiglu.Wo(a * torch.sigmoid(a) * g))


def test_post_norm_layers_normalise_after_each_residual_and_leave_no_final_norm():
    model = model_of(ModernBertModel, config(normalize_before=False))
    layer = model.layers[0]
    assert isinstance(layer.attn_norm, torch.nn.LayerNorm)  # layer 0 too: post-LN normalises its own sum
    assert isinstance(model.final_norm, torch.nn.Identity)
    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        attended, _ = layer.attn(x, *model_tables(model, 7), None)
        h = layer.attn_norm(x + attended)
        expected = layer.mlp_norm(h + layer.mlp(h))
        got, _ = layer(x, *model_tables(model, 7), None)
    assert_close(got, expected)


def model_tables(model: ModernBertModel, length: int):
    from bertkit.models.functional import rotary_tables

    return rotary_tables(length, model.config.head_dim, model.config.rope_theta(FULL))


def test_rms_norm_divides_by_the_root_mean_square_and_has_no_bias():
    model = model_of(ModernBertModel, config(norm_type="rms_norm"))
    norm = model.layers[1].attn_norm
    assert isinstance(norm, torch.nn.RMSNorm) and not any("bias" in n for n, _ in norm.named_parameters())
    x = torch.randn(2, 5, 32) * 3 + 1
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + model.config.norm_eps) * norm.weight
    assert_close(norm(x), expected)


@pytest.mark.parametrize("changes", SWITCHES, ids=lambda c: "+".join(f"{k}={v}" for k, v in c.items()))
def test_every_variant_runs_unpadded_as_padded_and_saves_and_loads(changes, tmp_path):
    model = model_of(ModernBertForMaskedLM, config(**changes))
    ids, mask = batch()
    with torch.no_grad():
        model.model.unpad = False
        padded = model(ids, mask).logits
        model.model.unpad = True
        unpadded = model(ids, mask).logits
        alone = model(ids[2:, :5]).logits
    real = mask.bool()
    assert_close(unpadded[real], padded[real])
    assert_close(padded[2, :5], alone[0])  # a padded text equals itself alone
    model.save_pretrained(tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["model_type"] == VARIANT_MODEL_TYPE
    assert {k: written[k] for k in MODERN_SETTINGS if k in written} == changes
    assert family_of(tmp_path).name == "ModernBERT"
    back = ModernBertForMaskedLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(back(ids, mask).logits, unpadded if back.model.unpad else padded)
    with pytest.raises(ValueError):  # transformers has no such model: it says so instead of building another
        transformers.AutoConfig.from_pretrained(tmp_path)


def test_modernberts_own_settings_are_not_written(tmp_path):
    model_of(ModernBertModel, config(hidden_activation="silu")).save_pretrained(tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["model_type"] == "modernbert" and not set(MODERN_SETTINGS) & set(written)


def test_swiglu_equals_transformers_both_ways(tmp_path):
    hf = transformers.ModernBertConfig(vocab_size=99, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                                       num_attention_heads=4, max_position_embeddings=64, pad_token_id=0,
                                       local_attention=4, global_attn_every_n_layers=3, hidden_activation="silu")
    hf._attn_implementation = "eager"
    theirs = model_of(transformers.ModernBertForMaskedLM, hf)
    theirs.save_pretrained(tmp_path / "hf")
    model = ModernBertForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    assert model.config.hidden_activation == "silu"
    ids, mask = batch()
    with torch.no_grad():
        expected, got = theirs(input_ids=ids, attention_mask=mask).logits, model(ids, mask).logits
    assert_close(got[mask.bool()], expected[mask.bool()])
    model.save_pretrained(tmp_path / "ours")
    back = transformers.ModernBertForMaskedLM.from_pretrained(tmp_path / "ours", attn_implementation="eager")
    with torch.no_grad():
        assert_close(back.eval()(input_ids=ids, attention_mask=mask).logits[mask.bool()], got[mask.bool()])


def test_a_switch_value_that_is_not_one_is_refused():
    from bertkit.errors import ConfigError

    with pytest.raises(ConfigError, match="position_embedding_type 'learned' is not one of rotary, absolute"):
        config(position_embedding_type="learned")
    with pytest.raises(ConfigError, match="norm_type 'batch_norm' is not one of layer_norm, rms_norm"):
        config(norm_type="batch_norm")
