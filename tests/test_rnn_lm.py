"""The recurrent language model: one pass equals step-by-step decoding, tied or untied output, save and load,
generation, and its options' checks."""

from __future__ import annotations

import pytest
import torch

from bertkit.models.configuration import ConfigError
from bertkit.models.rnn_lm.configuration import RNNLMConfig
from bertkit.models.rnn_lm.modeling import RNNForCausalLM
from tolerance import assert_close

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(**overrides) -> RNNForCausalLM:
    torch.manual_seed(0)
    return RNNForCausalLM(RNNLMConfig(**{"vocab_size": 30, "hidden_size": 12, "dropout": 0.0, **overrides})).eval()


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
def test_the_state_carries_the_prefix_and_the_loss_is_next_token_cross_entropy(cell):
    model = tiny(rnn_cell=cell)
    ids = torch.randint(4, 30, (2, 9))
    out = model(ids, labels=ids)
    first = model(ids[:, :5])
    rest = model(ids[:, 5:], state=first.past_key_values)                  # continue from the state after 5 tokens
    assert_close(torch.cat([first.logits, rest.logits], dim=1), out.logits)
    expected = torch.nn.functional.cross_entropy(out.logits[:, :-1].reshape(-1, 30), ids[:, 1:].reshape(-1))
    assert_close(out.loss, expected)


def test_greedy_generation_is_the_argmax_of_one_pass_and_beams_keep_their_states():
    model = tiny(rnn_cell="lstm")
    prompt = torch.tensor([[2, 7, 9]])
    generated = model.generate(prompt, max_new_tokens=6, eos_token_id=None)
    assert generated.shape == (1, 9) and torch.equal(generated[:, :3], prompt)
    logits = model(generated).logits[0, 2:-1]                              # each generated token from its prefix
    assert torch.equal(logits.argmax(-1), generated[0, 3:])
    beams = model.generate(prompt, max_new_tokens=6, num_beams=3, eos_token_id=None)
    log_p = lambda ids: model(ids).logits[0, 2:-1].log_softmax(-1).gather(1, ids[0, 3:, None]).sum()
    assert log_p(beams) >= log_p(generated) - 1e-5                           # beam search finds one at least as likely


def test_tied_and_untied_outputs_save_and_load(tmp_path):
    tied, untied = tiny(), tiny(tie_word_embeddings=False, rnn_cell="gru", gru_variant="tutorial")
    assert tied.lm_head.weight is tied.embeddings.weight
    assert untied.lm_head.weight is not untied.embeddings.weight
    assert tiny(tie_word_embeddings=False).num_parameters() == tied.num_parameters() + 30 * 12
    ids = torch.randint(0, 30, (2, 6))
    for name, model in (("tied", tied), ("untied", untied)):
        model.save_pretrained(tmp_path / name)
        loaded = RNNForCausalLM.from_pretrained(tmp_path / name)
        assert loaded.config == model.config
        assert torch.equal(loaded(ids).logits, model(ids).logits)
    assert RNNForCausalLM.from_pretrained(tmp_path / "untied").rnn.variant == "tutorial"


def test_bad_configs_are_clear_errors():
    with pytest.raises(ConfigError, match="rnn_cell 'transformer' is not one of rnn, lstm, gru"):
        RNNLMConfig(rnn_cell="transformer")
    with pytest.raises(ConfigError, match="gru_variant 'cho' is not one of torch, tutorial"):
        RNNLMConfig(gru_variant="cho")
    with pytest.raises(ValueError, match="input_ids"):
        tiny()(torch.tensor([[1, 30]]))
