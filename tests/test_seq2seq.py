"""The encoder–decoder Transformer and the RNN encoder–decoders: masks, loss, padding, save/load, a task learnt."""

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open

from bertkit.models.checkpoint import CheckpointError
from bertkit.models.configuration import ConfigError
from bertkit.models.functional import sinusoidal_positions
from bertkit.models.seq2seq.configuration import Seq2SeqConfig
from bertkit.models.seq2seq.layers import TransformerLayer
from bertkit.models.seq2seq.rnn import RNNSeq2Seq
from bertkit.models.seq2seq.transformer import Seq2SeqTransformer, build_seq2seq, load_seq2seq
from tolerance import assert_close

PAD, EOS, BOS = 0, 1, 2
VARIANTS = {
    "post-ln": dict(),
    "pre-ln-shared": dict(normalize_before=True, share_encoder_decoder_embeddings=True, decoder_vocab_size=None),
    "untied": dict(tie_word_embeddings=False, scale_embedding=False),
    "gru-attention": dict(architecture="rnn"),
    "gru": dict(architecture="rnn", rnn_attention=False),
    "gru-tutorial-dot": dict(architecture="rnn", gru_variant="tutorial", attention_score="dot"),
    "lstm-attention-2x2": dict(architecture="rnn", rnn_cell="lstm"),
    "rnn-shared": dict(architecture="rnn", rnn_cell="rnn", share_encoder_decoder_embeddings=True,
                       decoder_vocab_size=None, encoder_layers=1, decoder_layers=1),
}


def tiny(name: str = "post-ln", **overrides):
    torch.manual_seed(0)
    kw = dict(vocab_size=30, decoder_vocab_size=25, d_model=16, encoder_layers=2, decoder_layers=2, attention_heads=4,
              ffn_dim=32, max_position_embeddings=40, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)
    kw.update(VARIANTS[name])
    kw.update(overrides)
    return build_seq2seq(Seq2SeqConfig(**kw)).eval()


def batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 25, (3, 7), generator=g)
    mask = torch.ones_like(src)
    mask[1, 4:] = 0
    mask[2, 6:] = 0
    labels = torch.randint(3, 25, (3, 6), generator=g)
    labels[0, 5:] = -100
    return src * mask, mask, labels


@pytest.mark.parametrize("name", VARIANTS)
def test_loss_is_label_smoothed_cross_entropy_of_shifted_targets(name):
    model = tiny(name, label_smoothing=0.1)
    src, mask, labels = batch()
    out = model(src, mask, labels=labels)
    decoder_inputs = torch.cat([torch.full((3, 1), BOS), labels[:, :-1].clamp(min=0)], dim=1)
    assert torch.equal(model(src, mask, decoder_input_ids=decoder_inputs).logits, out.logits)
    logp = out.logits.log_softmax(-1)
    keep = labels != -100
    nll = -logp.gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1)
    expected = (0.9 * nll - 0.1 * logp.mean(-1))[keep].mean()               # (1-ε)·NLL + ε·uniform CE
    assert_close(out.loss, expected)
    assert out.logits.shape == (3, 6, model.config.target_vocab_size)


@pytest.mark.parametrize("name", VARIANTS)
def test_position_t_is_independent_of_targets_after_t(name):
    model = tiny(name)
    src, mask, labels = batch()
    dec = labels.clamp(min=3)
    base = model(src, mask, decoder_input_ids=dec).logits
    for t in range(dec.size(1) - 1):
        changed = dec.clone()
        changed[:, t + 1:] = torch.randint(3, 25, changed[:, t + 1:].shape)
        logits = model(src, mask, decoder_input_ids=changed).logits
        torch.testing.assert_close(logits[:, : t + 1], base[:, : t + 1], atol=1e-6, rtol=0)
        assert not torch.allclose(logits[:, t + 1:], base[:, t + 1:])        # later positions do see them


def test_causal_mask_zero_gradient_from_the_future():
    """∂ logits[t] / ∂ decoder input embedding[t'] = 0 for t' > t, and ≠ 0 for t' ≤ t."""
    model = tiny("post-ln")
    src, mask, labels = batch()
    memory, memory_bias, _ = model.encode(src, mask)
    embedded = {}

    def keep(module, inputs, output):
        output.retain_grad()
        embedded["x"] = output

    handle = model.decoder.embed.register_forward_hook(keep)
    logits = model.lm_head(model.decode(labels.clamp(min=3), memory, memory_bias)[0])
    handle.remove()
    t = 2
    logits[:, t].sum().backward()
    grad = embedded["x"].grad.abs().sum(-1)                                  # (B, T)
    assert (grad[:, t + 1:] == 0).all() and (grad[:, : t + 1] > 0).all()


@pytest.mark.parametrize("name", VARIANTS)
def test_source_padding_changes_nothing(name):
    model = tiny(name)
    src, mask, labels = batch()
    dec = labels.clamp(min=3)
    padded = model(src, mask, decoder_input_ids=dec).logits
    for i in range(3):
        n = int(mask[i].sum())
        alone = model(src[i:i + 1, :n], decoder_input_ids=dec[i:i + 1]).logits
        assert_close(padded[i:i + 1], alone, msg=f"row {i}")


def test_attention_probabilities_and_positions():
    model = tiny("post-ln")
    src, mask, labels = batch()
    out = model(src, mask, labels=labels, output_attentions=True)
    assert len(out.encoder_attentions) == len(out.decoder_attentions) == len(out.cross_attentions) == 2
    cross = out.cross_attentions[0]                                          # (B, H, T, S)
    assert cross.shape == (3, 4, 6, 7)
    torch.testing.assert_close(cross.sum(-1), torch.ones(3, 4, 6))
    assert cross[1, :, :, 4:].max() < 1e-6                                   # no weight on source padding
    assert out.decoder_attentions[0][0, :, 2, 3:].max() == 0                 # nor on future targets
    embed = model.decoder.embed
    ids = torch.tensor([[5, 5, 5]])
    x = embed(ids) - embed.embed_tokens(ids) * math.sqrt(16)
    torch.testing.assert_close(x[0], sinusoidal_positions(40, 16)[:3])      # E·√d + PE


@pytest.mark.parametrize("name", VARIANTS)
def test_save_and_load_round_trip(tmp_path, name):
    model = tiny(name)
    with torch.no_grad():                     # move every parameter away from its initial value
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    model.save_pretrained(tmp_path)
    loaded = load_seq2seq(tmp_path)
    assert type(loaded) is type(model) and loaded.config == model.config
    src, mask, labels = batch()
    assert_close(loaded(src, mask, labels=labels).logits, model(src, mask, labels=labels).logits)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        stored = set(f.keys())
    assert stored == set(model.state_dict()) - set(model.tied_weights())      # each tensor once
    if model.config.tie_word_embeddings:
        assert loaded.lm_head.weight is (loaded.target_embeddings.weight if isinstance(loaded, RNNSeq2Seq)
                                         else loaded.decoder.embed_tokens.weight)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "bertkit-seq2seq"


def test_loading_weights_of_another_config_names_the_problem(tmp_path):
    tiny("post-ln").save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(dict(config, d_model=32, ffn_dim=64)))
    with pytest.raises(CheckpointError, match="mis-shaped"):
        Seq2SeqTransformer.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(dict(config, architecture="rnn")))
    with pytest.raises(CheckpointError, match="missing"):
        load_seq2seq(tmp_path)


def test_config_and_input_errors():
    with pytest.raises(ConfigError, match="divisible"):
        Seq2SeqConfig(d_model=30, attention_heads=4)
    with pytest.raises(ConfigError, match="one vocabulary"):
        Seq2SeqConfig(vocab_size=30, decoder_vocab_size=20, share_encoder_decoder_embeddings=True)
    with pytest.raises(ConfigError, match="rnn_cell"):
        Seq2SeqConfig(rnn_cell="transformer")
    with pytest.raises(ConfigError, match="eos_token_id"):
        Seq2SeqConfig(vocab_size=30, decoder_vocab_size=3, eos_token_id=3)
    with pytest.raises(ConfigError, match="model_type"):
        Seq2SeqConfig.from_dict({"model_type": "bert"})
    model = tiny()
    src, mask, labels = batch()
    with pytest.raises(ValueError, match="longer than"):
        model(torch.ones(1, 41, dtype=torch.long), labels=labels[:1])
    with pytest.raises(ValueError, match=r"\[0, 30\)"):
        model(src + 30, mask, labels=labels)
    with pytest.raises(ValueError, match="decoder_input_ids or labels"):
        model(src, mask)
    with pytest.raises(ValueError, match="-100"):
        model(src, mask, labels=torch.full_like(labels, -100))
    with pytest.raises(TypeError, match="architecture 'rnn'"):
        RNNSeq2Seq(model.config)


def test_dropout_inside_the_feed_forward_only_when_asked():
    """The paper drops out sublayer outputs only; `activation_dropout` adds BART's dropout after the ReLU."""
    model = tiny(dropout=0.0).train()
    src, mask, labels = batch()
    torch.testing.assert_close(model(src, mask, labels=labels).logits, model(src, mask, labels=labels).logits)
    torch.manual_seed(0)  # p = 1: every activation dropped
    layer = TransformerLayer(16, 4, 32, cross_attention=True, dropout=0.0, activation_dropout=1.0).train()
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 4, 16)
    dropped, _, _ = layer(x, memory=memory)
    silent = copy.deepcopy(layer).eval()  # the same layer whose ReLU never fires: its feed-forward is fc2's bias
    with torch.no_grad():
        silent.fc1.weight.zero_()
        silent.fc1.bias.fill_(-1.0)
    torch.testing.assert_close(dropped, silent(x, memory=memory)[0])
    assert not torch.allclose(dropped, layer.eval()(x, memory=memory)[0])
    with pytest.raises(ConfigError, match="activation_dropout"):
        Seq2SeqConfig(activation_dropout=1.5)


# ---- learning: reverse a sequence ----------------------------------------------------------------------

def reverse_batch(n: int, g: torch.Generator, vocab: int = 13):
    """Sources of 3–8 random symbols; the target is the source reversed, then eos."""
    lengths = torch.randint(3, 9, (n,), generator=g)
    mask = torch.arange(int(lengths.max()))[None] < lengths[:, None]
    src = torch.randint(3, vocab, mask.shape, generator=g) * mask
    labels = torch.full((n, mask.size(1) + 1), -100)
    for i, length in enumerate(lengths.tolist()):
        labels[i, :length] = src[i, :length].flip(0)
        labels[i, length] = EOS
    return src, mask.long(), labels


@pytest.mark.slow
def test_transformer_learns_to_reverse_sequences():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small runs no faster on more threads, and the suite shares the cores
    try:
        torch.manual_seed(0)
        model = Seq2SeqTransformer(Seq2SeqConfig(
            vocab_size=13, d_model=64, encoder_layers=2, decoder_layers=2, attention_heads=4, ffn_dim=128,
            dropout=0.0, label_smoothing=0.0, max_position_embeddings=32, share_encoder_decoder_embeddings=True,
            pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS))
        steps = 350
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
        warmup_then_decay = lambda s: min(1, (s + 1) / 50) * max(0.05, 1 - s / steps)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_decay)
        g = torch.Generator().manual_seed(1)
        for _ in range(steps):
            src, mask, labels = reverse_batch(64, g)
            loss = model(src, mask, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
        model.eval()
        src, mask, labels = reverse_batch(200, torch.Generator().manual_seed(99))
        out = model.generate(src, mask, max_new_tokens=10)
        lengths = mask.sum(1).tolist()
        exact = sum(out[i, 1: n + 2].tolist() == labels[i, : n + 1].tolist() for i, n in enumerate(lengths))
        assert exact / 200 >= 0.99
        assert F.cross_entropy(model(src, mask, labels=labels).logits.transpose(1, 2), labels).item() < 0.05
    finally:
        torch.set_num_threads(threads)
