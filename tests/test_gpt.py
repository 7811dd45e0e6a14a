"""GPT: the causal mask, the shifted next-token loss, padding, save/load, and a pattern learnt and continued."""

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open

from bertkit.models.configuration import ConfigError
from bertkit.models.gpt.configuration import GPT2Config
from bertkit.models.gpt.modeling import GPT2LMHeadModel
from tolerance import assert_close

VARIANTS = {
    "gpt2": dict(),
    "gpt1-post-ln-sinusoidal": dict(normalize_before=False, position_embedding_type="sinusoidal"),
    "untied-relu": dict(tie_word_embeddings=False, activation_function="relu", n_inner=24),
}


def tiny(name: str = "gpt2", **overrides) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    kw = dict(vocab_size=40, n_embd=16, n_layer=2, n_head=4, n_positions=32, pad_token_id=0, bos_token_id=2,
              eos_token_id=3)
    kw.update(VARIANTS[name])
    kw.update(overrides)
    return GPT2LMHeadModel(GPT2Config(**kw)).eval()


@pytest.mark.parametrize("name", VARIANTS)
def test_position_t_is_independent_of_inputs_after_t(name):
    model = tiny(name)
    ids = torch.randint(0, 40, (2, 10))
    base = model(ids).logits
    for t in range(9):
        changed = ids.clone()
        changed[:, t + 1:] = (changed[:, t + 1:] + 1 + torch.randint(0, 38, changed[:, t + 1:].shape)) % 40
        logits = model(changed).logits
        torch.testing.assert_close(logits[:, : t + 1], base[:, : t + 1], atol=1e-6, rtol=0)
        assert not torch.allclose(logits[:, t + 1], base[:, t + 1])


def test_gradient_of_position_t_reaches_only_inputs_up_to_t():
    model = tiny()
    ids = torch.randint(0, 40, (1, 8))
    inputs = model.transformer.wte(ids).detach().requires_grad_()
    model.transformer.wte.forward = lambda _: inputs                 # feed the leaf tensor in place of the lookup
    t = 4
    model(ids).logits[0, t].sum().backward()
    grad = inputs.grad[0].abs().sum(-1)
    assert (grad[t + 1:] == 0).all() and (grad[: t + 1] > 0).all()


@pytest.mark.parametrize("name", VARIANTS)
def test_loss_is_next_token_cross_entropy(name):
    model = tiny(name)
    ids = torch.randint(0, 40, (3, 9))
    labels = ids.clone()
    labels[2, 6:] = -100
    out = model(ids, labels=labels)
    expected = F.cross_entropy(out.logits[:, :-1].reshape(-1, 40), labels[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, expected)


def test_right_padding_with_attention_mask_changes_nothing():
    model = tiny()
    ids = torch.randint(1, 40, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    logits = model(ids * mask, attention_mask=mask).logits
    assert_close(logits[1:, :4], model(ids[1:, :4]).logits)
    assert_close(logits[:1], model(ids[:1]).logits)


@pytest.mark.parametrize("name", VARIANTS)
def test_save_and_load_round_trip(tmp_path, name):
    model = tiny(name)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    model.save_pretrained(tmp_path)
    loaded = GPT2LMHeadModel.from_pretrained(tmp_path)
    assert loaded.config == model.config
    ids = torch.randint(0, 40, (2, 9))
    assert_close(loaded(ids).logits, model(ids).logits)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert set(f.keys()) == set(model.state_dict()) - set(model.tied_weights())
    assert (loaded.lm_head.weight is loaded.transformer.wte.weight) == model.config.tie_word_embeddings


def test_config_and_input_errors():
    with pytest.raises(ConfigError, match="divisible"):
        GPT2Config(n_embd=30, n_head=4)
    with pytest.raises(ConfigError, match="position_embedding_type"):
        GPT2Config(position_embedding_type="rotary")
    model = tiny()
    with pytest.raises(ValueError, match="positions"):
        model(torch.zeros(1, 33, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[0, 40\)"):
        model(torch.full((1, 3), 40))


def test_learns_a_pattern_and_generation_continues_it():
    """Counting modulo 10 from a random start: a few seconds of training, then greedy generation counts on."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = tiny(n_embd=32, n_positions=24).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        g = torch.Generator().manual_seed(0)
        for _ in range(150):
            ids = (torch.randint(0, 10, (32, 1), generator=g) + torch.arange(16)) % 10 + 3
            loss = model(ids, labels=ids).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        prompt = torch.tensor([[7, 8, 9]])                        # 4, 5, 6 counted by 10 from offset 3
        out = model.generate(prompt, max_new_tokens=12, eos_token_id=None)
        assert out[0].tolist() == [7, 8, 9, 10, 11, 12, 3, 4, 5, 6, 7, 8, 9, 10, 11]
        sampled = model.generate(prompt, max_new_tokens=5, do_sample=True, top_k=1, eos_token_id=None)
        assert torch.equal(sampled, out[:, :8])
    finally:
        torch.set_num_threads(threads)
