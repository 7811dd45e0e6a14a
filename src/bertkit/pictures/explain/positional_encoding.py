"""Sinusoidal positional encoding: the table for a 3-word sentence, shifts as rotations, heatmaps and PE·PEᵀ.

Each frequency ω_i = 1 / 10000^(2i/d) gives a pair (sin pos·ω_i, cos pos·ω_i). Moving k positions adds k·ω_i to
the angle, which is a 2×2 rotation of the pair that does not depend on pos, so PE(pos + k) = M_k PE(pos) with
one block-diagonal M_k for every position: relative offsets are linear maps the model can learn.

The columns are a smooth binary counter: in the bits of a position number the low bits flip every step and each
higher bit half as often; in PE the first columns turn fastest and each later pair more slowly.

Rotary positions (RoPE: RoFormer, ModernBERT) use the same frequencies the other way round: instead of adding
PE(pos) to the input, each layer turns its query at t and its key at s by t·ω_i and s·ω_i. The score of two turned
vectors is q·R_(s-t) k: it depends on the offset s - t alone, exactly, where with added positions (q + PE(t))·(k +
PE(s)) the absolute positions leak into every score.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from bertkit.errors import InputError
from bertkit.models.functional import rotary_tables, rotate, sinusoidal_positions
from bertkit.pictures.explain.base import Explanation, PictureWriter, matrix_text, table

CLAIM = "PE(pos, 2i) = sin(pos/10000^(2i/d)), PE(pos, 2i+1) = cos(...); PE(pos+k) is a fixed rotation of PE(pos)"
SENTENCE = ("I", "am", "good")


def shift_matrix(k: int, dim: int) -> np.ndarray:
    """M_k with PE(pos + k) = M_k PE(pos): per frequency, the rotation [[cos kω, sin kω], [-sin kω, cos kω]]."""
    if dim % 2:
        raise InputError(f"the shift is a rotation per (sin, cos) pair, so dim must be even, got {dim}")
    omega = 1.0 / np.power(10000.0, np.arange(0, dim, 2) / dim)
    M = np.zeros((dim, dim))
    for i, w in enumerate(omega):
        c, s = np.cos(k * w), np.sin(k * w)
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, s], [-s, c]]   # (sin, cos)(θ + kω) from (sin, cos)(θ)
    return M


def query_key_scores(query: np.ndarray, key: np.ndarray, positions: int, rotary: bool) -> np.ndarray:
    """(P, P): the score of `query` at position t against `key` at position s, rotated (RoPE, base 10,000) or with
    the sinusoidal encoding added to each."""
    dim = len(query)
    q, k = (torch.tensor(v, dtype=torch.float64).expand(positions, dim) for v in (query, key))
    if rotary:
        cos, sin = rotary_tables(positions, dim, 10_000.0, dtype=torch.float64)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    else:
        pe = sinusoidal_positions(positions, dim).double()
        q, k = q + pe, k + pe
    return (q @ k.T).numpy()


def spread_along_offsets(scores: np.ndarray, offsets: tuple[int, ...]) -> dict[int, float]:
    """For each offset s - t, the spread (max - min) of the scores of every pair at that offset."""
    return {k: float(np.ptp(np.diagonal(scores, offset=k))) for k in offsets}


def binary_bits(positions: int, bits: int) -> np.ndarray:
    """(positions, bits): bit b of each position number, lowest bit first (5 -> 1, 0, 1, 0)."""
    return (np.arange(positions)[:, None] >> np.arange(bits)) & 1


def explain(out: str | os.PathLike | None = None, fmt: str = "png", dim: int = 128, positions: int = 2048,
            shifts: tuple[int, ...] = (1, 5, 50), columns: tuple[int, ...] = (6, 7, 8, 9),
            curve_positions: int = 64) -> Explanation:
    """Print the d=4 table of "I am good", check PE(pos+k) = M_k PE(pos) for every pos, draw the heatmaps, and
    draw PE columns `columns` over positions 0..curve_positions-1 beside the bits of a binary counter."""
    if not columns or min(columns) < 0 or max(columns) >= dim:
        raise InputError(f"columns must be PE columns 0..{dim - 1} of d_model {dim}, got {columns}")
    if curve_positions < 2:
        raise InputError(f"curve_positions must be at least 2, got {curve_positions}")
    small = sinusoidal_positions(len(SENTENCE), 4).double().numpy()
    M1 = shift_matrix(1, 4)

    pe = sinusoidal_positions(positions, dim).double().numpy()                  # (P, D)
    shift_rows = []
    for k in shifts:
        M = shift_matrix(k, dim)
        predicted = pe[:-k] @ M.T                                               # M_k PE(pos) for every pos at once
        shift_rows.append((k, positions - k, float(np.abs(predicted - pe[k:]).max()),
                           float(np.abs(M.T @ M - np.eye(dim)).max())))
    norms = np.linalg.norm(pe, axis=1)
    # PE(pos)·PE(pos+k) = Σ_i cos(kω_i): the same for every pos, shrinking (with ripples) as k grows
    dots = {k: np.einsum("pd,pd->p", pe[: positions - k], pe[k:]) for k in (0, 1, 2, 5, 10, 50, 100)}

    numbers = {
        "pe_d4": small.round(3).tolist(),
        "shift_matrix_k1_d4": M1.round(3).tolist(),
        "pe2_from_pe1": (M1 @ small[1]).round(3).tolist(),
        "shift_max_error": {k: err for k, _, err, _ in shift_rows},
        "shift_orthogonality_error": {k: orth for k, _, _, orth in shift_rows},
        "norm_min": float(norms.min()), "norm_max": float(norms.max()),
        "dot_by_distance": {k: float(v.mean()) for k, v in dots.items()},
        "dot_spread_over_pos": {k: float(v.std()) for k, v in dots.items()},
    }
    # the binary-counter analogy: column c turns with ω_(c//2); bit b of the position flips every 2^b positions
    column_curves = sinusoidal_positions(curve_positions, dim).double().numpy()[:, list(columns)]  # (N, columns)
    bits = binary_bits(curve_positions, len(columns))
    numbers["column_wavelengths"] = {c: float(2 * np.pi * np.power(10000.0, (c - c % 2) / dim)) for c in columns}
    numbers["column_sign_changes"] = {c: int((np.diff(np.sign(column_curves[:, n])) != 0).sum())
                                      for n, c in enumerate(columns)}
    numbers["bit_periods"] = {b: 2 ** (b + 1) for b in range(len(columns))}
    numbers["bit_flips"] = {b: int((np.diff(bits[:, b]) != 0).sum()) for b in range(len(columns))}
    numbers["bits_of"] = {pos: bits[pos].tolist() for pos in range(min(curve_positions, 16))}

    # rotary against added: one query and one key (random, fixed), at every pair of 64 positions
    rng = np.random.default_rng(0)
    query, key = rng.standard_normal(dim), rng.standard_normal(dim)
    rope, added = (query_key_scores(query, key, 64, rotary) for rotary in (True, False))
    offsets = (-20, -3, 0, 1, 7, 30)
    numbers["rope_spread_by_offset"] = spread_along_offsets(rope, offsets)
    numbers["added_spread_by_offset"] = spread_along_offsets(added, offsets)
    numbers["rope_score_by_offset"] = {k: float(np.diagonal(rope, offset=k)[0]) for k in offsets}

    words = "  ".join(f"{w}=pos {i}" for i, w in enumerate(SENTENCE))
    text = "\n".join([
        f"PE of \"{' '.join(SENTENCE)}\" with d_model = 4 ({words}); columns sin ω0, cos ω0, sin ω1, cos ω1:",
        matrix_text(small),
        "",
        "M_1 (a rotation by 1 rad for ω0 = 1, by 0.01 rad for ω1 = 1/100):",
        matrix_text(M1),
        f"M_1 · PE(1) = {np.array2string(M1 @ small[1], precision=3, floatmode='fixed')}  equals PE(2)",
        "",
        f"PE(pos + k) = M_k PE(pos) for every pos, d_model = {dim}, positions 0..{positions - 1}:",
        table(["k", "positions checked", "max |PE(pos+k) - M_k PE(pos)|", "max |M_kᵀM_k - I|"], shift_rows, 2),
        "",
        f"|PE(pos)| = {norms.min():.4f} .. {norms.max():.4f} for every pos (sqrt(d/2) = {np.sqrt(dim / 2):.4f}): "
        "rotations keep length",
        "PE(pos)·PE(pos+k) depends on k only (spread over pos ≈ 0) and falls with distance:",
        table(["k", "mean PE(pos)·PE(pos+k)", "spread over pos"],
              [(k, numbers["dot_by_distance"][k], numbers["dot_spread_over_pos"][k]) for k in dots]),
        "",
        f"A binary counter, positions 0..{curve_positions - 1}: bit b flips every 2^b positions, PE column c "
        f"(d_model = {dim}) turns once every 2π·10000^(2⌊c/2⌋/d) positions:",
        table(["bit", "period", "flips", "", "PE column", "wavelength", "sign changes"],
              [(b, numbers["bit_periods"][b], numbers["bit_flips"][b], "", c, numbers["column_wavelengths"][c],
                numbers["column_sign_changes"][c]) for b, c in enumerate(columns)], 2),
        "Low bits and early columns change fast, high bits and later columns slowly: PE is a smooth counter.",
        "",
        f"Rotary positions: one query and one key (d = {dim}) at every pair of positions t, s in 0..63, turned by "
        "their positions (RoPE), against PE added to each; the spread of the score over all pairs at one offset:",
        table(["offset s - t", "score, rotated", "spread, rotated", "spread, PE added"],
              [(k, numbers["rope_score_by_offset"][k], numbers["rope_spread_by_offset"][k],
                numbers["added_spread_by_offset"][k]) for k in offsets], 4),
        "Rotated, a score depends on the offset alone (spread ≈ 0); with PE added, on where the pair stands too.",
    ])

    pictures = PictureWriter(out, fmt)
    if pictures:
        from bertkit.pictures import figures

        pictures.save("pe_heatmap_50x128", lambda: figures.pe_heatmap(sinusoidal_positions(50, 128)))
        pictures.save("pe_heatmap_2048x512",
                      lambda: figures.pe_heatmap(sinusoidal_positions(2048, 512), split_sin_cos=True))
        pictures.save("pe_similarity_100x16", lambda: figures.pe_similarity(sinusoidal_positions(100, 16)))
        curves = {f"d_model = {d}": (sinusoidal_positions(200, d) @ sinusoidal_positions(1, d)[0]).tolist()
                  for d in (16, 128)}
        pictures.save("pe_dot_by_distance", lambda: figures.line_plot(
            range(200), curves, xlabel="distance k", ylabel="PE(0)·PE(k)",
            title="Dot product of two positions against their distance"))
        pictures.save("pe_columns_vs_binary", lambda: _counter_figure(column_curves, columns, bits, dim))
        labels = [str(p) for p in range(16)]
        pictures.save("rope_scores_16", lambda: figures.matrix_plot(
            rope[:16, :16], labels, labels, "key position s", "query position t",
            title="RoPE: one query and one key at positions t, s (constant along each diagonal)"))
    return Explanation("positional-encoding", CLAIM, numbers, text, pictures.paths)



def _counter_figure(curves: np.ndarray, columns: tuple[int, ...], bits: np.ndarray, dim: int):
    """PE columns over positions (left) beside the bits of the position number drawn the same way (right)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 0.9 * len(columns) + 1.2), layout="constrained")
    axes = fig.subplots(len(columns), 2, sharex=True, squeeze=False)
    positions = np.arange(len(curves))
    for row, column in enumerate(columns):
        axes[row, 0].plot(positions, curves[:, row], marker=".", markersize=3, color="tab:blue")
        axes[row, 0].set_ylabel(f"PE col {column}", fontsize=8)
        axes[row, 0].set_ylim(-1.15, 1.15)
        axes[row, 1].step(positions, bits[:, row], where="mid", color="tab:orange")
        axes[row, 1].set_ylabel(f"bit {row}", fontsize=8)
        axes[row, 1].set_ylim(-0.15, 1.15)
        for ax in axes[row]:
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("position")
    axes[-1, 1].set_xlabel("position")
    axes[0, 0].set_title(f"sinusoidal PE, columns {', '.join(map(str, columns))} of d_model = {dim}", fontsize=9)
    axes[0, 1].set_title("the position number in binary: low bits flip fast, high bits slowly", fontsize=9)
    return fig
