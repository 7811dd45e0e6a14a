"""BertModel behaviour beyond parity: the permutation argument, input errors, the ALBERT and sinusoidal options."""

import pytest
import torch

from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.modeling import BertModel
from bertkit.models.reference import NumpyBert
from tolerance import assert_close

TINY = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24,
            max_position_embeddings=20, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def test_without_positions_swapping_tokens_swaps_outputs():
    """Self-attention is permutation-equivariant: with no position information, order is invisible.

    Exact up to the order of floating-point sums (attention sums over keys in a new order): float64, 1e-12.
    """
    torch.manual_seed(0)
    model = BertModel(BertConfig(**TINY)).eval().double()
    ids = torch.tensor([[5, 11, 23, 7, 42, 3]])
    swapped = ids[:, [0, 4, 2, 3, 1, 5]]                  # swap positions 1 and 4
    with torch.no_grad():
        model.embeddings.position_embeddings.weight.zero_()
        out, out_swapped = model(ids).last_hidden_state, model(swapped).last_hidden_state
        exact = dict(atol=1e-12, rtol=0)
        torch.testing.assert_close(out[0, 1], out_swapped[0, 4], **exact)
        torch.testing.assert_close(out[0, 4], out_swapped[0, 1], **exact)
        torch.testing.assert_close(out[0, [0, 2, 3, 5]], out_swapped[0, [0, 2, 3, 5]], **exact)
        torch.nn.init.normal_(model.embeddings.position_embeddings.weight)  # with positions, order matters
        out, out_swapped = model(ids).last_hidden_state, model(swapped).last_hidden_state
        assert (out[0, 1] - out_swapped[0, 4]).abs().max() > 1e-2


def test_padding_does_not_change_real_tokens():
    torch.manual_seed(0)
    model = BertModel(BertConfig(**TINY)).eval()
    ids = torch.tensor([[4, 9, 13]])
    padded = torch.tensor([[4, 9, 13, 0, 0, 0]])
    with torch.no_grad():
        a = model(ids).last_hidden_state
        b = model(padded, attention_mask=torch.tensor([[1, 1, 1, 0, 0, 0]])).last_hidden_state
    assert_close(a, b[:, :3], rtol=1e-6)


def packed_and_padded_agree(model) -> None:
    """A BertForPreTraining (float64, no dropout) on a padded batch, packed (`unpad`) and padded: forward and backward
    equal at real tokens to 1e-10; padded positions zeros when packed."""
    ids = torch.randint(5, 50, (3, 9))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[0, 6:], mask[2, 3:] = 0, 0
    labels = torch.full((3, 9), -100)
    labels[0, 2], labels[1, 8], labels[2, 1] = 7, 3, 9
    runs = {}
    for unpad in (False, True):
        model.bert.unpad = unpad
        model.zero_grad()
        out = model(ids, mask, labels=labels)
        out.loss.backward()
        runs[unpad] = (out, model.bert(ids, mask).last_hidden_state,
                       {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    (padded, hidden, grads), (packed, packed_hidden, packed_grads) = runs[False], runs[True]
    exact = dict(atol=1e-10, rtol=0)
    torch.testing.assert_close(packed.loss, padded.loss, **exact)
    torch.testing.assert_close(packed_hidden[mask.bool()], hidden[mask.bool()], **exact)
    assert packed_hidden[~mask.bool()].abs().max() == 0 and hidden[~mask.bool()].abs().max() > 0
    assert packed_grads.keys() == grads.keys() and len(grads) > 20
    for name, grad in grads.items():
        torch.testing.assert_close(packed_grads[name], grad, **exact, msg=name)


def test_packed_batch_is_the_padded_batch_without_its_padding():
    """`unpad` (a GPU's default for padded batches): the real tokens alone, packed, through every layer's
    projections and feed-forward (attention puts them back side by side). Forward and backward equal the padded
    computation at real tokens, in float64 to 1e-10; padded positions come out as zeros. With dropout the two draw
    their masks differently, so it is off here."""
    from bertkit.models.bert.heads import BertForPreTraining

    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**TINY)).double().train()
    packed_and_padded_agree(model)
    ids, exact = torch.randint(5, 50, (3, 9)), dict(atol=1e-10, rtol=0)
    model.bert.unpad = True  # a batch with nothing padded runs as it is, with no mask
    full = model.bert(ids, torch.ones_like(ids)).last_hidden_state
    torch.testing.assert_close(full, model.bert(ids).last_hidden_state, **exact)


@pytest.mark.parametrize("bad, message", [
    (dict(input_ids=torch.zeros(1, 21, dtype=torch.long)), "longer than the model's 20 positions"),
    (dict(input_ids=torch.zeros(0, 5, dtype=torch.long)), "empty batch"),
    (dict(input_ids=torch.zeros(5, dtype=torch.long)), "must be a \\(batch, seq\\) tensor"),
    (dict(input_ids=torch.zeros(1, 5)), "integer ids"),
    (dict(input_ids=torch.tensor([[1, 50]])), "must be in \\[0, 50\\)"),
    (dict(input_ids=torch.tensor([[1, 2]]), attention_mask=torch.ones(1, 3)), "attention_mask has shape"),
    (dict(input_ids=torch.tensor([[1, 2]]), token_type_ids=torch.tensor([[0, 2]])), "token_type_ids must be in"),
])
def test_bad_input_is_a_clear_error(bad, message):
    model = BertModel(BertConfig(**TINY))
    with pytest.raises(ValueError, match=message):
        model(**bad)


def test_albert_options_share_and_factorise(tmp_path):
    cfg = BertConfig(**{**TINY, "num_hidden_layers": 4}, embedding_size=8, share_layers=True)
    model = BertModel(cfg).eval()
    names = list(model.state_dict())
    assert "encoder.layer.1.attention.self.query.weight" not in names             # one set of layer weights
    assert model.embeddings.word_embeddings.weight.shape == (50, 8)              # V x E, not V x C
    assert model.encoder.embedding_hidden_mapping_in.weight.shape == (16, 8)     # E -> C
    C, E, V, F, P = 16, 8, 50, 24, 20
    layer = 4 * (C * C + C) + 2 * 2 * C + (C * F + F) + (F * C + C)
    embeddings = V * E + P * E + 2 * E + 2 * E + (E * C + C)
    assert model.num_parameters() == embeddings + layer + (C * C + C)
    model.save_pretrained(tmp_path)
    ids = torch.randint(0, 50, (2, 7))
    with torch.no_grad():
        out = model(ids)
    seq, pooled = NumpyBert.from_pretrained(tmp_path)(ids.numpy())
    assert_close(out.last_hidden_state, seq)
    assert_close(out.pooler_output, pooled)


def test_sinusoidal_positions_option(tmp_path):
    model = BertModel(BertConfig(**TINY, position_embedding_type="sinusoidal")).eval()
    assert not any("position_embeddings" in k for k in model.state_dict())       # fixed, not saved
    model.save_pretrained(tmp_path)
    ids = torch.randint(0, 50, (3, 9))
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    with torch.no_grad():
        out = BertModel.from_pretrained(tmp_path)(ids, mask)
    seq, _ = NumpyBert.from_pretrained(tmp_path)(ids.numpy(), mask.numpy())
    assert_close(out.last_hidden_state[mask.bool()], seq[mask.bool().numpy()])


def test_hidden_states_and_position_ids():
    torch.manual_seed(0)
    model = BertModel(BertConfig(**TINY)).eval()
    ids = torch.randint(0, 50, (2, 5))
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        shifted = model(ids, position_ids=torch.arange(1, 6).expand(2, 5))
    assert len(out.hidden_states) == 3 and torch.equal(out.hidden_states[-1], out.last_hidden_state)
    assert (shifted.last_hidden_state - out.last_hidden_state).abs().max() > 1e-3


@pytest.mark.parametrize("pre_ln, bias", [(True, True), (False, False), (True, False)])
def test_recipe_options_match_the_numpy_reference(tmp_path, pre_ln, bias):
    """Pre-LN blocks and bias-free layers (the pretraining recipe's levers) against NumpyBert's own lines."""
    cfg = BertConfig(**TINY, normalize_before=pre_ln, use_bias=bias)
    torch.manual_seed(0)
    model = BertModel(cfg).eval()
    with torch.no_grad():  # LayerNorm gains and biases away from 1 and 0, so a misplaced norm shows
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    names = list(model.state_dict())
    assert ("encoder.layer.0.attention.self.query.bias" in names) == bias
    assert ("encoder.layer.1.intermediate.dense.bias" in names) == bias
    assert ("encoder.final_layer_norm.weight" in names) == pre_ln
    model.save_pretrained(tmp_path)
    ids = torch.randint(0, 50, (3, 9))
    mask = torch.ones_like(ids)
    mask[2, 5:] = 0
    with torch.no_grad():
        out = model(ids, mask, output_hidden_states=True)
        loaded = BertModel.from_pretrained(tmp_path)(ids, mask).last_hidden_state
    seq, pooled = NumpyBert.from_pretrained(tmp_path)(ids.numpy(), mask.numpy())
    real = mask.bool()
    assert_close(out.last_hidden_state[real], seq[real.numpy()])
    assert_close(out.pooler_output, pooled)
    torch.testing.assert_close(loaded, out.last_hidden_state, atol=0, rtol=0)
    assert out.hidden_states[-1] is out.last_hidden_state
    post = BertModel(BertConfig(**TINY, use_bias=bias)).eval()
    post.load_state_dict({k: v for k, v in model.state_dict().items() if "final_layer_norm" not in k})
    with torch.no_grad():  # the same weights read post-LN compute something else
        differs = (post(ids, mask).last_hidden_state - out.last_hidden_state)[real].abs().max() > 1e-2
    assert differs == pre_ln


def test_pre_ln_config_is_not_taken_for_transformers_bert(tmp_path):
    import json

    import transformers

    BertModel(BertConfig(**TINY, normalize_before=True)).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "bertkit-bert-pre-ln" and saved["normalize_before"] is True
    assert BertConfig.from_pretrained(tmp_path).normalize_before
    with pytest.raises(ValueError, match="bertkit-bert-pre-ln"):
        transformers.AutoModel.from_pretrained(tmp_path)


def test_bias_free_model_loads_in_transformers_as_the_same_function(tmp_path):
    import transformers

    torch.manual_seed(1)
    model = BertModel(BertConfig(**TINY, use_bias=False)).eval()
    model.save_pretrained(tmp_path)
    transformers.logging.set_verbosity_error()
    theirs = transformers.BertModel.from_pretrained(tmp_path).eval()   # missing biases start at zero there
    ids = torch.randint(0, 50, (2, 8))
    with torch.no_grad():
        assert_close(model(ids).last_hidden_state, theirs(ids).last_hidden_state)
