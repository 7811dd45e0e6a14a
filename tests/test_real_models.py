"""The real checkpoints (m3e-small, Chinese; all-MiniLM-L6-v2, English) load strictly and match transformers."""

import pytest
import torch
import transformers

from bertkit.models.bert.modeling import BertModel
from bertkit.models.reference import NumpyBert
from conftest import model_dir_or_skip
from tolerance import assert_close

SENTENCES = {
    "m3e-small": ["今天天气很好，我们去公园散步吧。", "北京是中华人民共和国的首都。", "这家店的服务太差了", "好"],
    "all-MiniLM-L6-v2": ["BERT reads a sentence in both directions at once.", "Hello, world!",
                         "The quick brown fox jumps over the lazy dog near the riverbank.", "ok"],
}
# The first six values of the [CLS] vector of the first sentence alone, recorded from transformers 5.23.
GOLDEN_CLS = {"m3e-small": [-0.404, -0.3271, -0.125, 0.4109, -0.595, -0.0484],
              "all-MiniLM-L6-v2": [-0.3321, -0.2776, 0.3188, -0.1143, -0.0314, 0.3732]}


@pytest.mark.network
@pytest.mark.parametrize("name", ["m3e-small", "all-MiniLM-L6-v2"])
def test_real_model_matches_transformers(name):
    path = model_dir_or_skip(name)
    tok = transformers.AutoTokenizer.from_pretrained(path)
    enc = tok(SENTENCES[name], padding=True, return_tensors="pt")
    assert enc["attention_mask"].sum(1).min() < enc["attention_mask"].shape[1]  # a padded batch
    hf = transformers.BertModel.from_pretrained(path, attn_implementation="eager").eval()
    ours = BertModel.from_pretrained(path)
    assert ours.loaded_but_unused == []
    keep = enc["attention_mask"].bool()
    with torch.no_grad():
        ref = hf(**enc, output_attentions=True)
        out = ours(**enc, output_attentions=True)
        fast = ours(**enc)
    for got in (out, fast):
        assert_close(got.last_hidden_state[keep], ref.last_hidden_state[keep], msg="last_hidden_state")
        assert_close(got.pooler_output, ref.pooler_output, msg="pooler_output")
    for a, b in zip(out.attentions, ref.attentions):  # probabilities: magnitude at most 1, an absolute bound
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)

    seq, pooled = NumpyBert.from_pretrained(path)(*(enc[k].numpy() for k in
                                                    ("input_ids", "attention_mask", "token_type_ids")))
    assert_close(seq[keep.numpy()], ref.last_hidden_state[keep], msg="NumpyBert last_hidden_state")
    assert_close(pooled, ref.pooler_output, msg="NumpyBert pooler_output")


@pytest.mark.network
@pytest.mark.parametrize("name", ["m3e-small", "all-MiniLM-L6-v2"])
def test_golden_slice(name):
    path = model_dir_or_skip(name)
    ids = transformers.AutoTokenizer.from_pretrained(path)(SENTENCES[name][0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        cls = BertModel.from_pretrained(path)(ids).last_hidden_state[0, 0, :6]
    torch.testing.assert_close(cls, torch.tensor(GOLDEN_CLS[name]), atol=1e-4, rtol=0)
