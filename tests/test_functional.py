"""The pure maths of functional.py: values the tutorials print, and forward + backward against torch/HF."""

import math

import pytest
import torch
import torch.nn.functional as F
from transformers.activations import ACT2FN as HF_ACT2FN

from bertkit.models.functional import (
    ACT2FN,
    DROPOUT_LEVELS,
    attention,
    causal_mask_bias,
    dropout,
    efficient_attention,
    mask_value,
    padding_mask_bias,
    sinusoidal_positions,
)
from tolerance import assert_close


def test_sinusoidal_positions_of_i_am_good():
    # "I am good" with d_model = 4: the matrix the tutorials print.
    pe = sinusoidal_positions(3, 4)
    expected = torch.tensor([[0.0, 1.0, 0.0, 1.0],
                             [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
                             [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)]])
    torch.testing.assert_close(pe, expected, atol=1e-7, rtol=0)
    assert [round(v, 3) for v in pe[2].tolist()] == [0.909, -0.416, 0.02, 1.0]


def test_sinusoidal_positions_odd_dim_and_bad_sizes():
    pe = sinusoidal_positions(10, 5)
    assert pe.shape == (10, 5)
    torch.testing.assert_close(pe[:, 4], torch.sin(torch.arange(10) / 10000 ** (4 / 5)).float())
    with pytest.raises(ValueError, match="positive"):
        sinusoidal_positions(0, 4)


@pytest.mark.parametrize("with_mask", [False, True])
def test_attention_matches_sdpa_forward_and_backward(with_mask):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = None
    if with_mask:
        mask = padding_mask_bias(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]), torch.float64)
    out, probs = attention(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 3, 5, dtype=torch.float64))
    if with_mask:
        assert probs[1, :, :, 2:].abs().max() == 0  # padding receives exactly no attention
    grads = torch.autograd.grad(out.pow(2).sum(), (q, k, v))
    ref_grads = torch.autograd.grad(ref.pow(2).sum(), (q, k, v))
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(lambda q, k, v: attention(q, k, v, mask)[0], (q, k, v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_efficient_attention_equals_the_formula_forward_and_backward(dtype):
    """Whichever path it takes (fused in float32, explicit in bfloat16), it computes softmax(QKᵀ/√d + mask) V."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 2, 7, 16, dtype=torch.float64) for _ in range(3))
    mask = padding_mask_bias(torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5]), torch.float64)
    ref_inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    ref, _ = attention(*ref_inputs, mask)
    ref_grads = torch.autograd.grad(ref.pow(2).sum(), ref_inputs)
    inputs = [t.to(dtype).requires_grad_() for t in (q, k, v)]
    out = efficient_attention(*inputs, mask.to(dtype))
    assert out.dtype == dtype
    grads = torch.autograd.grad(out.float().pow(2).sum(), inputs)
    if dtype == torch.float32:  # the fused kernel's rounding, relative to the values' magnitude
        assert_close(out, ref, msg="output")
        for name, a, b in zip("qkv", grads, ref_grads):
            assert_close(a, b, msg=f"gradient of {name}")
    else:  # bfloat16 keeps 8 bits of mantissa: a bound of its own, relative to each element
        tol = dict(atol=4e-2, rtol=4e-2)
        torch.testing.assert_close(out.double(), ref, **tol)
        for a, b in zip(grads, ref_grads):
            torch.testing.assert_close(a.double(), b, **tol)
    assert out[1:, :, :, :].isfinite().all()


def test_efficient_attention_drops_out_only_in_training():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 8) for _ in range(3))
    for dtype in (torch.float32, torch.bfloat16):
        args = [t.to(dtype) for t in (q, k, v)]
        evaluated = efficient_attention(*args, dropout=0.5, training=False)
        torch.testing.assert_close(evaluated, efficient_attention(*args))
        trained = efficient_attention(*args, dropout=0.5, training=True)
        assert not torch.allclose(trained.float(), evaluated.float())


def test_padding_bias_is_dtype_safe():
    m = torch.tensor([[1, 0]])
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        bias = padding_mask_bias(m, dtype)
        assert bias.shape == (1, 1, 1, 2) and bias.dtype == dtype
        assert bias[0, 0, 0, 0] == 0 and bias[0, 0, 0, 1] == mask_value(dtype)
        scores = torch.zeros(1, 1, 1, 2, dtype=dtype) + bias
        assert torch.isfinite(scores.softmax(-1)).all()  # no -inf + inf = nan
    with pytest.raises(ValueError, match="batch, seq"):
        padding_mask_bias(torch.ones(2, 2, 2, 2))
    per_query = padding_mask_bias(torch.tensor([[[1, 0], [1, 1]]]))          # (B, T, S): which keys each query sees
    assert per_query.shape == (1, 1, 2, 2) and (per_query[0, 0] == 0).tolist() == [[True, False], [True, True]]


def test_causal_mask_lets_t_see_only_up_to_t():
    bias = causal_mask_bias(4)
    assert (bias == 0).tolist() == [[True, False, False, False], [True, True, False, False],
                                    [True, True, True, False], [True, True, True, True]]
    # With 3 cached keys, the single new query sees all 4 keys.
    assert (causal_mask_bias(1, key_length=4) == 0).all()
    assert (causal_mask_bias(2, key_length=5) == 0).sum().item() == 4 + 5


@pytest.mark.parametrize("name", ["gelu", "gelu_new", "gelu_pytorch_tanh", "relu"])
def test_activations_match_transformers_forward_and_backward(name):
    x = torch.linspace(-6, 6, 1001, dtype=torch.float64, requires_grad=True)
    ours, theirs = ACT2FN[name](x), HF_ACT2FN[name](x)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
    g1, = torch.autograd.grad(ours.sum(), x)
    g2, = torch.autograd.grad(theirs.sum(), x)
    torch.testing.assert_close(g1, g2, atol=1e-6, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_keeps_1_minus_p_in_every_bit_lane_and_scales_exactly(dtype, p):
    torch.manual_seed(0)
    x = torch.randn(1000, 1000).to(dtype)
    y = dropout(x, p)
    kept = y != 0
    rate = 1 - round(p * DROPOUT_LEVELS) / DROPOUT_LEVELS          # the exact keep rate the scale uses
    # each of the four 16-bit lanes of a 64-bit draw keeps at that rate (a biased lane would show here)
    lanes = kept.flatten().view(-1, 4).double().mean(0)
    sd = math.sqrt(rate * (1 - rate) / (x.numel() / 4))
    assert (lanes - rate).abs().max().item() < 5 * sd, lanes
    # neighbours are independent: keep-keep pairs at offset 1 occur at rate²
    pairs = (kept.flatten()[:-1] & kept.flatten()[1:]).double().mean().item()
    assert abs(pairs - rate * rate) < 5 * math.sqrt(rate * rate * (1 - rate * rate) / x.numel())
    expected = (x.float() * (1 / rate)).to(dtype)                  # each kept value x·scale, rounded once
    assert torch.equal(y[kept], expected[kept])
    assert y.dtype == dtype and y.shape == x.shape


def test_dropout_backward_is_the_mask_times_the_scale():
    torch.manual_seed(1)
    x = torch.randn(64, 33, requires_grad=True)
    g = torch.randn(64, 33)
    y = dropout(x, 0.25)
    y.backward(g)
    kept = y.detach() != 0
    torch.testing.assert_close(x.grad, torch.where(kept, g / 0.75, 0.0), rtol=1e-6, atol=0)
    assert 0.6 < kept.float().mean().item() < 0.9


def test_dropout_is_reproducible_from_the_seed_and_keeps_the_mean():
    x = torch.ones(200_000)
    torch.manual_seed(3)
    a = dropout(x, 0.1)
    torch.manual_seed(3)
    b = dropout(x, 0.1)
    assert torch.equal(a, b)
    assert not torch.equal(a, dropout(x, 0.1))                      # the generator moved on
    assert abs(a.mean().item() - 1.0) < 5 * math.sqrt(0.1 / 0.9 / x.numel())


def test_dropout_identity_and_edge_cases():
    x = torch.randn(5, 7, requires_grad=True)
    assert dropout(x, 0.3, training=False) is x
    assert dropout(x, 0.0) is x
    zero = dropout(x, 1.0)
    assert torch.equal(zero, torch.zeros(5, 7))
    zero.sum().backward()
    assert torch.equal(x.grad, torch.zeros(5, 7))
    assert dropout(torch.empty(0, 3), 0.5).shape == (0, 3)
    assert dropout(torch.tensor(2.0), 0.5).shape == ()
    t = torch.randn(6, 8).t()                                       # not contiguous
    torch.manual_seed(4)
    y = dropout(t, 0.5)
    assert y.shape == (8, 6) and torch.equal(y[y != 0], (t * 2)[y != 0])
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="between 0 and 1"):
            dropout(x, bad)


def test_dropout_module_follows_train_and_eval():
    from bertkit.models.dropout import Dropout

    layer = Dropout(0.5)
    x = torch.ones(1000)
    assert torch.equal(layer.eval()(x), x)
    out = layer.train()(x)
    assert set(out.unique().tolist()) == {0.0, 2.0}
    assert "p=0.5" in repr(layer)
    with pytest.raises(ValueError, match="between 0 and 1"):
        Dropout(2.0)
