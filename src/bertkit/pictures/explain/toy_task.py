"""The abc -> xyz toy task: a tiny Transformer learns it with positions and cannot without them.

A "sentence" is a few letters from a..h; its "translation" reads them backwards and writes each as its mirror
letter (a ↔ z, b ↔ y, c ↔ x ...), so "abc" -> "xyz" and "cab" -> "yzx". Every output position needs a letter
from another position, chosen by where it stands: without positions self-attention sees a bag of letters, so
each output can only depend on its own letter and the bag, never on the order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import nn

from bertkit.errors import InputError
from bertkit.models.functional import rotary_tables, rotate, sinusoidal_positions
from bertkit.pictures.explain.base import Explanation, PictureWriter, one_thread, table

CLAIM = "without positional encodings a Transformer cannot learn an order-dependent mapping; with them it can"
LETTERS = "abcdefgh"
PAD = 0                                     # input and target id 0: padding, never predicted
POSITIONS = ("none", "sinusoidal", "learned", "rotary")


def translate(word: str) -> str:
    """The task itself: reverse the letters and mirror each one in the alphabet ("abc" -> "xyz")."""
    return "".join(chr(ord("z") - (ord(c) - ord("a"))) for c in reversed(word))


def encode(words: list[str]) -> torch.Tensor:
    """Letter ids (N, T) padded with PAD: 1..8 for a..h."""
    inputs = torch.full((len(words), max(len(w) for w in words)), PAD)
    for n, word in enumerate(words):
        inputs[n, :len(word)] = torch.tensor([LETTERS.index(c) + 1 for c in word])
    return inputs


def decode(ids: list[int]) -> str:
    """Output ids as letters: 1..8 for z..s (the mirror of a..h), '?' for PAD."""
    return "".join(chr(ord("z") + 1 - i) if i != PAD else "?" for i in ids)


def targets_of(inputs: torch.Tensor) -> torch.Tensor:
    """The task on ids: letter id k (a = 1) mirrors to output id k (z = 1), so each word's ids read backwards."""
    lengths = (inputs != PAD).sum(-1, keepdim=True)                          # (N, 1)
    position = torch.arange(inputs.size(1))
    source = (lengths - 1 - position).clamp(min=0)                            # output i reads letter len-1-i
    return torch.where(position < lengths, inputs.gather(1, source), PAD)


def previous_letters(inputs: torch.Tensor) -> torch.Tensor:
    """A task of offsets alone: output i is the mirror of letter i - 1 (the first letter's, of itself). Nothing in it
    depends on where a letter stands in its word, only on its neighbour, unlike the reversal."""
    previous = torch.cat([inputs[:, :1], inputs[:, :-1]], dim=1)
    return torch.where(inputs != PAD, previous, PAD)


TASKS = {"reverse": targets_of, "previous": previous_letters}  # the task's name -> its targets


def random_words(n: int, lengths: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    """`n` words of random letters as ids (N, lengths[1]), their lengths uniform in lengths[0]..lengths[1]."""
    ids = torch.randint(1, len(LETTERS) + 1, (n, lengths[1]), generator=generator)
    sizes = torch.randint(lengths[0], lengths[1] + 1, (n, 1), generator=generator)
    return torch.where(torch.arange(lengths[1]) < sizes, ids, PAD)


class RotaryEncoderLayer(nn.Module):
    """torch's TransformerEncoderLayer (post-LN, ReLU, no dropout), its queries and keys turned by their positions
    (RoPE, base 10,000): nothing is added to the letters, and a score depends on the offset between two letters
    alone. torch's layer has no place to turn them, hence this one."""

    def __init__(self, d_model: int, heads: int, d_ff: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        """x (N, T, C); padding (N, T) True at padding."""
        N, T, C = x.shape
        q, k, v = self.qkv(x).view(N, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)  # (N, H, T, D)
        cos, sin = rotary_tables(T, C // self.heads, 10_000.0, x.device)
        attended = nn.functional.scaled_dot_product_attention(
            rotate(q, cos, sin), rotate(k, cos, sin), v, attn_mask=~padding[:, None, None, :])
        x = self.norm1(x + self.out(attended.transpose(1, 2).reshape(N, T, C)))
        return self.norm2(x + self.ff(x))


class ToyTransformer(nn.Module):
    """A two-layer Transformer encoder that labels every letter with its output letter.

    `positions` is "none" (the letters alone), "sinusoidal" (the fixed table, any length), "learned" (one
    trained vector per position up to `max_len`; a longer input reuses the last one, as there is nothing else) or
    "rotary" (nothing added: each layer turns its queries and keys by their positions, any length).
    """

    def __init__(self, positions: str = "sinusoidal", max_len: int = 8, d_model: int = 32, heads: int = 4,
                 layers: int = 2) -> None:
        super().__init__()
        if positions not in POSITIONS:
            raise InputError(f"positions must be one of {', '.join(POSITIONS)}, got {positions!r}")
        self.positions, self.max_len = positions, max_len
        self.embed = nn.Embedding(len(LETTERS) + 1, d_model, padding_idx=PAD)
        self.learned = nn.Embedding(max_len, d_model) if positions == "learned" else None
        if positions == "rotary":
            self.rotary_layers = nn.ModuleList(RotaryEncoderLayer(d_model, heads, 2 * d_model) for _ in range(layers))
        else:
            layer = nn.TransformerEncoderLayer(d_model, heads, 2 * d_model, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, len(LETTERS) + 1)

    def position_vectors(self, T: int) -> torch.Tensor:
        if self.positions == "sinusoidal":
            return sinusoidal_positions(T, self.embed.embedding_dim)
        index = torch.arange(T).clamp(max=self.max_len - 1)           # past the table: its last vector again
        return self.learned(index)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        x = self.embed(inputs)
        if self.positions == "rotary":
            for layer in self.rotary_layers:
                x = layer(x, inputs == PAD)
            return self.head(x)
        if self.positions != "none":
            x = x + self.position_vectors(inputs.size(1))
        return self.head(self.encoder(x, src_key_padding_mask=inputs == PAD))


def train(positions: str, lengths: tuple[int, int], steps: int, seed: int, batch_size: int = 64,
          lr: float = 3e-3, task: str = "reverse") -> ToyTransformer:
    """Train a ToyTransformer on fresh random words of `lengths` (cross-entropy on every real letter), for the
    task `task` of TASKS."""
    targets = TASKS[task]
    torch.manual_seed(seed)
    model = ToyTransformer(positions, max_len=lengths[1])
    data = torch.Generator().manual_seed(seed + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    with one_thread():
        for _ in range(steps):
            inputs = random_words(batch_size, lengths, data)
            loss = nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets(inputs).flatten(),
                                               ignore_index=PAD)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


@dataclass
class Score:
    letters: float           # share of output letters right
    words: float             # share of whole words right
    by_position: list[float]  # share right at each output position (words of one length)


@torch.no_grad()
def score(model: ToyTransformer, length: int, n: int = 500, seed: int = 1234, task: str = "reverse") -> Score:
    """Accuracy on `n` fresh words of exactly `length` letters."""
    inputs = random_words(n, (length, length), torch.Generator().manual_seed(seed))
    right = model(inputs).argmax(-1) == TASKS[task](inputs)
    return Score(float(right.float().mean()), float(right.all(-1).float().mean()),
                 right.float().mean(0).tolist())


def predict(model: ToyTransformer, word: str) -> str:
    """The model's translation of one word."""
    with torch.no_grad():
        return decode(model(encode([word])).argmax(-1)[0].tolist())


def explain(out: str | os.PathLike | None = None, fmt: str = "png", length: int = 6, steps: int = 200,
            seed: int = 0) -> Explanation:
    """Train the same tiny Transformer with and without positional encodings on words of `length` letters."""
    if not 2 <= length <= 12:
        raise InputError(f"length must be 2..12 letters, got {length}")
    if steps < 1:
        raise InputError(f"steps must be at least 1, got {steps}")
    models = {p: train(p, (length, length), steps, seed) for p in ("none", "sinusoidal")}
    examples = [(word * length)[:length] for word in ("abcdefgh", "cabbage", "hgfedcba")]
    with one_thread():
        scores = {p: score(m, length) for p, m in models.items()}
        translations = {w: {"target": translate(w), **{p: predict(m, w) for p, m in models.items()}}
                        for w in examples}
    numbers = {
        "length": length, "steps": steps,
        "chance": 1 / len(LETTERS),
        **{f"{p}_letter_accuracy": s.letters for p, s in scores.items()},
        **{f"{p}_word_accuracy": s.words for p, s in scores.items()},
        "examples": translations,
    }
    rows = [("no positions", scores["none"].letters, scores["none"].words),
            ("sinusoidal positions", scores["sinusoidal"].letters, scores["sinusoidal"].words)]
    text = "\n".join([
        f"task: reverse {length} letters from {LETTERS[0]}..{LETTERS[-1]} and mirror each (a↔z): "
        f"abc -> {translate('abc')}",
        f"a 2-layer Transformer encoder (d_model 32, 4 heads), {steps} steps of 64 random words, seed {seed};",
        "accuracy on 500 new words:",
        table(["", "letters right", "words right"], rows, 3),
        f"(guessing one letter: {1 / len(LETTERS):.3f})",
        "",
        table(["input", "target", "no positions", "with positions"],
              [(w, e["target"], e["none"], e["sinusoidal"]) for w, e in numbers["examples"].items()]),
        "",
        "Without positions an output can only depend on its own letter and the bag of letters around it,",
        "so it cannot tell which letter stands at the mirrored place; with positions the mapping is learned.",
    ])

    pictures = PictureWriter(out, fmt)
    if pictures:
        from bertkit.pictures import figures

        pictures.save("toy_task_by_position", lambda: figures.bar_plot(
            [str(i) for i in range(length)],
            {"no positions": scores["none"].by_position, "sinusoidal positions": scores["sinusoidal"].by_position},
            ylabel="share of letters right", title=f"abc -> {translate('abc')}: accuracy at each output position"))
    return Explanation("toy-task", CLAIM, numbers, text, pictures.paths)
