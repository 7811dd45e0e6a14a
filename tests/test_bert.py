"""BertModel behaviour beyond parity: the permutation argument, input errors, the ALBERT and sinusoidal options."""

import pytest
import torch

from bertkit.config import BertConfig
from bertkit.models.bert import BertModel
from bertkit.reference import NumpyBert

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
    torch.testing.assert_close(a, b[:, :3], atol=1e-6, rtol=0)


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
    torch.testing.assert_close(torch.from_numpy(seq), out.last_hidden_state, atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.from_numpy(pooled), out.pooler_output, atol=1e-5, rtol=0)


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
    torch.testing.assert_close(torch.from_numpy(seq)[mask.bool()], out.last_hidden_state[mask.bool()],
                               atol=1e-5, rtol=0)


def test_hidden_states_and_position_ids():
    torch.manual_seed(0)
    model = BertModel(BertConfig(**TINY)).eval()
    ids = torch.randint(0, 50, (2, 5))
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        shifted = model(ids, position_ids=torch.arange(1, 6).expand(2, 5))
    assert len(out.hidden_states) == 3 and torch.equal(out.hidden_states[-1], out.last_hidden_state)
    assert (shifted.last_hidden_state - out.last_hidden_state).abs().max() > 1e-3
