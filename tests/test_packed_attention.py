"""Attention over packed sequences: what `pack_padded` hands flash attention, and who is handed it.

On a GPU, `packed_attention` runs `varlen_attn` (flash attention over sequences laid end to end) where it can
(`attends_packed`); a CPU never does, so here a reference with varlen_attn's documented meaning stands in for it:
query, key, value (N, H, D), sequence i the rows starts[i]:starts[i + 1], each attending over its own. The padded
and packed models must then agree; tests/test_gpu.py runs the real kernel.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertkit.models import functional
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForPreTraining
from bertkit.models.functional import pack_padded
from bertkit.models.modernbert.configuration import FULL, SLIDING, ModernBertConfig
from bertkit.models.modernbert.modeling import ModernBertModel
from test_bert import TINY, packed_and_padded_agree


def reference_varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k):
    """varlen_attn's meaning, one sequence at a time."""
    assert query.dim() == 3 and cu_seq_q.dtype == torch.int32 and torch.equal(cu_seq_q, cu_seq_k)
    starts = cu_seq_q.tolist()
    assert starts[0] == 0 and starts[-1] == query.size(0) and max_q == max_k >= max(
        b - a for a, b in zip(starts, starts[1:]))
    out = [F.scaled_dot_product_attention(*(x[a:b].transpose(0, 1) for x in (query, key, value))).transpose(0, 1)
           for a, b in zip(starts, starts[1:])]
    return torch.cat(out)


@pytest.fixture
def packed_kernel(monkeypatch):
    """`packed_attention` takes the packed path on this CPU, through the reference; the calls are recorded."""
    calls = []

    def attends(query, packed, dropout, training):
        calls.append(packed.starts is not None)
        return packed.starts is not None and not (training and dropout > 0)

    monkeypatch.setattr(functional, "varlen_attn", reference_varlen_attn)
    monkeypatch.setattr(functional, "attends_packed", attends)
    return calls


def test_pack_padded_gives_each_sequences_start_and_the_longest():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    packed = pack_padded(mask, torch.float32)
    assert packed.starts.dtype == torch.int32 and packed.starts.tolist() == [0, 3, 7, 8]
    assert packed.longest >= 4 and packed.indices.tolist() == [0, 1, 2, 4, 5, 6, 7, 8]
    assert packed.padding == pytest.approx(4 / 12)


def test_a_cpu_never_takes_flash_attention_over_packed_sequences():
    packed = pack_padded(torch.tensor([[1, 1, 0]]), torch.bfloat16)
    query = torch.zeros(2, 2, 8, dtype=torch.bfloat16)
    assert not functional.attends_packed(query, packed, 0.0, False)


def test_bert_attending_packed_equals_the_padded_batch_forward_and_backward(packed_kernel):
    torch.manual_seed(0)
    packed_and_padded_agree(BertForPreTraining(BertConfig(**TINY)).double().train())
    assert packed_kernel and all(packed_kernel)  # the packed runs went through the packed kernel


def test_modernbert_global_layers_attend_packed_and_local_ones_padded_in_their_window(packed_kernel):
    config = ModernBertConfig(vocab_size=99, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                              num_attention_heads=4, max_position_embeddings=64, local_attention=4,
                              layer_types=[FULL, SLIDING, FULL, SLIDING], pad_token_id=0)
    torch.manual_seed(0)
    model = ModernBertModel(config).double().eval()
    ids = torch.randint(3, 99, (3, 21))
    mask = torch.ones_like(ids)
    mask[1, 15:], mask[2, 5:] = 0, 0
    with torch.no_grad():
        model.unpad = False
        padded = model(ids, mask).last_hidden_state
        model.unpad = True
        packed = model(ids, mask).last_hidden_state
    # one call a layer: a global layer is handed the sequences' starts, a local one (its window in the mask) not
    assert packed_kernel == [kind != SLIDING for kind in config.layer_types]
    torch.testing.assert_close(packed[mask.bool()], padded[mask.bool()], atol=1e-10, rtol=0)


def test_a_lightly_padded_batch_runs_packed_only_where_attention_runs_packed_too(monkeypatch):
    """Packing pays from 1% padding where attention runs packed as well (two copies a forward), from 10% where it
    runs padded (four a layer). A packed forward leaves zeros at padded positions: the path taken shows there."""
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**TINY)).bert.eval()
    model.unpad = True
    ids = torch.randint(5, TINY["vocab_size"], (5, 20))
    mask = torch.ones_like(ids)
    mask[0, -3:] = 0  # 3 of 100 positions: 3% padding
    padded = model(ids, mask).last_hidden_state
    assert padded[0, -3:].abs().sum() > 0  # below 10%: ran padded (flash attention cannot pack on a CPU)
    assert functional.min_padding_to_pack(padded, 8, 0.0, False) == functional.PACK_MIN_PADDING == 0.1

    monkeypatch.setattr(functional, "varlen_attn", reference_varlen_attn)
    monkeypatch.setattr(functional, "flash_attention_packs", lambda device, dtype, head_dim, dropout, training:
                        not (training and dropout > 0))
    assert functional.min_padding_to_pack(padded, 8, 0.1, True) == 0.1  # attention dropout: never packed
    assert functional.min_padding_to_pack(padded, 8, 0.1, False) == functional.PACKED_ATTENTION_MIN_PADDING == 0.01
    packed = model(ids, mask).last_hidden_state
    assert torch.equal(packed[0, -3:], torch.zeros_like(packed[0, -3:]))  # from 1%: ran packed
    torch.testing.assert_close(packed[mask.bool()], padded[mask.bool()], atol=1e-5, rtol=1e-5)


def test_attention_computes_in_autocasts_dtype_where_autocast_is_on():
    x = torch.zeros(2, 3)
    assert functional.attention_dtype(x) == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert functional.attention_dtype(x) == torch.bfloat16
    assert functional.attention_dtype(x.to(torch.float16)) == torch.float16
