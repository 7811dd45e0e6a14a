"""Pictures: they are written, they hold something, their labels are the tokens, and Chinese renders as glyphs."""

from __future__ import annotations

import json
import warnings

import matplotlib
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.ft2font import FT2Font

from bertkit.models.functional import sinusoidal_positions
from bertkit.pictures import figures

CHINESE = ["[CLS]", "北", "京", "是", "中", "国", "的", "首", "都", "。", "[SEP]"]


def png_pixels(path) -> np.ndarray:
    """(H, W, C) floats of a PNG file; fails the test if it is not a readable PNG."""
    assert path.exists() and path.stat().st_size > 0, f"{path} was not written"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return matplotlib.image.imread(path)


def assert_real_picture(path, min_side: int = 200) -> np.ndarray:
    """A PNG of a reasonable size whose pixels are not all the same (something was drawn)."""
    pixels = png_pixels(path)
    assert min(pixels.shape[:2]) >= min_side, f"{path} is only {pixels.shape[1]}×{pixels.shape[0]} pixels"
    assert pixels[..., :3].std() > 0.05, f"{path} is (nearly) one flat colour"
    assert len(np.unique(pixels[..., :3].reshape(-1, 3), axis=0)) > 20, f"{path} has too few colours"
    return pixels


def random_attention(L: int, H: int, T: int, seed: int = 0) -> np.ndarray:
    a = np.random.default_rng(seed).random((L, H, T, T)) ** 4
    return a / a.sum(-1, keepdims=True)


def glyph_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if "missing from font" in str(w.message)]


# ---- fonts ---------------------------------------------------------------------------------------

def test_a_cjk_font_is_registered_and_has_the_characters():
    family = figures.cjk_font_family()
    assert family is not None, "no CJK font: install the package pylopdf-fonts-zh-cn (a bertkit dependency)"
    path = matplotlib.font_manager.findfont(family, fallback_to_default=False)
    charmap = FT2Font(path).get_charmap()
    assert all(ord(ch) in charmap for ch in "北京是中国的首都我们开心天气很好。，")


def test_chinese_tick_labels_render_as_glyphs_not_boxes(tmp_path):
    weights = random_attention(1, 1, len(CHINESE))[0, 0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig = figures.attention_heatmap(weights, CHINESE, title="层 0 · 头 0")
        path = figures.save_figure(fig, tmp_path / "attention.png")
    assert glyph_warnings(caught) == []
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == CHINESE
    assert [t.get_text() for t in ax.get_yticklabels()] == CHINESE
    assert_real_picture(path)


def test_the_glyph_check_catches_boxes_without_the_cjk_font(tmp_path):
    # the control for the test above: with DejaVu Sans alone, matplotlib does warn about the missing glyphs
    fig = Figure()
    fig.text(0.5, 0.5, "北京", family="DejaVu Sans")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(tmp_path / "boxes.png")
    assert glyph_warnings(caught)


def test_warns_when_no_cjk_font_is_found(monkeypatch):
    monkeypatch.setattr(figures, "cjk_font_family", lambda: None)
    with pytest.warns(UserWarning, match="install the package pylopdf-fonts-zh-cn"):
        figures.attention_heatmap(np.eye(2), ["北", "京"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figures.attention_heatmap(np.eye(2), ["the", "cat"])          # Latin tokens need no CJK font


def test_has_cjk():
    assert figures.has_cjk(["hello", "北京"]) and not figures.has_cjk(["hello", "[CLS]", "##ing", "é"])


# ---- positional encoding -------------------------------------------------------------------------

@pytest.mark.parametrize("positions, dims", [(50, 128), (2048, 512)])
def test_pe_heatmap_png(tmp_path, positions, dims):
    pe = sinusoidal_positions(positions, dims)
    fig = figures.pe_heatmap(pe, split_sin_cos=positions > 100)
    path = figures.save_figure(fig, tmp_path / "pe.png")
    assert_real_picture(path)
    shown = np.asarray(fig.axes[0].images[0].get_array())
    assert shown.shape == (positions, dims)
    if positions > 100:  # split: all sin columns first, then the cos ones
        assert np.allclose(shown[:, : dims // 2], pe[:, 0::2].numpy())
        assert np.allclose(shown[:, dims // 2:], pe[:, 1::2].numpy())
    else:
        assert np.allclose(shown, pe.numpy())
    assert f"{positions} positions × {dims} dimensions" in fig.axes[0].get_title()


def test_pe_heatmap_svg(tmp_path):
    path = figures.save_figure(figures.pe_heatmap(sinusoidal_positions(50, 128)), tmp_path / "pe.svg")
    text = path.read_text(encoding="utf-8")
    assert text.lstrip().startswith("<?xml") and "<svg" in text and "<image" in text
    assert path.stat().st_size > 5000


def test_pe_similarity_has_a_bright_diagonal_fading_with_distance(tmp_path):
    pe = sinusoidal_positions(100, 16)
    fig = figures.pe_similarity(pe)
    sim = np.asarray(fig.axes[0].images[0].get_array())
    assert sim.shape == (100, 100)
    assert np.allclose(np.diag(sim), 8.0, atol=1e-4)                    # |PE(pos)|² = d/2
    assert (sim <= np.diag(sim)[:, None] + 1e-4).all()                  # nothing beats the diagonal
    assert sim[0, 1] > sim[0, 5] > sim[0, 50]                           # fades with distance
    assert_real_picture(figures.save_figure(fig, tmp_path / "sim.png"))


# ---- attention -----------------------------------------------------------------------------------

def test_attention_grid_one_layer_labels_the_outer_panels(tmp_path):
    attn = random_attention(2, 8, len(CHINESE))
    fig = figures.attention_grid(attn, CHINESE, layers=[1])
    panels = [ax for ax in fig.axes if ax.images and ax.get_title()]
    assert [ax.get_title() for ax in panels] == [f"layer 1 · head {h}" for h in range(8)]
    for n, ax in enumerate(panels):   # 2 rows of 4: tokens on the left column and the bottom row
        assert np.allclose(np.asarray(ax.images[0].get_array()), attn[1, n])
        y = [t.get_text() for t in ax.get_yticklabels()]
        x = [t.get_text() for t in ax.get_xticklabels()]
        assert y == (CHINESE if n % 4 == 0 else [""] * len(CHINESE))
        assert x == (CHINESE if n >= 4 else [""] * len(CHINESE))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = figures.save_figure(fig, tmp_path / "grid.png")
    assert glyph_warnings(caught) == []
    assert_real_picture(path, min_side=400)


def test_attention_grid_takes_the_model_output_tuple():
    attentions = tuple(torch.softmax(torch.randn(2, 3, 5, 5), -1) for _ in range(4))   # 4 layers, batch 2
    stacked = figures.stack_attentions(attentions, index=1)
    assert stacked.shape == (4, 3, 5, 5)
    assert np.allclose(stacked[2], attentions[2][1].numpy())
    fig = figures.attention_grid(attentions, list("abcde"), layers=[0, 3], heads=[2])
    assert [ax.get_title() for ax in fig.axes if ax.images] == ["layer 0 · head 2", "layer 3 · head 2"]


def test_attention_grid_and_heatmap_errors():
    attn = random_attention(2, 2, 4)
    with pytest.raises(ValueError, match="4 tokens but 3"):
        figures.attention_grid(attn, ["a", "b", "c"])
    with pytest.raises(ValueError, match="layer indices \\[5\\] out of range: the model has 2 layers"):
        figures.attention_grid(attn, list("abcd"), layers=[5])
    with pytest.raises(ValueError, match="2 titles for 4 panels"):
        figures.attention_grid(attn, list("abcd"), titles=["x", "y"])
    with pytest.raises(ValueError, match="3 query and 3 key tokens"):
        figures.attention_heatmap(attn[0, 0], ["a", "b", "c"])


def test_save_figure_rejects_other_formats(tmp_path):
    with pytest.raises(ValueError, match="use one of .png, .svg"):
        figures.save_figure(Figure(), tmp_path / "x.jpg")


# ---- line plots and training curves --------------------------------------------------------------

def test_line_bar_and_matrix_plots(tmp_path):
    fig = figures.line_plot([1, 2, 4], {"a": [1.0, 0.5, 0.25], "b": [1.0, 1.0, 1.0]}, "x", "y", logx=True,
                        reference={"ref": 0.75})
    assert len(fig.axes[0].lines) == 3 and fig.axes[0].get_xscale() == "log"
    assert_real_picture(figures.save_figure(fig, tmp_path / "line.png"))
    fig = figures.bar_plot(["p", "q"], {"a": [1.0, 2.0], "b": [3.0, 4.0]}, "y", logy=True)
    assert len(fig.axes[0].patches) == 4
    fig = figures.matrix_plot(np.eye(3), ["r0", "r1", "r2"], ["c0", "c1", "c2"], "x", "y")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["r0", "r1", "r2"]


def test_training_curves_from_metrics_jsonl(tmp_path):
    records = [{"step": s, "epoch": s / 10, "loss": 3.0 / s, "lr": 1e-4 * min(1, s / 3), "grad_norm": 1.0 + s,
                "seconds": s * 0.1, "examples_per_second": 100.0, "loss_mlm": 2.0 / s} for s in range(1, 11)]
    records[4].update(eval_loss=0.9, eval_accuracy=0.7)
    records[9].update(eval_loss=0.6, eval_accuracy=0.8)
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "\n", encoding="utf-8")
    fig = figures.training_curves(tmp_path)                       # the folder: finds metrics.jsonl inside
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["loss", "learning rate", "gradient norm", "evaluation"]
    loss_ax = fig.axes[0]
    assert sorted(line.get_label() for line in loss_ax.lines) == ["eval_loss", "loss", "loss_mlm"]
    (line,) = [line for line in loss_ax.lines if line.get_label() == "eval_loss"]
    assert list(line.get_xdata()) == [5, 10] and list(line.get_ydata()) == [0.9, 0.6]
    assert_real_picture(figures.save_figure(fig, tmp_path / "curves.png"))

    # pretraining's evaluation: the MLM loss beside the training loss, perplexity and accuracies apart
    records[9].update(eval_mlm_loss=6.1, eval_mlm_perplexity=440.0, eval_mlm_accuracy=0.14, eval_nsp_accuracy=0.7)
    fig = figures.training_curves(records)
    panels = {ax.get_title(): sorted(line.get_label() for line in ax.lines) for ax in fig.axes}
    assert panels["loss"] == ["eval_loss", "eval_mlm_loss", "loss", "loss_mlm"]
    assert panels["perplexity"] == ["eval_mlm_perplexity"]
    assert panels["evaluation"] == ["eval_accuracy", "eval_mlm_accuracy", "eval_nsp_accuracy"]


def test_training_curves_errors(tmp_path):
    bad = tmp_path / "metrics.jsonl"
    bad.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": \n', encoding="utf-8")
    with pytest.raises(ValueError, match="metrics.jsonl:2: not a JSON record"):
        figures.training_curves(bad)
    with pytest.raises(ValueError, match="no training records"):
        figures.training_curves([])
    with pytest.raises(ValueError, match="nothing to plot"):
        figures.training_curves([{"step": 1, "seconds": 2.0}])


def test_answer_probabilities_draw_a_bar_per_token_and_the_answer_in_orange(tmp_path):
    pieces = ["[CLS]", *"黑豹队的防守丢了", "308", "分", "。"]
    rng = np.random.default_rng(0)
    p_start, p_end = rng.dirichlet(np.ones(len(pieces))), rng.dirichlet(np.ones(len(pieces)))
    fig = figures.answer_probabilities(pieces, p_start, p_end, first=9, last=10, title="丢了多少分？")
    top, bottom = fig.axes
    assert [round(bar.get_height(), 6) for bar in top.patches] == [round(p, 6) for p in p_start]
    assert [round(bar.get_height(), 6) for bar in bottom.patches] == [round(p, 6) for p in p_end]
    orange = [k for k, bar in enumerate(top.patches) if bar.get_facecolor() == matplotlib.colors.to_rgba("tab:orange")]
    assert orange == [9, 10]
    assert [label.get_text() for label in bottom.get_xticklabels()] == pieces
    assert_real_picture(figures.save_figure(fig, tmp_path / "answer.png"))
    long = [f"t{k}" for k in range(300)]
    fig = figures.answer_probabilities(long, np.full(300, 1 / 300), np.full(300, 1 / 300), 250, 252, max_pieces=80)
    labels = [label.get_text() for label in fig.axes[1].get_xticklabels()]
    assert len(labels) == 80 and "t251" in labels and "tokens 212-291 of 300" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="3 pieces but 2 start and 3 end probabilities"):
        figures.answer_probabilities(["a", "b", "c"], [0.5, 0.5], [0.2, 0.3, 0.5])
