"""Pictures of the Transformer's insides: positional encodings, attention maps, training curves, a reader's
answer probabilities.

Every function builds a matplotlib `Figure` (no pyplot, so no global state and no display needed) and
`save_figure` writes it as PNG or SVG. Chinese tokens need a CJK font: `cjk_font_family` registers the one
that ships in the `pylopdf-fonts-zh-cn` package (Noto Sans SC), or finds one installed on the system.

Dimension letters: L layers, H heads, T query tokens, S key tokens, P positions, D model dimensions.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import unicodedata
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib import font_manager
from matplotlib.figure import Figure

from bertkit.errors import DataError, InputError
from bertkit.utils.atomic import atomic_write

FORMATS = (".png", ".svg")
# Families that cover Chinese, tried in order when the packaged font is not installed.
_SYSTEM_CJK_FAMILIES = ("Noto Sans SC", "Noto Sans CJK SC", "Source Han Sans SC", "WenQuanYi Micro Hei",
                        "WenQuanYi Zen Hei", "Droid Sans Fallback", "Microsoft YaHei", "PingFang SC", "SimHei")


# ---- fonts and saving ----------------------------------------------------------------------------

@functools.cache
def cjk_font_family() -> str | None:
    """Register a font with Chinese glyphs with matplotlib and return its family name, or None if there is none."""
    try:
        import pylopdf_fonts_zh_cn  # ships Noto Sans SC (SIL OFL) as a plain file; nothing else is imported
    except ImportError:
        pass
    else:
        path = Path(pylopdf_fonts_zh_cn.sans_path())
        if path.is_file():
            font_manager.fontManager.addfont(str(path))
            return font_manager.FontProperties(fname=str(path)).get_name()
    installed = {font.name for font in font_manager.fontManager.ttflist}
    return next((family for family in _SYSTEM_CJK_FAMILIES if family in installed), None)


def has_cjk(texts: Sequence[str]) -> bool:
    """True if any text holds a CJK ideograph (or kana/hangul), which DejaVu Sans cannot draw."""
    return any(unicodedata.east_asian_width(ch) in "WF" for text in texts for ch in text)


@contextlib.contextmanager
def _style() -> Iterator[None]:
    # DejaVu first (it has every Latin glyph and the minus sign); matplotlib falls back per glyph to the CJK font.
    family = ["DejaVu Sans"] + ([cjk_font_family()] if cjk_font_family() else [])
    with matplotlib.rc_context({"font.family": family, "font.size": 9, "axes.titlesize": 10,
                                "figure.dpi": 100, "savefig.bbox": "tight", "svg.fonttype": "path"}):
        yield


def _warn_if_no_cjk_font(labels: Sequence[str]) -> None:
    if has_cjk(labels) and cjk_font_family() is None:
        warnings.warn("no font with Chinese glyphs found, so Chinese labels will show as boxes; "
                      "install the package pylopdf-fonts-zh-cn (or a system CJK font such as fonts-noto-cjk)",
                      stacklevel=3)


def save_figure(fig: Figure, path: str | os.PathLike, dpi: int = 100) -> Path:
    """Write `fig` to `path` as PNG or SVG (chosen by the suffix), creating the folder; returns the path."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise InputError(f"cannot save a picture as {path.name!r}: use one of {', '.join(FORMATS)}")
    with _style():
        # a constrained layout already fits everything in; "tight" would cost a second full draw
        atomic_write(path, lambda tmp: fig.savefig(tmp, format=path.suffix.lower()[1:], dpi=dpi,
                                                   bbox_inches=None if fig.get_layout_engine() else "tight"))
    return path


def _as_array(x) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor; viz itself never imports torch
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


# ---- positional encoding -------------------------------------------------------------------------

def pe_heatmap(pe, title: str | None = None, split_sin_cos: bool = False) -> Figure:
    """Heatmap of a positional-encoding matrix (P, D): positions down, dimensions across.

    With `split_sin_cos` the even (sin) columns are drawn first and the odd (cos) ones after them, which keeps
    a wide matrix (e.g. 2048 × 512) readable instead of a moiré of alternating stripes.
    """
    pe = _as_array(pe)
    if pe.ndim != 2:
        raise InputError(f"pe must be a (positions, dims) matrix, got shape {pe.shape}")
    P, D = pe.shape
    shown = np.concatenate([pe[:, 0::2], pe[:, 1::2]], axis=1) if split_sin_cos else pe
    with _style():
        fig = Figure(figsize=(7, 4.2))
        ax = fig.add_subplot()
        image = ax.imshow(shown, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1,
                          interpolation="nearest" if max(P, D) <= 256 else "antialiased")
        if split_sin_cos:
            ax.axvline((D + 1) // 2 - 0.5, color="black", linewidth=1)
            ax.set_xlabel(f"dimension: sin of 2i (left {(D + 1) // 2}) | cos of 2i+1 (right {D // 2}); "
                          "frequency falls to the right")
        else:
            ax.set_xlabel("dimension (even: sin, odd: cos; frequency falls to the right)")
        ax.set_ylabel("position")
        ax.set_title(title or f"Sinusoidal positional encoding, {P} positions × {D} dimensions")
        fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    return fig


def pe_similarity(pe, title: str | None = None) -> Figure:
    """The matrix PE·PEᵀ (P, P): how alike two positions' encodings are; bright diagonal, fading with distance."""
    pe = _as_array(pe)
    sim = pe @ pe.T
    P, D = pe.shape
    with _style():
        fig = Figure(figsize=(5.2, 4.4))
        ax = fig.add_subplot()
        image = ax.imshow(sim, cmap="viridis", interpolation="nearest")
        ax.set_xlabel("position j")
        ax.set_ylabel("position i")
        ax.set_title(title or f"PE·PEᵀ: dot product of positions ({P} positions, {D} dimensions)")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03)
    return fig


# ---- attention -----------------------------------------------------------------------------------

def _draw_attention(ax, weights: np.ndarray, tokens: Sequence[str], key_tokens: Sequence[str], xlabels: bool,
                    ylabels: bool, fontsize: float) -> object:
    image = ax.imshow(weights, cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xticks(range(len(key_tokens)), labels=list(key_tokens) if xlabels else [], rotation=90, fontsize=fontsize)
    ax.set_yticks(range(len(tokens)), labels=list(tokens) if ylabels else [], fontsize=fontsize)
    ax.tick_params(length=0, pad=1.5)
    return image


def attention_heatmap(weights, tokens: Sequence[str], key_tokens: Sequence[str] | None = None,
                      title: str | None = None) -> Figure:
    """One attention matrix (T, S): row t is how query token t spreads its attention over the key tokens."""
    weights = _as_array(weights)
    key_tokens = list(tokens if key_tokens is None else key_tokens)
    if weights.shape != (len(tokens), len(key_tokens)):
        raise InputError(f"weights have shape {weights.shape} but there are {len(tokens)} query and "
                         f"{len(key_tokens)} key tokens")
    _warn_if_no_cjk_font(list(tokens) + key_tokens)
    side = min(10.0, 2.0 + 0.28 * max(len(tokens), len(key_tokens)))
    with _style():
        fig = Figure(figsize=(side + 0.8, side))
        ax = fig.add_subplot()
        image = _draw_attention(ax, weights, tokens, key_tokens, xlabels=True, ylabels=True, fontsize=9)
        ax.set_xlabel("attended to (key)")
        ax.set_ylabel("attending (query)")
        if title:
            ax.set_title(title)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03)
    return fig


def attention_grid(attentions, tokens: Sequence[str], layers: Sequence[int] | None = None,
                   heads: Sequence[int] | None = None, columns: int | None = None, title: str | None = None,
                   titles: Sequence[str] | None = None, key_tokens: Sequence[str] | None = None) -> Figure:
    """Attention maps of several layers and heads, one panel each, tokens as tick labels.

    `attentions` is (L, H, T, T) for one sentence, or the model's tuple of L tensors (1, H, T, T); with
    `key_tokens` (cross-attention: target rows, source columns) it is (L, H, T, S).
    With one layer the heads wrap into rows of `columns`; with several, each row is a layer. `titles` replaces
    the panels' "layer l · head h" titles.
    """
    attn = stack_attentions(attentions, square=key_tokens is None)
    L, H, T, S = attn.shape
    key_tokens = list(tokens if key_tokens is None else key_tokens)
    if T != len(tokens) or S != len(key_tokens):
        raise InputError(f"attentions cover {T} tokens but {len(tokens)} tokens were given" if T != len(tokens) else
                         f"attentions cover {S} key tokens but {len(key_tokens)} key tokens were given")
    layers = list(range(L)) if layers is None else list(layers)
    heads = list(range(H)) if heads is None else list(heads)
    for name, chosen, count in (("layer", layers, L), ("head", heads, H)):
        bad = [i for i in chosen if not 0 <= i < count]
        if bad or not chosen:
            raise InputError(f"{name} indices {bad or chosen} out of range: the model has {count} {name}s")
    _warn_if_no_cjk_font(list(tokens) + key_tokens)
    panels = [(layer, head) for layer in layers for head in heads]
    titles = list(titles) if titles is not None else [f"layer {layer} · head {head}" for layer, head in panels]
    if len(titles) != len(panels):
        raise InputError(f"{len(titles)} titles for {len(panels)} panels")
    ncols = columns or (min(len(heads), 4) if len(layers) == 1 else len(heads))
    nrows = math.ceil(len(panels) / ncols)
    panel = min(3.2, 1.2 + 0.12 * max(T, S))
    labels = max(T, S) <= 48  # tokens label the outer panels (left column, bottom of each column); rows align across
    fontsize = 8 if max(T, S) <= 20 else 7
    with _style():
        fig = Figure(figsize=(ncols * panel + 1.0, nrows * (0.9 * panel + 0.3) + 0.5), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False)
        for ax in axes.flat[len(panels):]:
            ax.set_axis_off()
        for n, (ax, (layer, head), name) in enumerate(zip(axes.flat, panels, titles)):
            bottom = n + ncols >= len(panels)
            image = _draw_attention(ax, attn[layer, head], tokens, key_tokens, labels and bottom,
                                    labels and n % ncols == 0, fontsize)
            ax.set_title(name, fontsize=9)
        fig.colorbar(image, ax=axes, fraction=0.02, pad=0.01, shrink=0.6)
        if title:
            fig.suptitle(title)
    return fig


def stack_attentions(attentions, index: int = 0, square: bool = True) -> np.ndarray:
    """(L, H, T, T) array from the model's `.attentions` (tuple of (B, H, T, T)), taking batch item `index`;
    with `square=False` (cross-attention) (L, H, T, S)."""
    if isinstance(attentions, (list, tuple)):
        attentions = np.stack([_as_array(a)[index] if _as_array(a).ndim == 4 else _as_array(a) for a in attentions])
    attn = _as_array(attentions)
    if attn.ndim != 4 or (square and attn.shape[-1] != attn.shape[-2]):
        raise InputError(f"attentions must be (layers, heads, T, {'T' if square else 'S'}), got shape {attn.shape}")
    return attn


def alignment_matrix(weights, source_tokens: Sequence[str], target_tokens: Sequence[str],
                     title: str | None = None) -> Figure:
    """An RNN's soft alignment (T, S) drawn as Bahdanau et al. (2015) figure 3 draws it: the source along the top,
    the translation down the side, each weight α_tj in grey-scale (0 black, 1 white)."""
    weights = _as_array(weights)
    if weights.shape != (len(target_tokens), len(source_tokens)):
        raise InputError(f"the alignment has shape {weights.shape} but there are {len(target_tokens)} target and "
                         f"{len(source_tokens)} source tokens")
    _warn_if_no_cjk_font(list(source_tokens) + list(target_tokens))
    T, S = weights.shape
    scale = min(0.32, 9.0 / max(T, S))  # inches per token: a long pair still fits a page
    with _style():
        fig = Figure(figsize=(1.6 + scale * S, 1.6 + scale * T), layout="constrained")
        ax = fig.add_subplot()
        ax.imshow(weights, cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.xaxis.tick_top()
        ax.set_xticks(range(S), labels=list(source_tokens), rotation=90, fontsize=9)
        ax.set_yticks(range(T), labels=list(target_tokens), fontsize=9)
        ax.tick_params(length=0, pad=2)
        ax.set_xlabel("source")
        ax.xaxis.set_label_position("top")
        ax.set_ylabel("translation")
        if title:
            fig.suptitle(title)
    return fig


# ---- line plots: experiments and training curves -------------------------------------------------

def line_plot(x: Sequence[float], series: Mapping[str, Sequence[float]], xlabel: str, ylabel: str,
              title: str | None = None, logx: bool = False, logy: bool = False,
              reference: Mapping[str, float] | None = None,
              errors: Mapping[str, Sequence[float]] | None = None) -> Figure:
    """A few named curves over the same x (e.g. entropy against d_k), with optional horizontal reference lines
    and error bars (± errors[name], e.g. a standard deviation over seeds); a None y is left out of its curve, and
    a curve of Nones is not drawn."""
    with _style():
        fig = Figure(figsize=(6, 3.8))
        ax = fig.add_subplot()
        for name, ys in series.items():
            points = [(xi, yi, (errors or {}).get(name, [0.0] * len(ys))[i])
                      for i, (xi, yi) in enumerate(zip(x, ys)) if yi is not None]
            if not points:  # a curve with no value at all (e.g. a row that did not run): not drawn
                continue
            xs, means, spread = (list(column) for column in zip(*points))
            if errors and name in errors:
                ax.errorbar(xs, means, yerr=spread, marker="o", capsize=3, label=name)
            else:
                ax.plot(xs, means, marker="o" if len(xs) <= 30 else None, label=name)
        for name, y in (reference or {}).items():
            ax.axhline(y, linestyle="--", color="grey", linewidth=1, label=name)
        ax.set_xscale("log" if logx else "linear")
        ax.set_yscale("log" if logy else "linear")
        _label_axes(ax, xlabel, ylabel, title)
    return fig


def _label_axes(ax, xlabel: str, ylabel: str, title: str | None) -> None:
    """Axis labels, a light grid, the legend and the title: how every line chart here ends."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)


def bar_plot(labels: Sequence[str], series: Mapping[str, Sequence[float]], ylabel: str, title: str | None = None,
             logy: bool = False) -> Figure:
    """Grouped bars: one group per label, one bar per named series."""
    width = 0.8 / max(1, len(series))
    with _style():
        fig = Figure(figsize=(max(5.0, min(10.0, 1.5 + 0.25 * len(labels) * len(series))), 3.6))
        ax = fig.add_subplot()
        for n, (name, values) in enumerate(series.items()):
            ax.bar(np.arange(len(labels)) + (n - (len(series) - 1) / 2) * width, list(values), width, label=name)
        ax.set_xticks(range(len(labels)), labels=list(labels))
        ax.set_yscale("log" if logy else "linear")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7, ncol=min(len(series), 4))
        if title:
            ax.set_title(title)
    return fig


def answer_probabilities(pieces: Sequence[str], start_probabilities, end_probabilities, first: int | None = None,
                         last: int | None = None, title: str | None = None, max_pieces: int = 80) -> Figure:
    """Where a reader (extractive QA) thinks the answer starts and ends: p(start) above, p(end) below, one bar per
    context token (labelled with its characters), the answer's tokens `first`..`last` in orange. A context longer
    than `max_pieces` tokens is shown around the answer (the title says which tokens)."""
    p_start, p_end = _as_array(start_probabilities), _as_array(end_probabilities)
    if not len(pieces) == len(p_start) == len(p_end):
        raise InputError(f"{len(pieces)} pieces but {len(p_start)} start and {len(p_end)} end probabilities")
    lo = 0
    if len(pieces) > max_pieces:
        centre = (first + last) // 2 if first is not None and last is not None else int(np.argmax(p_start))
        lo = min(max(0, centre - max_pieces // 2), len(pieces) - max_pieces)
    hi = min(len(pieces), lo + max_pieces)
    shown = [" ".join(piece.split()) or "␣" for piece in pieces[lo:hi]]
    _warn_if_no_cjk_font(shown)
    answer = set(range(first, last + 1)) if first is not None and last is not None else set()
    colours = ["tab:orange" if lo + k in answer else "tab:blue" for k in range(hi - lo)]
    with _style():
        fig = Figure(figsize=(max(6.0, min(16.0, 1.0 + 0.16 * (hi - lo))), 4.2), layout="constrained")
        axes = fig.subplots(2, 1, sharex=True)
        for ax, probabilities, name in ((axes[0], p_start, "p(start)"), (axes[1], p_end, "p(end)")):
            ax.bar(range(hi - lo), probabilities[lo:hi], color=colours)
            ax.set_ylabel(name)
            ax.set_ylim(0, 1)
            ax.grid(alpha=0.3, axis="y")
        axes[1].set_xticks(range(hi - lo), labels=shown, rotation=90, fontsize=7)
        where = f" (tokens {lo + 1}-{hi} of {len(pieces)})" if (lo, hi) != (0, len(pieces)) else ""
        if title or where:
            axes[0].set_title((title or "") + where)
    return fig


def matrix_plot(matrix, row_labels: Sequence[str], column_labels: Sequence[str], xlabel: str, ylabel: str,
                title: str | None = None, cmap: str = "viridis") -> Figure:
    """A labelled heatmap of any small matrix (e.g. heads × relative offsets), values written in the cells."""
    matrix = _as_array(matrix)
    rows, cols = matrix.shape
    with _style():
        fig = Figure(figsize=(1.2 + 0.55 * cols, 0.8 + 0.3 * rows))
        ax = fig.add_subplot()
        image = ax.imshow(matrix, aspect="auto", cmap=cmap, interpolation="nearest")
        ax.set_xticks(range(cols), labels=list(column_labels))
        ax.set_yticks(range(rows), labels=list(row_labels), fontsize=7)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03)
    return fig


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """The records of a trainer's metrics.jsonl, one dict per logged step (blank lines skipped)."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    records = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise DataError(f"{path}:{number}: not a JSON record ({err.msg})") from None
    return records


# panels of a training-curves figure: title -> does this metric name belong here
# (losses, perplexities and accuracy-like scores each get their own axes: on one, the scores of 0..1
# would lie flat under perplexities in the hundreds)
_PANELS = {
    "loss": lambda k: k == "loss" or k.startswith("loss_") or (k.startswith("eval_") and k.endswith("loss")),
    "learning rate": lambda k: k == "lr",
    "gradient norm": lambda k: k == "grad_norm",
    "perplexity": lambda k: k.startswith("eval_") and k.endswith("perplexity"),
    "evaluation": lambda k: k.startswith("eval_") and not k.endswith(("loss", "perplexity")),
}


def training_curves(metrics: str | os.PathLike | Sequence[Mapping], title: str | None = None) -> Figure:
    """Loss, learning rate, gradient norm and evaluation metrics against step, from a metrics.jsonl."""
    records = read_metrics(metrics) if isinstance(metrics, (str, os.PathLike)) else list(metrics)
    records = [r for r in records if "step" in r]
    if not records:
        raise InputError("no training records with a 'step' to plot")
    keys = sorted({k for r in records for k, v in r.items() if isinstance(v, (int, float)) and k != "step"})
    panels = {name: [k for k in keys if belongs(k)] for name, belongs in _PANELS.items()}
    panels = {name: names for name, names in panels.items() if names}
    if not panels:
        raise InputError(f"nothing to plot: the records have {keys}, but no loss, lr, grad_norm or eval_ metric")
    with _style():
        fig = Figure(figsize=(4.2 * len(panels), 3.4), layout="constrained")
        for ax, (name, names) in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels.items()):
            for key in names:
                points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
                ax.plot(*zip(*points), marker="o" if len(points) < 30 else None, markersize=3, label=key)
            ax.set_title(name)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        if title:
            fig.suptitle(title)
    return fig


def compare_runs(runs: Mapping[str, str | os.PathLike], metric: str = "loss", title: str | None = None) -> Figure:
    """One metric of several training runs (each a metrics.jsonl or its directory) against step, one line each."""
    with _style():
        fig = Figure(figsize=(6, 3.8), layout="constrained")
        ax = fig.add_subplot()
        for name, path in runs.items():
            points = [(r["step"], r[metric]) for r in read_metrics(path) if isinstance(r.get(metric), (int, float))]
            if not points:
                raise InputError(f"{path}: no records with {metric!r}")
            ax.plot(*zip(*points), marker="o" if len(points) < 30 else None, markersize=3, label=name)
        _label_axes(ax, "step", metric, title)
    return fig
