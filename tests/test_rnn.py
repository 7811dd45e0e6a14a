"""RNN / LSTM / GRU from their equations against torch.nn with copied weights: outputs and gradients."""

import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from bertkit.models.seq2seq import rnn
from tolerance import assert_close

CELL_PAIRS = [
    (lambda: rnn.RNNCell(5, 7), lambda: torch.nn.RNNCell(5, 7)),
    (lambda: rnn.RNNCell(5, 7, nonlinearity="relu"), lambda: torch.nn.RNNCell(5, 7, nonlinearity="relu")),
    (lambda: rnn.LSTMCell(5, 7), lambda: torch.nn.LSTMCell(5, 7)),
    (lambda: rnn.GRUCell(5, 7), lambda: torch.nn.GRUCell(5, 7)),
    (lambda: rnn.GRUCell(5, 7, bias=False), lambda: torch.nn.GRUCell(5, 7, bias=False)),
]


def _copy(ours: torch.nn.Module, theirs: torch.nn.Module) -> None:
    assert set(ours.state_dict()) == set(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict())


def _grads(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad for name, p in module.named_parameters()}


def _assert_same_grads(ours: torch.nn.Module, theirs: torch.nn.Module) -> None:
    ours_g, theirs_g = _grads(ours), _grads(theirs)
    for name, g in theirs_g.items():
        assert ours_g[name] is not None, name
        assert_close(ours_g[name], g, msg=name)


def _flat(state):
    return torch.cat([s.flatten() for s in state]) if isinstance(state, tuple) else state.flatten()


@pytest.mark.parametrize("index", range(len(CELL_PAIRS)))
def test_cell_matches_torch_over_several_steps(index):
    torch.manual_seed(index)
    make_ours, make_theirs = CELL_PAIRS[index]
    ours, theirs = make_ours(), make_theirs()
    _copy(ours, theirs)
    xs = torch.randn(4, 3, 5)                                   # 4 steps of a batch of 3
    x_ours, x_theirs = xs.clone().requires_grad_(), xs.clone().requires_grad_()
    state_ours = state_theirs = None
    outs_ours, outs_theirs = [], []
    for t in range(4):
        state_ours = ours(x_ours[t], state_ours)
        state_theirs = theirs(x_theirs[t], state_theirs)
        outs_ours.append(_flat(state_ours))
        outs_theirs.append(_flat(state_theirs))
    out_ours, out_theirs = torch.stack(outs_ours), torch.stack(outs_theirs)
    assert_close(out_ours, out_theirs)
    weights = torch.randn_like(out_ours)                        # a loss that weighs every output differently
    (out_ours * weights).sum().backward()
    (out_theirs * weights).sum().backward()
    _assert_same_grads(ours, theirs)
    assert_close(x_ours.grad, x_theirs.grad)


LAYER_CASES = [
    ("rnn", dict(num_layers=2)),
    ("rnn", dict(num_layers=1, nonlinearity="relu", bidirectional=True)),
    ("lstm", dict(num_layers=2, bidirectional=True, batch_first=True)),
    ("lstm", dict(num_layers=1, bias=False)),
    ("gru", dict(num_layers=3, batch_first=True)),
    ("gru", dict(num_layers=2, bidirectional=True)),
]


def _torch_layer(kind: str, **kwargs) -> torch.nn.Module:
    return {"rnn": torch.nn.RNN, "lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[kind](6, 8, **kwargs)


@pytest.mark.parametrize("kind,kwargs", LAYER_CASES)
def test_layer_matches_torch_with_initial_state(kind, kwargs):
    torch.manual_seed(len(kind) + kwargs["num_layers"])
    ours, theirs = rnn.LAYERS[kind](6, 8, **kwargs), _torch_layer(kind, **kwargs)
    _copy(ours, theirs)
    batch_first = kwargs.get("batch_first", False)
    x = torch.randn((3, 5, 6) if batch_first else (5, 3, 6))
    dirs = 2 if kwargs.get("bidirectional") else 1
    h0 = torch.randn(kwargs["num_layers"] * dirs, 3, 8)
    hx = (h0, torch.randn_like(h0)) if kind == "lstm" else h0
    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_ours, state_ours = ours(x_ours, hx)
    out_theirs, state_theirs = theirs(x_theirs, hx)
    assert_close(out_ours, out_theirs)
    assert_close(_flat(state_ours), _flat(state_theirs))
    w_out, w_state = torch.randn_like(out_ours), torch.randn_like(_flat(state_ours))
    ((out_ours * w_out).sum() + (_flat(state_ours) * w_state).sum()).backward()
    ((out_theirs * w_out).sum() + (_flat(state_theirs) * w_state).sum()).backward()
    _assert_same_grads(ours, theirs)
    assert_close(x_ours.grad, x_theirs.grad)


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_mask_equals_packed_sequences(kind):
    """Right-padded batch + mask == torch's packed sequences: outputs (zeros on padding), final states, grads."""
    torch.manual_seed(3)
    ours = rnn.LAYERS[kind](6, 8, num_layers=2, bidirectional=True, batch_first=True)
    theirs = _torch_layer(kind, num_layers=2, bidirectional=True, batch_first=True)
    _copy(ours, theirs)
    lengths = torch.tensor([5, 2, 4])
    mask = torch.arange(5)[None] < lengths[:, None]
    x = torch.randn(3, 5, 6) * mask[..., None]
    out_ours, state_ours = ours(x, mask=mask)
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out_packed, state_theirs = theirs(packed)
    out_theirs, _ = pad_packed_sequence(out_packed, batch_first=True, total_length=5)
    assert_close(out_ours, out_theirs)
    assert_close(_flat(state_ours), _flat(state_theirs))
    (out_ours.sum() + _flat(state_ours).sum()).backward()
    (out_theirs.sum() + _flat(state_theirs).sum()).backward()
    _assert_same_grads(ours, theirs)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="nonlinearity"):
        rnn.RNNCell(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="dropout"):
        rnn.GRU(3, 4, dropout=1.0)
    with pytest.raises(ValueError, match="3 features"):
        rnn.GRU(3, 4)(torch.randn(2, 2, 5))
    with pytest.raises(ValueError, match="mask"):
        rnn.GRU(3, 4, batch_first=True)(torch.randn(2, 5, 3), mask=torch.ones(2, 4))


# ---- the tutorials' GRU ----------------------------------------------------------------------------------

def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _tutorial_gru_step(x, h, w_ih, w_hh, b_ih, b_hh):
    """The tutorials' equations, literally: r, z = σ(W·[h, x] + b), h~ = tanh(W_h·[r * h, x] + b_h),
    h' = (1 - z) * h~ + z * h; the W and b cut from torch's stacked (r, z, n) parameters."""
    (w_ir, w_iz, w_in), (w_hr, w_hz, w_hn) = np.split(w_ih, 3), np.split(w_hh, 3)
    (b_ir, b_iz, b_in), (b_hr, b_hz, b_hn) = np.split(b_ih, 3), np.split(b_hh, 3)
    r = _sigmoid(np.concatenate([h, x], -1) @ np.concatenate([w_hr, w_ir], 1).T + b_ir + b_hr)
    z = _sigmoid(np.concatenate([h, x], -1) @ np.concatenate([w_hz, w_iz], 1).T + b_iz + b_hz)
    h_tilde = np.tanh(np.concatenate([r * h, x], -1) @ np.concatenate([w_hn, w_in], 1).T + b_in + b_hn)
    return (1 - z) * h_tilde + z * h


def _numpy(module: torch.nn.Module, name: str) -> np.ndarray:
    return getattr(module, name).detach().numpy()


def test_tutorial_gru_cell_is_the_tutorials_equations():
    torch.manual_seed(0)
    cell = rnn.GRUCell(5, 7, variant="tutorial").double()
    xs, h = torch.randn(4, 3, 5, dtype=torch.float64), torch.randn(3, 7, dtype=torch.float64)
    params = [_numpy(cell, n) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    h_ours, h_numpy = h, h.numpy()
    for x in xs:
        h_ours, h_numpy = cell(x, h_ours), _tutorial_gru_step(x.numpy(), h_numpy, *params)
        assert np.abs(h_ours.detach().numpy() - h_numpy).max() < 1e-6
    # the same weights in torch's form give another state: the reset gate's place matters
    torch_cell = rnn.GRUCell(5, 7).double()
    torch_cell.load_state_dict(cell.state_dict())
    assert (torch_cell(xs[0], h) - cell(xs[0], h)).abs().max() > 1e-3


def test_tutorial_gru_layers_both_directions_are_the_tutorials_equations():
    torch.manual_seed(1)
    layer = rnn.GRU(6, 8, num_layers=2, bidirectional=True, variant="tutorial").double()
    x, h0 = torch.randn(5, 3, 6, dtype=torch.float64), torch.randn(4, 3, 8, dtype=torch.float64)
    out, h_n = layer(x, h0)
    inputs, finals = x.numpy(), []
    for layer_index in range(2):
        outputs = []
        for d, suffix in enumerate((f"_l{layer_index}", f"_l{layer_index}_reverse")):
            params = [_numpy(layer, n + suffix) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            h, steps = h0[2 * layer_index + d].numpy(), [None] * 5
            for t in (range(4, -1, -1) if d else range(5)):
                h = steps[t] = _tutorial_gru_step(inputs[t], h, *params)
            outputs.append(np.stack(steps))
            finals.append(h)
        inputs = np.concatenate(outputs, -1)                                  # (T, B, 2H): the next layer's input
    assert np.abs(out.detach().numpy() - inputs).max() < 1e-6
    assert np.abs(h_n.detach().numpy() - np.stack(finals)).max() < 1e-6


def test_torch_gru_variant_is_still_torch_nn_gru():
    torch.manual_seed(2)
    ours, theirs = rnn.GRU(6, 8, num_layers=2, bidirectional=True, variant="torch"), torch.nn.GRU(6, 8, 2,
                                                                                                 bidirectional=True)
    _copy(ours, theirs)
    x = torch.randn(5, 3, 6)
    assert_close(ours(x)[0], theirs(x)[0])
    with pytest.raises(ValueError, match="GRU variant must be 'torch' or 'tutorial', got 'cho'"):
        rnn.GRU(6, 8, variant="cho")


# ---- attention scores ------------------------------------------------------------------------------------

def test_dot_product_attention_is_the_hand_computation():
    attention = rnn.DotProductAttention(2, 2)                                 # equal widths: no parameter
    assert list(attention.parameters()) == []
    s = torch.tensor([[1.0, 2.0]])
    h = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [5.0, 5.0]]])
    mask = torch.tensor([[True, True, True, False]])                         # the last position is padding
    context, weights = attention(s, attention.project_keys(h), h, mask)
    scores = torch.tensor([1.0, 2.0, 3.0]) / 2 ** 0.5                         # sᵀ h_j / √2
    expected = scores.exp() / scores.exp().sum()
    assert_close(weights[0], torch.cat([expected, torch.zeros(1)]))
    assert_close(context[0], expected[0] * h[0, 0] + expected[1] * h[0, 1] + expected[2] * h[0, 2])


def test_attention_weights_sum_to_one_over_the_real_positions():
    torch.manual_seed(3)
    memory, query = torch.randn(3, 6, 10), torch.randn(3, 5)
    mask = torch.arange(6)[None] < torch.tensor([6, 4, 1])[:, None]
    for score in ("additive", "dot"):
        attention = rnn.attention_for(score, 5, 10)
        context, weights = attention(query, attention.project_keys(memory), memory, mask)
        assert_close(weights.sum(-1), torch.ones(3))
        assert torch.all(weights[~mask] == 0) and torch.all(weights[mask] > 0)
        assert_close(context, torch.einsum("bs,bsk->bk", weights, memory))
    # wider keys (a bidirectional encoder's) are projected to the query's width: sᵀ W h_j / √5
    attention = rnn.attention_for("dot", 5, 10)
    _, weights = attention(query, attention.project_keys(memory), memory, None)
    scores = torch.einsum("bq,qk,bsk->bs", query, attention.key.weight, memory) / 5 ** 0.5
    assert_close(weights, scores.softmax(-1))
    with pytest.raises(ValueError, match="attention score must be 'additive' or 'dot', got 'general'"):
        rnn.attention_for("general", 5, 10)
