"""bertkit's LayerNorm: nn.LayerNorm bit for bit on the CPU; under a GPU's autocast, LayerNorm in bf16.

The low-precision path is a GPU's (LOW_PRECISION_DEVICES); here it is switched on for the CPU to test its maths,
which are the same calls on either device. tests/test_gpu.py checks it where it runs.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.models import layer_norm
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForPreTraining
from bertkit.models.bert.modeling import BertModel
from bertkit.models.layer_norm import LayerNorm
from bertkit.training.schedule import build_optimizer
from tolerance import assert_close

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64)


@pytest.fixture
def on_the_cpu(monkeypatch):
    """The low-precision path switched on for the CPU."""
    monkeypatch.setattr(layer_norm, "LOW_PRECISION_DEVICES", {"cpu"})


def pair(bias: bool = True) -> tuple[LayerNorm, nn.LayerNorm]:
    torch.manual_seed(0)
    ours, torchs = LayerNorm(48, eps=1e-12, bias=bias), nn.LayerNorm(48, eps=1e-12, bias=bias)
    with torch.no_grad():
        ours.weight.normal_(1.0, 0.3)
        if bias:
            ours.bias.normal_(0.0, 0.3)
    torchs.load_state_dict(ours.state_dict())
    return ours, torchs


@pytest.mark.parametrize("autocast", [False, True])
def test_on_the_cpu_it_is_torchs_layer_norm_bit_for_bit(autocast):
    ours, torchs = pair()
    x = torch.randn(3, 7, 48) * 4 + 1
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        a, b = ours(x), torchs(x)
        c, d = ours(x.bfloat16()), torchs(x.bfloat16())
    assert a.dtype == b.dtype == torch.float32 and torch.equal(a, b)
    assert c.dtype == d.dtype and torch.equal(c, d)


@pytest.mark.parametrize("bias", [True, False])
def test_under_autocast_it_reads_and_writes_bf16_and_keeps_float32_statistics(on_the_cpu, bias):
    ours, _ = pair(bias)
    x = (torch.randn(3, 7, 48) * 4 + 1).requires_grad_()
    grad_out = torch.randn(3, 7, 48)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = ours(x)
    y.backward(grad_out)
    assert y.dtype == torch.bfloat16
    # exactly the bf16 kernel on bf16 values (its statistics accumulate in float32)
    want = F.layer_norm(x.detach().bfloat16(), (48,), ours.weight.detach().bfloat16(),
                        ours.bias.detach().bfloat16() if bias else None, 1e-12)
    assert torch.equal(y.detach(), want)
    # and float32's LayerNorm to bf16's resolution (8 mantissa bits: 2^-8 relative), values and gradients
    x32, w32 = x.detach().clone().requires_grad_(), ours.weight.detach().clone().requires_grad_()
    b32 = ours.bias.detach().clone().requires_grad_() if bias else None
    exact = F.layer_norm(x32, (48,), w32, b32, 1e-12)
    exact.backward(grad_out)
    assert_close(y.float(), exact, rtol=2 ** -7)
    assert ours.weight.grad.dtype == torch.float32 and x.grad.dtype == torch.float32
    assert_close(x.grad, x32.grad, rtol=2 ** -5)
    assert_close(ours.weight.grad, w32.grad, rtol=2 ** -5)
    if bias:
        assert_close(ours.bias.grad, b32.grad, rtol=2 ** -5)
    assert not torch.equal(y.float(), exact)  # it did round: bf16, not float32 relabelled


def test_outside_autocast_the_switch_changes_nothing(on_the_cpu):
    ours, torchs = pair()
    x = torch.randn(2, 5, 48)
    assert torch.equal(ours(x), torchs(x))
    assert ours(x.bfloat16()).dtype == torch.bfloat16  # a bf16 model (inference) stays bf16, as nn.LayerNorm does


def test_a_bert_under_autocast_keeps_a_bf16_residual_stream_close_to_float32(on_the_cpu):
    torch.manual_seed(0)
    model = BertModel(BertConfig(**TINY)).eval()
    ids = torch.randint(5, 99, (2, 12))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    with torch.no_grad():
        exact = model(ids, mask, output_hidden_states=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            half = model(ids, mask, output_hidden_states=True)
    assert [h.dtype for h in half.hidden_states] == [torch.bfloat16] * 3
    assert [h.dtype for h in exact.hidden_states] == [torch.float32] * 3
    keep = mask.bool()
    error = float((half.last_hidden_state[keep].float() - exact.last_hidden_state[keep]).norm()
                  / exact.last_hidden_state[keep].norm())
    assert 0 < error < 2e-2, error


def test_pretraining_trains_with_it_and_nothing_a_checkpoint_or_optimizer_sees_changes(on_the_cpu):
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**TINY))
    keys = list(model.state_dict())
    norms = [name for name, module in model.named_modules() if isinstance(module, nn.LayerNorm)]
    assert len(norms) == 2 * TINY["num_hidden_layers"] + 2  # embeddings, two a layer, the head's transform
    optimizer = build_optimizer(model, learning_rate=1e-3, weight_decay=0.01)
    no_decay = {id(p) for group in optimizer.param_groups if group["weight_decay"] == 0.0 for p in group["params"]}
    assert all(id(model.get_submodule(name).weight) in no_decay for name in norms)
    ids = torch.randint(5, 99, (4, 16))
    labels = torch.where(torch.rand(4, 16) < 0.3, ids, -100)
    losses = []
    for _ in range(20):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(ids, labels=labels, next_sentence_label=torch.zeros(4, dtype=torch.long)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    assert all(p.dtype == torch.float32 for p in model.parameters()) and list(model.state_dict()) == keys
    assert losses[-1] < 0.8 * losses[0], losses
