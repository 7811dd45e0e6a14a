"""The scale-aware parity comparison (tests/tolerance.py): it lets CPU rounding pass and still catches a model
that is slightly wrong, on the suite's own parity cases."""

import numpy as np
import pytest
import torch
import transformers

from bertkit.models.bert.modeling import BertModel
from bertkit.models.vit.configuration import ViTConfig
from bertkit.models.vit.modeling import ViTModel
from test_bert_parity import CONFIGS as BERT_CONFIGS
from test_bert_parity import hf_model, padded_batch
from test_vit_parity import CONFIGS as VIT_CONFIGS
from test_vit_parity import _assert_agree, _hf_config
from tolerance import allowed_difference, assert_close
from weights import randomise

FAILED = r"max \|actual - expected\|"  # how the helper's own failures begin


# ---- the helper ------------------------------------------------------------------------------------

def _activations(magnitude: float, seed: int = 0) -> torch.Tensor:
    """(3, 50, 24) fp32 values whose largest magnitude is exactly `magnitude`."""
    x = torch.randn(3, 50, 24, generator=torch.Generator().manual_seed(seed))
    return x / x.abs().max() * magnitude


def test_rounding_of_one_part_in_a_million_passes_at_magnitude_11():
    expected = _activations(11.0)
    actual = expected * (1 + 1e-6)                   # what another CPU's matmul kernels give, at most
    assert float((actual - expected).abs().max()) > 1e-5  # an absolute 1e-5 would call this a failure
    assert_close(actual, expected)
    # the difference the AMX machine reported: 1.049e-5 on activations of magnitude ~11
    reported = expected.clone()
    reported.view(-1)[int(expected.abs().argmax())] += 1.049e-5
    assert_close(reported, expected)


def test_a_defect_of_1e_3_fails_at_magnitude_11():
    expected = _activations(11.0)
    actual = expected.clone()
    actual[1, 7, 3] += 1e-3                          # one value off by 1e-3, its neighbours untouched
    with pytest.raises(AssertionError, match=FAILED) as failure:
        assert_close(actual, expected, msg="hidden states")
    message = str(failure.value)
    for part in ("hidden states: max |actual - expected| = ", "at index (1, 7, 3)", "allowed 0.00011", "scale 11"):
        assert part in message, message


def test_below_magnitude_1_the_bound_is_the_absolute_1e_5():
    expected = _activations(0.5)
    assert allowed_difference(0.5) == allowed_difference(0.0) == 1e-5
    for bump, passes in ((0.9e-5, True), (1.1e-5, False)):
        actual = expected.clone()
        actual[0, 0, 0] += bump
        if passes:
            assert_close(actual, expected)
        else:
            with pytest.raises(AssertionError, match=FAILED):
                assert_close(actual, expected)


def test_the_scale_is_the_references_whole_tensor():
    expected = _activations(11.0)
    expected[2, 0, 0] = 0.0                          # an output near zero carries its neighbours' rounding
    actual = expected.clone()
    actual[2, 0, 0] = 5e-5                           # within 1e-5 x 11, though far from 0 relatively
    assert_close(actual, expected)
    # a wrong `actual` cannot widen its own bound: the scale is the reference's
    small = _activations(1.0)
    wrong = small.clone()
    wrong[0, 0, 0] = 100.0
    with pytest.raises(AssertionError, match=r"scale 1\b"):
        assert_close(wrong, small)


def test_numpy_arrays_numbers_and_other_tolerances():
    expected = _activations(20.0).numpy()
    assert_close(torch.from_numpy(expected) * (1 + 5e-7), expected)           # a tensor against an array
    assert_close(np.float32(4.2) * (1 + 1e-6), torch.tensor(4.2))           # a loss, a number
    grads = expected * (1 + 5e-5)
    assert_close(grads, expected, rtol=1e-4)                                 # the gradient bar, 1e-4
    with pytest.raises(AssertionError, match=FAILED):
        assert_close(grads, expected)


def test_shapes_and_non_finite_values_must_match():
    x = torch.ones(2, 3)
    with pytest.raises(AssertionError, match="shapes differ"):
        assert_close(x, torch.ones(3, 2))
    with pytest.raises(AssertionError, match="shapes differ"):
        assert_close(torch.ones(1, 3), x)          # no broadcasting
    nan = x.clone()
    nan[0, 1] = float("nan")
    with pytest.raises(AssertionError, match="non-finite"):
        assert_close(nan, x)
    with pytest.raises(AssertionError, match="non-finite"):
        assert_close(x, nan)
    inf = x.clone()
    inf[1, 2] = -float("inf")
    assert_close(inf.clone(), inf)
    with pytest.raises(AssertionError, match="non-finite"):
        assert_close(-inf, inf)
    assert_close(torch.empty(0, 4), torch.empty(0, 4))


# ---- on the suite's parity cases: one weight slightly off is caught --------------------------------

def _perturb(model: torch.nn.Module, name: str) -> None:
    """A LayerNorm gain scaled by 1.001, or one element of a weight matrix moved by 1e-3."""
    p = dict(model.named_parameters())[name]
    with torch.no_grad():
        if p.dim() == 1:
            p.mul_(1.001)
        else:
            p[0, 0] += 1e-3


@pytest.fixture(scope="module")
def vit_directory(tmp_path_factory):
    """test_vit_parity's "mnist-p4-relu" case, the one whose hidden states reach magnitude ~19."""
    config = ViTConfig(**VIT_CONFIGS["mnist-p4-relu"])
    theirs = randomise(transformers.ViTModel(_hf_config(config), add_pooling_layer=True), seed=3)
    path = tmp_path_factory.mktemp("vit")
    theirs.save_pretrained(path)
    return config, theirs, path


@pytest.mark.parametrize("name", [None, "encoder.layer.2.attention.attention.value.weight",
                                  "encoder.layer.2.output.dense.weight", "encoder.layer.2.layernorm_after.weight"])
def test_vit_parity_catches_one_weight_slightly_off(vit_directory, name):
    config, theirs, path = vit_directory
    ours = ViTModel.from_pretrained(path).eval()
    if name is None:                                   # the model as loaded agrees
        _assert_agree(ours, theirs, config, classifier=False)
        return
    _perturb(ours, name)
    with pytest.raises(AssertionError, match=FAILED):
        _assert_agree(ours, theirs, config, classifier=False)


@pytest.fixture(scope="module")
def bert_directory(tmp_path_factory):
    """test_bert_parity's first config: transformers' BERT with its LayerNorms and biases moved off 1 and 0."""
    theirs = hf_model(0, **BERT_CONFIGS[0])
    path = tmp_path_factory.mktemp("bert")
    theirs.save_pretrained(path)
    return theirs, path


def _assert_bert_agrees(ours, theirs) -> None:
    """test_bert_parity's comparisons: hidden states of the real tokens (both attention paths), pooled vectors."""
    ids, mask, types = padded_batch(0)
    keep = mask.bool()
    with torch.no_grad():
        ref = theirs(ids, attention_mask=mask, token_type_ids=types)
        out = ours(ids, attention_mask=mask, token_type_ids=types, output_attentions=True)
        fast = ours(ids, attention_mask=mask, token_type_ids=types)
    assert_close(out.last_hidden_state[keep], ref.last_hidden_state[keep], msg="last_hidden_state")
    assert_close(fast.last_hidden_state[keep], ref.last_hidden_state[keep], msg="last_hidden_state, fused")
    assert_close(out.pooler_output, ref.pooler_output, msg="pooler_output")


@pytest.mark.parametrize("name", [None, "encoder.layer.1.attention.output.dense.weight",
                                  "encoder.layer.1.output.dense.weight",
                                  "encoder.layer.1.attention.output.LayerNorm.weight"])
def test_bert_parity_catches_one_weight_slightly_off(bert_directory, name):
    theirs, path = bert_directory
    ours = BertModel.from_pretrained(path)
    if name is None:
        _assert_bert_agrees(ours, theirs)
        return
    _perturb(ours, name)
    with pytest.raises(AssertionError, match=FAILED):
        _assert_bert_agrees(ours, theirs)
