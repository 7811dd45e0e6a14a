"""RNN / LSTM / GRU from their equations against torch.nn with copied weights: outputs and gradients."""

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
