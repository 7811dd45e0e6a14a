"""BertModel and NumpyBert against transformers.BertModel on random tiny configs, and checkpoint round trips."""

import pytest
import torch
import transformers

from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.modeling import BertModel
from bertkit.models.reference import NumpyBert
from tolerance import assert_close

# Each config exercises something: relu / gelu_new, one token type, eps 1e-5, 3 and 5 heads, odd sizes.
CONFIGS = [
    dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, hidden_act="gelu"),
    dict(hidden_size=30, num_hidden_layers=3, num_attention_heads=3, intermediate_size=64, hidden_act="relu",
         type_vocab_size=1),
    dict(hidden_size=40, num_hidden_layers=2, num_attention_heads=5, intermediate_size=48, hidden_act="gelu_new",
         layer_norm_eps=1e-5),
    dict(hidden_size=24, num_hidden_layers=1, num_attention_heads=6, intermediate_size=96,
         hidden_act="gelu_pytorch_tanh", type_vocab_size=3),
    dict(hidden_size=36, num_hidden_layers=4, num_attention_heads=3, intermediate_size=50, hidden_act="gelu",
         layer_norm_eps=1e-5, max_position_embeddings=40),
]


def hf_model(seed: int, **overrides) -> transformers.BertModel:
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(**{"vocab_size": 99, "max_position_embeddings": 64, **overrides})
    cfg._attn_implementation = "eager"  # the only HF path that returns attention probabilities
    model = transformers.BertModel(cfg).eval()
    # HF initialises LayerNorm to 1/0 and biases to 0; randomise them so those parameters are tested too.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model


def padded_batch(seed: int, vocab: int = 99, lengths=(13, 9, 4, 1), type_vocab_size: int = 2):
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.randint(1, vocab, (len(lengths), T), generator=g)
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()
    ids = ids * mask  # pad id 0
    types = torch.randint(0, type_vocab_size, ids.shape, generator=g) * mask
    return ids, mask, types


@pytest.mark.parametrize("index", range(len(CONFIGS)))
@pytest.mark.parametrize("weights_format", ["safetensors", "bin"])
def test_matches_transformers(tmp_path, index, weights_format):
    overrides = CONFIGS[index]
    hf = hf_model(index, **overrides)
    hf.save_pretrained(tmp_path)
    if weights_format == "bin":  # the older format: a torch pickle, as checkpoints of 2019-2023 ship
        state = dict(hf.state_dict(), **{"embeddings.position_ids": torch.arange(64)[None]})
        (tmp_path / "model.safetensors").unlink()
        torch.save(state, tmp_path / "pytorch_model.bin")

    ids, mask, types = padded_batch(index, type_vocab_size=overrides.get("type_vocab_size", 2))
    with torch.no_grad():
        ref = hf(ids, attention_mask=mask, token_type_ids=types, output_attentions=True)
    keep = mask.bool()

    ours = BertModel.from_pretrained(tmp_path)
    with torch.no_grad():
        out = ours(ids, attention_mask=mask, token_type_ids=types, output_attentions=True)
        fast = ours(ids, attention_mask=mask, token_type_ids=types)  # the fused-attention path
    assert_close(out.last_hidden_state[keep], ref.last_hidden_state[keep], msg="last_hidden_state")
    assert_close(fast.last_hidden_state[keep], ref.last_hidden_state[keep], msg="last_hidden_state, fused")
    assert_close(out.pooler_output, ref.pooler_output, msg="pooler_output")
    assert len(out.attentions) == len(ref.attentions) == overrides["num_hidden_layers"]
    for a, b in zip(out.attentions, ref.attentions):  # probabilities: magnitude at most 1, an absolute bound
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    # Padding columns get (numerically) zero attention.
    assert out.attentions[0][~keep[:, None, None, :].expand_as(out.attentions[0])].abs().max() < 1e-12

    seq, pooled = NumpyBert.from_pretrained(tmp_path)(ids.numpy(), mask.numpy(), types.numpy())
    assert_close(seq[keep.numpy()], ref.last_hidden_state[keep], msg="NumpyBert last_hidden_state")
    assert_close(pooled, ref.pooler_output, msg="NumpyBert pooler_output")


def test_gradients_match_transformers(tmp_path):
    # dropout off so both compute the same function
    hf = hf_model(7, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **CONFIGS[0]).train()
    hf.save_pretrained(tmp_path)
    ours = BertModel.from_pretrained(tmp_path).train()
    ids, mask, types = padded_batch(3)
    target = torch.randn(ids.shape[0], ids.shape[1], 32)
    for model in (hf, ours):
        out = model(ids, attention_mask=mask, token_type_ids=types)
        ((out.last_hidden_state * target * mask[..., None]).sum() + out.pooler_output.sum()).backward()
    theirs = dict(hf.named_parameters())
    for name, p in ours.named_parameters():
        assert_close(p.grad, theirs[name].grad, rtol=1e-4, msg=name)


def test_state_dict_keys_equal_transformers():
    hf = hf_model(0, **CONFIGS[1])
    ours = BertModel(BertConfig(vocab_size=99, max_position_embeddings=64, **CONFIGS[1]))
    assert list(ours.state_dict()) == list(hf.state_dict())
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in hf.state_dict().items()}


def test_round_trip_bertkit_to_transformers_and_back(tmp_path):
    torch.manual_seed(0)
    ours = BertModel(BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=37, max_position_embeddings=64)).eval()
    ours.save_pretrained(tmp_path / "a")
    hf = transformers.BertModel.from_pretrained(tmp_path / "a", attn_implementation="eager").eval()
    ids, mask, types = padded_batch(1)
    with torch.no_grad():
        a = ours(ids, mask, types)
        b = hf(ids, attention_mask=mask, token_type_ids=types)
    assert_close(a.last_hidden_state[mask.bool()], b.last_hidden_state[mask.bool()], rtol=1e-6)
    assert_close(a.pooler_output, b.pooler_output, rtol=1e-6)

    hf.save_pretrained(tmp_path / "b")                      # HF -> bertkit -> HF
    again = BertModel.from_pretrained(tmp_path / "b")
    again.save_pretrained(tmp_path / "c")
    hf2 = transformers.BertModel.from_pretrained(tmp_path / "c", attn_implementation="eager").eval()
    for (k1, v1), (k2, v2) in zip(hf.state_dict().items(), hf2.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2), k1


def test_save_then_load_is_identical(tmp_path):
    torch.manual_seed(1)
    model = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=20, max_position_embeddings=32)).eval()
    model.save_pretrained(tmp_path)
    loaded = BertModel.from_pretrained(tmp_path)
    ids = torch.randint(0, 50, (2, 7))
    with torch.no_grad():
        assert_close(model(ids).last_hidden_state, loaded(ids).last_hidden_state)
