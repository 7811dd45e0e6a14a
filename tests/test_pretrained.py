"""The one model base: ties, saving without side effects, loading in place, the input-check switch, and
BERT's stacked Q/K/V projection (exact gradients; the kept stack follows every change of the weights)."""

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open

from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForPreTraining, BertForSequenceClassification, BertForTokenClassification
from bertkit.models.bert.modeling import BertModel, BertSelfAttention
from bertkit.models.checkpoint import CheckpointError
from bertkit.models.functional import attention
from bertkit.models.gpt.configuration import GPT2Config
from bertkit.models.gpt.modeling import GPT2LMHeadModel
from bertkit.models.seq2seq.configuration import Seq2SeqConfig
from bertkit.models.seq2seq.transformer import build_seq2seq
from tolerance import assert_close

BERT = dict(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=20, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def families():
    seq2seq = dict(vocab_size=30, d_model=16, encoder_layers=1, decoder_layers=1, attention_heads=2, ffn_dim=32,
                   share_encoder_decoder_embeddings=True)
    return {
        "BertForPreTraining": lambda: BertForPreTraining(BertConfig(**BERT)),
        "BertModel": lambda: BertModel(BertConfig(**BERT)),
        "GPT2LMHeadModel": lambda: GPT2LMHeadModel(GPT2Config(vocab_size=40, n_positions=16, n_embd=16, n_layer=2,
                                                              n_head=2, bos_token_id=1, eos_token_id=2)),
        "Seq2SeqTransformer": lambda: build_seq2seq(Seq2SeqConfig(**seq2seq)),
        "RNNSeq2Seq": lambda: build_seq2seq(Seq2SeqConfig(architecture="rnn", **seq2seq)),
    }


@pytest.mark.parametrize("name", families())
def test_ties_are_one_tensor_stored_once_and_saving_changes_nothing(tmp_path, name):
    torch.manual_seed(0)
    model = families()[name]()
    tied = model.tied_weights()
    assert bool(tied) == (name != "BertModel")
    assert all(model.get_parameter(a) is model.get_parameter(b) for a, b in tied.items())
    before = json.dumps(model.config.to_dict(), sort_keys=True)
    model.save_pretrained(tmp_path)
    assert json.dumps(model.config.to_dict(), sort_keys=True) == before   # no side effect on the config
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == [type(model).__name__]
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert set(f.keys()) == set(model.state_dict()) - set(tied)
    loaded = type(model).from_pretrained(tmp_path)
    assert all(loaded.get_parameter(a) is loaded.get_parameter(b) for a, b in tied.items())
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in loaded.state_dict().items())


def test_load_weights_copies_into_the_same_parameters(tmp_path):
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(**BERT)).save_pretrained(tmp_path)
    torch.manual_seed(1)
    model = BertForSequenceClassification(BertConfig(**BERT))
    params = dict(model.named_parameters())
    assert model.load_weights(tmp_path, allow_fresh_head=False) == []
    assert all(p is params[n] for n, p in model.named_parameters())
    saved = BertForSequenceClassification.from_pretrained(tmp_path)
    assert all(torch.equal(v, saved.state_dict()[k]) for k, v in model.state_dict().items())


def test_a_missing_head_is_fresh_on_load_but_an_error_on_resume(tmp_path):
    torch.manual_seed(0)
    BertModel(BertConfig(**BERT)).save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="classifier.bias, classifier.weight; initialised fresh"):
        BertForSequenceClassification.from_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="missing:    classifier.weight"):
        BertForSequenceClassification(BertConfig(**BERT)).load_weights(tmp_path, allow_fresh_head=False)


def test_value_checks_follow_the_switch_shape_checks_always_run():
    torch.manual_seed(0)
    model = BertForTokenClassification(BertConfig(**BERT, id2label={0: "O", 1: "B"}))
    ids, labels = torch.tensor([[1, 2, 3]]), torch.tensor([[0, 1, 2]])
    with pytest.raises(ValueError, match=r"input_ids must be in \[0, 40\)"):
        model(ids + 40)
    with pytest.raises(ValueError, match=r"label ids must be in \[0, 2\)"):
        model(ids, labels=labels)
    model.validate_inputs = False
    with pytest.raises(IndexError):  # no reading back: the embedding lookup fails by itself
        model(ids + 40)
    with pytest.raises(IndexError):  # torch's cross-entropy, not our message
        model(ids, labels=labels)
    with pytest.raises(ValueError, match="attention_mask has shape"):
        model(ids, attention_mask=torch.ones(1, 4))
    assert not BertModel(BertConfig(**BERT)).checks_values(torch.empty(2, device="meta"))


def test_padding_bias_reads_the_mask_only_on_the_cpu():
    model = BertModel(BertConfig(**BERT))
    assert model.padding_bias(torch.ones(2, 3), torch.float32) is None            # nothing padded: no mask
    assert model.padding_bias(torch.tensor([[1, 0]]), torch.float32).shape == (1, 1, 1, 2)
    on_meta = model.padding_bias(torch.ones(2, 3, device="meta"), torch.float32)  # cannot look: build the bias
    assert on_meta.shape == (2, 1, 1, 3)


# ---- BertSelfAttention's Q/K/V ---------------------------------------------------------------------

def _reference(m: BertSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """Q, K and V from one stacked (C -> 3C) projection, then the explicit attention maths."""
    B, T, C = x.shape
    weight = torch.cat([m.query.weight, m.key.weight, m.value.weight])
    bias = torch.cat([m.query.bias, m.key.bias, m.value.bias])
    q, k, v = F.linear(x, weight, bias).view(B, T, 3, m.num_heads, m.head_dim).permute(2, 0, 3, 1, 4)
    return attention(q, k, v)[0].transpose(1, 2).reshape(B, T, C)


def _attention_module() -> BertSelfAttention:
    torch.manual_seed(0)
    m = BertSelfAttention(BertConfig(**BERT))
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(std=0.2)
    return m


def test_qkv_outputs_and_gradients_equal_the_stacked_projection():
    m = _attention_module().train()
    x = torch.randn(2, 5, 16, requires_grad=True)
    m(x, None, False)[0].pow(2).sum().backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters()} | {"x": x.grad.clone()}
    m.zero_grad()
    x.grad = None
    _reference(m, x).pow(2).sum().backward()
    for name, p in list(m.named_parameters()) + [("x", x)]:
        assert_close(grads[name], p.grad, msg=name)


@pytest.mark.parametrize("change", ["in-place edit", "fused adamw step", "write through .data", "load_state_dict"])
def test_inference_follows_every_change_of_the_weights(change):
    """No copy of the weights is kept between calls: changes that do not bump a tensor's version counter
    (torch's fused AdamW, writes through `.data`) are seen as surely as the others."""
    m = _attention_module().eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        before = m(x, None, False)[0]
    if change == "in-place edit":
        with torch.no_grad():
            m.value.bias.add_(1.0)
    elif change == "write through .data":
        m.query.weight.data.mul_(-1.0)
    elif change == "load_state_dict":
        m.load_state_dict({k: v + 0.5 for k, v in m.state_dict().items()})
    else:
        for p in m.parameters():
            p.grad = torch.randn_like(p)
        torch.optim.AdamW(m.parameters(), lr=0.1, fused=True).step()
    with torch.no_grad():
        after = m(x, None, False)[0]
    assert not torch.allclose(after, before)
    assert_close(after, _reference(m, x))
