"""BertForQuestionAnswering against transformers: logits, loss and gradients on random configs, directories both
ways, transformers' loss semantics for positions outside the input."""

import json

import pytest
import torch
import transformers

from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForQuestionAnswering, model_class_for
from bertkit.models.configuration import ConfigError
from bertkit.models.pretrained import span_loss
from bertkit.models.registry import family_for
from tolerance import assert_close
from weights import randomise

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIGS = [
    dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
         max_position_embeddings=64),
    dict(vocab_size=211, hidden_size=48, num_hidden_layers=3, num_attention_heads=6, intermediate_size=96,
         max_position_embeddings=40, hidden_act="gelu_new", layer_norm_eps=1e-7, type_vocab_size=3),
    dict(vocab_size=57, hidden_size=24, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24,
         max_position_embeddings=32, hidden_act="relu"),
]
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def batch(config: dict, seed: int, B: int = 4, T: int = 17):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, config["vocab_size"], (B, T), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    mask[3, 6:] = 0
    types = (torch.arange(T) >= 7).long().expand(B, T) * mask
    return ids * mask, mask, types


@pytest.mark.parametrize("n", range(len(CONFIGS)))
def test_logits_match_transformers_both_ways(tmp_path, n):
    config = {**CONFIGS[n], **NO_DROPOUT}
    torch.manual_seed(n)
    hf = randomise(transformers.BertForQuestionAnswering(transformers.BertConfig(**config)), seed=n)
    hf.save_pretrained(tmp_path / "hf")
    ours = BertForQuestionAnswering.from_pretrained(tmp_path / "hf")  # no warning: the head is there
    assert ours.loaded_but_unused == []
    ids, mask, types = batch(config, n)
    with torch.no_grad():
        a = ours(ids, mask, types)
        b = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
    keep = mask.bool()
    assert_close(a.start_logits[keep], b.start_logits[keep], msg="start_logits")
    assert_close(a.end_logits[keep], b.end_logits[keep], msg="end_logits")
    assert a.start_logits.shape == a.end_logits.shape == ids.shape

    ours.save_pretrained(tmp_path / "ours")                           # and back: transformers reads ours
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["architectures"] == ["BertForQuestionAnswering"]
    back = transformers.BertForQuestionAnswering.from_pretrained(tmp_path / "ours").eval()
    with torch.no_grad():
        c = back(input_ids=ids, attention_mask=mask, token_type_ids=types)
    # the parity bound: at inference bertkit pads attention keys to whole blocks of 16 (a text's vector must not
    # depend on its batch), which rounds a few ulps apart from transformers' kernel on the same weights
    assert_close(c.start_logits[keep], a.start_logits[keep], rtol=1e-5)
    assert_close(c.end_logits[keep], a.end_logits[keep], rtol=1e-5)


@pytest.mark.parametrize("starts, ends", [
    ([0, 5, 9, 16], [0, 8, 12, 16]),            # inside the input; 0 is [CLS] (no answer here)
    ([-3, 5, 40, 17], [2, -1, 41, 16]),        # negative -> 0; at or past the length -> left out of its term
    ([[3], [0], [20], [1]], [[4], [2], [3], [30]]),  # (B, 1) as a data-parallel gather gives them
])
def test_loss_and_gradients_match_transformers(tmp_path, starts, ends):
    config = {**CONFIGS[0], **NO_DROPOUT}
    torch.manual_seed(7)
    hf = randomise(transformers.BertForQuestionAnswering(transformers.BertConfig(**config)), seed=7).train()
    hf.save_pretrained(tmp_path)
    ours = BertForQuestionAnswering.from_pretrained(tmp_path).train()
    ids, mask, types = batch(config, 7)
    starts, ends = torch.tensor(starts), torch.tensor(ends)
    a = ours(ids, mask, types, start_positions=starts, end_positions=ends)
    b = hf(input_ids=ids, attention_mask=mask, token_type_ids=types, start_positions=starts, end_positions=ends)
    assert_close(a.loss, b.loss, msg="loss")
    a.loss.backward()
    b.loss.backward()
    theirs = dict(hf.named_parameters())
    for name, p in ours.named_parameters():
        assert_close(p.grad, theirs[name].grad, rtol=1e-4, msg=name)


def test_the_loss_is_the_mean_of_two_cross_entropies_and_ignores_positions_past_the_input():
    start_logits = torch.tensor([[2.0, 0.5, -1.0, 0.0]])
    end_logits = torch.tensor([[0.0, 1.0, 3.0, -2.0]])
    log_p_start, log_p_end = start_logits.log_softmax(-1), end_logits.log_softmax(-1)
    loss = span_loss(start_logits, end_logits, torch.tensor([1]), torch.tensor([2]))
    assert_close(loss, -(log_p_start[0, 1] + log_p_end[0, 2]) / 2)
    # a negative position counts as 0; one at or past the input (4 of 4 tokens, 9) drops out of its term, which is
    # the mean over the rest (over nothing it is NaN, as in transformers; bertkit's windows label inside the window)
    both = torch.tensor([[0.1, 0.2, 0.3, 0.4], [1.0, -1.0, 0.0, 0.5]])
    loss = span_loss(both, both, torch.tensor([3, -2]), torch.tensor([9, 1]))
    expected_start = -(both.log_softmax(-1)[0, 3] + both.log_softmax(-1)[1, 0]) / 2
    expected_end = -both.log_softmax(-1)[1, 1]
    assert_close(loss, (expected_start + expected_end) / 2)


def test_a_qa_directory_is_chosen_by_its_architecture_and_registered_as_the_qa_head(tmp_path):
    config = BertConfig(**CONFIGS[0], qa={"max_length": 48, "doc_stride": 8, "max_answer_length": 5,
                                          "impossible": True})
    BertForQuestionAnswering(config).save_pretrained(tmp_path)
    loaded = BertConfig.from_pretrained(tmp_path)
    assert model_class_for(loaded) is BertForQuestionAnswering
    assert loaded.qa == {"max_length": 48, "doc_stride": 8, "max_answer_length": 5, "impossible": True}
    assert family_for("bert").head("qa") is BertForQuestionAnswering
    assert isinstance(family_for("bert").load(tmp_path), BertForQuestionAnswering)


def test_a_head_of_other_than_two_outputs_and_a_malformed_qa_setting_are_refused():
    with pytest.raises(ConfigError, match="2 outputs .* 3 labels"):
        BertForQuestionAnswering(BertConfig(**CONFIGS[0], id2label={0: "a", 1: "b", 2: "c"}))
    with pytest.raises(ConfigError, match="qa must be a dict"):
        BertConfig(**CONFIGS[0], qa={"stride": 3})


def test_an_encoder_checkpoint_loads_with_a_fresh_head_and_a_warning(tmp_path):
    transformers.BertModel(transformers.BertConfig(**CONFIGS[0])).save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="no weights for qa_outputs.bias, qa_outputs.weight"):
        BertForQuestionAnswering.from_pretrained(tmp_path)
