"""`bertkit attention` beyond BERT: the translation Transformer's three kinds, a GPT's masked self-attention and an
RNN's alignment, on tiny untrained models saved as `translate-train` and `lm-train` save them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.models.gpt.configuration import GPT2Config
from bertkit.models.gpt.modeling import GPT2LMHeadModel
from bertkit.models.seq2seq.configuration import Seq2SeqConfig
from bertkit.models.seq2seq.transformer import build_seq2seq
from bertkit.pictures.attention_view import causal_attentions
from bertkit.pictures.translation_attention import translation_attentions
from bertkit.pipelines.translation import TranslationTokenizer
from bertkit.tokenizer import BertTokenizer
from test_attention_viewer import page_data
from test_figures import assert_real_picture, png_pixels
from tolerance import assert_close

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SOURCE_VOCAB = SPECIAL + list("零一二三四五六七八九")
TARGET_VOCAB = SPECIAL + "zero one two three four five six seven eight nine .".split()
GPT_VOCAB = SPECIAL + list("今天气很好我们去公园散步。")
SOURCE, TARGET = "四八六", "four eight six."


def vocab(tokens: list[str]) -> BertTokenizer:
    return BertTokenizer({t: i for i, t in enumerate(tokens)})


@pytest.fixture(scope="module")
def tokenizer() -> TranslationTokenizer:
    return TranslationTokenizer(vocab(SOURCE_VOCAB), vocab(TARGET_VOCAB), "zh", "en")


def seq2seq(architecture: str = "transformer", **kw):
    """A tiny untrained encoder–decoder over the vocabularies above (encoder and decoder depths differ)."""
    torch.manual_seed(0)
    config = dict(architecture=architecture, vocab_size=len(SOURCE_VOCAB), decoder_vocab_size=len(TARGET_VOCAB),
                  d_model=16, encoder_layers=2, decoder_layers=3, attention_heads=4, ffn_dim=32,
                  max_position_embeddings=32, dropout=0.0, pad_token_id=0, bos_token_id=2, eos_token_id=3)
    if architecture == "rnn":
        config.update(encoder_layers=1, decoder_layers=1)
    return build_seq2seq(Seq2SeqConfig(**{**config, **kw})).eval()


def gpt() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=len(GPT_VOCAB), n_embd=16, n_layer=2, n_head=4, n_positions=32,
                                      bos_token_id=2, eos_token_id=3, pad_token_id=0)).eval()


def assert_rows_are_distributions(attentions: np.ndarray) -> None:
    assert np.all(attentions >= 0) and np.allclose(attentions.sum(-1), 1.0, atol=1e-5)


# ---- the matrices --------------------------------------------------------------------------------

def test_transformer_three_kinds_of_a_forced_target(tokenizer):
    model = seq2seq()
    seen = translation_attentions(model, tokenizer, SOURCE, TARGET)
    assert seen.forced and seen.translation == TARGET and [m.kind for m in seen.maps] == ["encoder", "decoder", "cross"]
    source = ["四", "八", "六", "[SEP]"]
    rows = ["[CLS]", "four", "eight", "six", "."]         # the decoder's inputs: bos, then the target shifted right
    encoder, decoder, cross = seen.maps
    assert encoder.query_tokens == encoder.key_tokens == source and encoder.attentions.shape == (2, 4, 4, 4)
    assert decoder.query_tokens == decoder.key_tokens == rows and decoder.attentions.shape == (3, 4, 5, 5)
    assert cross.query_tokens == rows and cross.key_tokens == source and cross.attentions.shape == (3, 4, 5, 4)
    for one in seen.maps:
        assert_rows_are_distributions(one.attentions)
    upper = np.triu(np.ones((5, 5), dtype=bool), k=1)
    assert np.all(decoder.attentions[..., upper] == 0.0)                    # exactly 0: the causal mask
    assert np.all(decoder.attentions[..., ~upper] > 0.0)
    assert decoder.attentions[..., 0, 0] == pytest.approx(1.0)              # [CLS] sees only itself
    # the same weights as the model's own output, teacher-forced by hand
    ids = torch.tensor([[SOURCE_VOCAB.index(c) for c in SOURCE] + [3]])
    dec = torch.tensor([[2] + [TARGET_VOCAB.index(t) for t in ["four", "eight", "six", "."]]])
    with torch.no_grad():
        out = model(ids, decoder_input_ids=dec, output_attentions=True)
    np.testing.assert_array_equal(cross.attentions[1], out.cross_attentions[1][0].numpy())
    with pytest.warns(UserWarning, match="the source has 7 tokens, more than max_length 3: it is cut to 3"):
        cut = translation_attentions(model, tokenizer, "四八六零一二", TARGET, max_length=3)
    assert cut.map("cross").key_tokens == ["四", "八", "[SEP]"]
    with pytest.raises(ValueError, match="the target is empty"):
        translation_attentions(model, tokenizer, SOURCE, " \u200b")


def test_transformer_greedy_translation_is_what_generate_gives(tokenizer):
    model = seq2seq()
    seen = translation_attentions(model, tokenizer, SOURCE)
    ids = torch.tensor([[SOURCE_VOCAB.index(c) for c in SOURCE] + [3]])
    generated = model.generate(ids, num_beams=1)[0].tolist()
    assert not seen.forced and seen.translation == tokenizer.decode(generated[1:])
    decoder = seen.map("decoder")
    # rows: the start token and every generated token but the last (an untrained model may never reach eos)
    assert decoder.query_tokens == tokenizer.target.convert_ids_to_tokens(generated[:-1])
    assert seen.map("cross").attentions.shape == (3, 4, len(generated) - 1, 4)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_rnn_alignment_is_target_by_source(tokenizer, cell):
    model = seq2seq("rnn", rnn_cell=cell)
    seen = translation_attentions(model, tokenizer, SOURCE, TARGET)
    [alignment] = seen.maps
    assert alignment.kind == "alignment" and alignment.attentions.shape == (1, 1, 5, 4)
    assert alignment.query_tokens == ["four", "eight", "six", ".", "[SEP]"]    # what each step produced
    assert alignment.key_tokens == ["四", "八", "六", "[SEP]"]
    assert_rows_are_distributions(alignment.attentions)
    greedy = translation_attentions(model, tokenizer, SOURCE)
    assert greedy.map("alignment").attentions.shape[2:] == (len(greedy.map("alignment").query_tokens), 4)


def test_rnn_keeps_its_attention_weights_without_changing_its_outputs():
    model = seq2seq("rnn", decoder_layers=2)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(5, 15, (2, 6), generator=g)
    mask = torch.ones_like(src)
    mask[1, 4:] = 0
    labels = torch.randint(5, 16, (2, 5), generator=g)
    plain = model(src * mask, mask, labels=labels)
    seen = model(src * mask, mask, labels=labels, output_attentions=True)
    assert torch.equal(plain.logits, seen.logits) and torch.equal(plain.loss, seen.loss)
    assert plain.cross_attentions is None
    [alignment] = seen.cross_attentions
    assert alignment.shape == (2, 1, 5, 6)
    assert torch.allclose(alignment.sum(-1), torch.ones(2, 1, 5))
    assert torch.all(alignment[1, :, :, 4:] == 0)                           # padded source positions get nothing
    # the weights are the ones the decoder used: step by step through the decoding state, the same
    state = model.start_decoding(src[:1])
    embedded = model.target_embeddings(torch.cat([torch.full((1, 1), 2), labels[:1, :-1]], dim=1))
    steps = [model.decode_step(embedded[:, t], state.enc)[1] for t in range(5)]
    torch.testing.assert_close(torch.stack(steps, dim=1), alignment[:1, 0], rtol=0, atol=1e-6)


def test_rnn_without_attention_is_refused(tokenizer):
    with pytest.raises(ValueError, match="this GRU encoder–decoder has no attention: its decoder reads one fixed "
                                         "summary of the source"):
        translation_attentions(seq2seq("rnn", rnn_attention=False), tokenizer, SOURCE)
    assert seq2seq("rnn", rnn_attention=False)(torch.tensor([[5, 6, 3]]), decoder_input_ids=torch.tensor([[2]]),
                                               output_attentions=True).cross_attentions is None


@pytest.mark.parametrize("make", [seq2seq, gpt], ids=["transformer", "gpt"])
def test_asking_for_attentions_leaves_the_outputs_as_they_were(make):
    # the weights come from the explicit softmax(QKᵀ/√d)V, the plain forward from the fused kernel: the two sum
    # in another order, so the logits agree to the project's fp32 bound (and the argmax, so greedy decoding)
    model = make()
    ids = torch.tensor([[5, 6, 7, 8, 3]])
    inputs = dict(input_ids=ids, decoder_input_ids=torch.tensor([[2, 9, 10, 11]])) if make is seq2seq else \
        dict(input_ids=ids)
    plain, seen = model(**inputs).logits, model(**inputs, output_attentions=True).logits
    assert_close(seen, plain)
    assert torch.equal(seen.argmax(-1), plain.argmax(-1))


def test_gpt_causal_attention_has_nothing_above_the_diagonal():
    model, tokenizer = gpt(), vocab(GPT_VOCAB)
    seen = causal_attentions(model, tokenizer, "今天天气很好。")
    assert seen.kind == "causal" and seen.tokens == ["[CLS]", "今", "天", "天", "气", "很", "好", "。"]
    assert seen.attentions.shape == (2, 4, 8, 8)
    assert_rows_are_distributions(seen.attentions)
    upper = np.triu(np.ones((8, 8), dtype=bool), k=1)
    assert np.all(seen.attentions[..., upper] == 0.0) and np.all(seen.attentions[..., ~upper] > 0.0)
    with pytest.warns(UserWarning, match="the text has 8 tokens, more than max_length 5"):
        assert causal_attentions(model, tokenizer, "今天天气很好。", max_length=5).attentions.shape == (2, 4, 5, 5)


# ---- the command line ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def runs(tmp_path_factory, tokenizer):
    """Run directories as `translate-train` and `lm-train` leave them: config, weights, tokenizers."""
    root = tmp_path_factory.mktemp("runs")
    for name, model in [("transformer", seq2seq()), ("gru-attention", seq2seq("rnn")),
                        ("lstm", seq2seq("rnn", rnn_cell="lstm", rnn_attention=False))]:
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    gpt().save_pretrained(root / "gpt")
    vocab(GPT_VOCAB).save_pretrained(root / "gpt")
    return root


def attention(*argv: str) -> int:
    return main(["attention", *map(str, argv)])


def test_cli_translation_transformer_writes_three_pictures_and_one_page(runs, tmp_path, capsys):
    out, picture = tmp_path / "attn.html", tmp_path / "out.png"
    assert attention(SOURCE, "--model", runs / "transformer", "--target", TARGET, "--out", out,
                     "--picture", picture) == 0
    printed = capsys.readouterr().out
    assert "source, 4 tokens: 四 八 六 [SEP]" in printed and "given (teacher-forced) translation: four eight six." \
        in printed
    for kind in ("encoder", "decoder", "cross"):
        assert_real_picture(tmp_path / f"out-{kind}.png", min_side=200)
        assert f"wrote {tmp_path / f'out-{kind}.png'}" in printed
    assert not picture.exists()
    data = page_data(out.read_text(encoding="utf-8"))
    assert [k["name"] for k in data["kinds"]] == ["encoder", "decoder", "cross"]
    assert (data["text"], data["text_pair"]) == (SOURCE, TARGET)
    cross = data["kinds"][2]
    assert cross["query_tokens"] == ["[CLS]", "four", "eight", "six", "."] and cross["key_tokens"][-1] == "[SEP]"
    assert np.array(cross["attentions"]).shape == (3, 4, 5, 4)
    # greedy without --target; the pictures exist now, so they are refused unless --overwrite
    assert attention(SOURCE, "--model", runs / "transformer", "--out", tmp_path / "b.html", "--picture", picture) == 2
    assert "--picture " + str(tmp_path / "out-encoder.png") + " already exists" in capsys.readouterr().err
    assert attention(SOURCE, "--model", runs / "transformer", "--out", out, "--picture", picture, "--layer", "0",
                     "--overwrite") == 0
    assert "greedy translation: " in capsys.readouterr().out


def test_cli_rnn_alignment_is_one_grey_picture(runs, tmp_path, capsys):
    picture = tmp_path / "align.png"
    assert attention(SOURCE, "--model", runs / "gru-attention", "--target", TARGET, "--out", tmp_path / "a.html",
                     "--picture", picture) == 0
    capsys.readouterr()
    pixels = assert_real_picture(picture, min_side=150)[..., :3]
    assert np.abs(pixels - pixels.mean(-1, keepdims=True)).max() < 0.02    # grey-scale: r = g = b everywhere
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.html", "align.png"]
    [alignment] = page_data((tmp_path / "a.html").read_text(encoding="utf-8"))["kinds"]
    assert alignment["name"] == "alignment" and np.array(alignment["attentions"]).shape == (1, 1, 5, 4)


def test_cli_gpt_writes_its_causal_attention(runs, tmp_path, capsys):
    out, picture = tmp_path / "gpt.html", tmp_path / "gpt.png"
    assert attention("今天天气很好。", "--model", runs / "gpt", "--out", out, "--picture", picture) == 0
    assert "8 tokens: [CLS] 今 天 天 气 很 好 。" in capsys.readouterr().out
    assert_real_picture(picture, min_side=200)
    [kind] = page_data(out.read_text(encoding="utf-8"))["kinds"]
    weights = np.array(kind["attentions"])
    assert kind["name"] == "causal" and weights.shape == (2, 4, 8, 8)
    assert np.all(weights[..., np.triu(np.ones((8, 8), dtype=bool), k=1)] == 0.0)


@pytest.mark.parametrize("run, argv, message", [
    ("lstm", [], "this LSTM encoder–decoder has no attention: its decoder reads one fixed summary of the source, so "
                 "there are no attention weights to show; train one with --model gru-attention or lstm-attention"),
    ("gpt", ["--target", "x"], "--target is for translation models and UniLM writers; {run} holds a GPT-2 "
     "model"),
    ("transformer", ["--pair", "x"], "--pair is for a BERT's or a ModernBERT's sentence pairs; {run} holds a "
                                     "translation model, which reads one text (give the translation with --target)"),
    ("transformer", ["--layer", "2"], "--layer 2: the model has 2 encoder and 3 decoder layers"),
    ("gru-attention", ["--layer", "1"], "--layer 1: an RNN's alignment is one matrix (layer 0); leave --layer out"),
    ("transformer", ["--target", " "], "the --target is only white space: it has no tokens, so nothing made for it "
                                       "could mean anything"),
    ("gpt", ["--layer", "-3"], "--layer -3: the model has 2 layers"),
])
def test_cli_refuses_what_it_cannot_show(runs, tmp_path, capsys, run, argv, message):
    assert attention(SOURCE, "--model", runs / run, "--out", tmp_path / "a.html", *argv) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"bertkit attention: error: {message.format(run=runs / run)}", err
    assert not (tmp_path / "a.html").exists()


def test_alignment_picture_draws_the_source_on_top(tmp_path):
    from bertkit.pictures import figures

    weights = np.eye(3)[[0, 2, 1]]
    fig = figures.alignment_matrix(weights, ["a", "b", "c"], ["x", "y", "z"], title="t")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"] and ax.xaxis.get_label_position() == "top"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x", "y", "z"]
    assert np.array_equal(ax.images[0].get_array(), weights)
    with pytest.raises(ValueError, match=r"the alignment has shape \(3, 3\) but there are 2 target and 3 source"):
        figures.alignment_matrix(weights, ["a", "b", "c"], ["x", "y"])
    pixels = png_pixels(figures.save_figure(fig, tmp_path / "a.png"))
    assert pixels.shape[0] > 50
