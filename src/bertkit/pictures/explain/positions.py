"""Learned, sinusoidal and rotary positions: the same toy task, then words longer than any seen in training.

The three models learn the abc -> xyz task (reverse, mirror each letter) on words of 3..8 letters. Then they read
longer words. A learned table has one vector per trained position and none past it: here a longer input reuses
the last trained vector for every later position (the alternative is to refuse the input). The sinusoidal table
has a vector for every position, but the model has never seen those vectors: whether it can use them is the test.
Rotary positions (RoPE) add nothing to the letters: each layer turns queries and keys by their positions, so a
score sees only the offset between two letters; offsets up to 7 were trained, longer words bring larger ones.
"""

from __future__ import annotations

import os

from bertkit.errors import InputError
from bertkit.pictures.explain.base import Explanation, PictureWriter, one_thread, table
from bertkit.pictures.explain.toy_task import LETTERS, TASKS, score, train, translate

CLAIM = ("learned, sinusoidal and rotary positions all fit the trained lengths; longer words test whether any "
         "generalises")
KINDS = {"sinusoidal": "sinusoidal (fixed)", "learned": "learned table", "rotary": "rotary (RoPE)"}


def _mean(by_length: dict, lengths: list[int]) -> float:
    return sum(by_length[n]["letters"] for n in lengths) / len(lengths)


def _verdict(numbers: dict, trained: list[int], beyond: list[int]) -> str:
    """What the two tasks showed, in words that follow the numbers."""
    if not beyond or not trained:
        return "(no length past the trained ones, or none within them, was tested)"
    lines = []
    for task, name in (("reverse", "reversal"), ("previous", "previous letter")):
        by_kind = numbers[task]
        fit = {kind: _mean(by_kind[kind], trained) for kind in KINDS}
        past = {kind: _mean(by_kind[kind], beyond) for kind in KINDS}
        lines.append(f"{name}: letters right within the trained lengths "
                     + ", ".join(f"{KINDS[k]} {fit[k]:.3f}" for k in KINDS) + "; past them "
                     + ", ".join(f"{KINDS[k]} {past[k]:.3f}" for k in KINDS) + ".")
    reverse, previous = numbers["reverse"], numbers["previous"]
    if _mean(reverse["rotary"], trained) < 0.9 <= min(_mean(reverse[k], trained) for k in ("sinusoidal", "learned")):
        lines.append("Rotary positions do not fit the reversal even at the trained lengths: a score sees only the "
                     "offset between two letters,\nand output i must read letter n - 1 - i, a place in the word "
                     "that offsets alone do not give (nothing marks the word's edges).")
    if max(_mean(reverse[k], beyond) for k in KINDS) < 0.5:
        lines.append("Past the trained lengths the reversal falls towards guessing for all three: the sinusoidal "
                     "vectors exist there but the model\nnever learned to use them, the learned table has nothing "
                     "new to give, and the rotary model never fitted it.")
    if _mean(previous["rotary"], beyond) >= 0.9:
        others = [KINDS[k] for k in ("sinusoidal", "learned") if _mean(previous[k], beyond) < 0.9]
        lines.append("Reading the previous letter needs offsets only: rotary positions carry it to every longer "
                     "word, because offset 1 is offset 1 at any place"
                     + (f",\nwhile the {' and the '.join(others)} meet places they were never trained at."
                        if others else "."))
    return "\n".join(lines)


def explain(out: str | os.PathLike | None = None, fmt: str = "png", train_lengths: tuple[int, int] = (3, 8),
            test_lengths: tuple[int, ...] = (4, 6, 8, 10, 12, 16), steps: int = 300, seed: int = 0) -> Explanation:
    """Train each kind on `train_lengths` words, for each task, and score them at every length of `test_lengths`."""
    shortest, longest = train_lengths
    if not 1 <= shortest <= longest:
        raise InputError(f"train_lengths must be (shortest, longest) with 1 <= shortest <= longest, "
                         f"got {train_lengths}")
    if not test_lengths or min(test_lengths) < 1:
        raise InputError(f"test_lengths must be positive lengths, got {test_lengths}")
    if steps < 1:
        raise InputError(f"steps must be at least 1, got {steps}")
    scores = {}
    for task in TASKS:
        models = {kind: train(kind, train_lengths, steps, seed, task=task) for kind in KINDS}
        with one_thread():
            scores[task] = {kind: {n: score(model, n, task=task) for n in test_lengths}
                            for kind, model in models.items()}
    trained = [n for n in test_lengths if shortest <= n <= longest]
    beyond = [n for n in test_lengths if n > longest]
    numbers = {
        "train_lengths": list(train_lengths), "steps": steps, "chance": 1 / len(LETTERS),
        **{task: {kind: {n: {"letters": s.letters, "words": s.words} for n, s in by_length.items()}
                  for kind, by_length in by_kind.items()} for task, by_kind in scores.items()},
        # the longest test word, position by position: learned positions past the table all share its last vector
        "by_position_longest": {kind: by_length[max(test_lengths)].by_position
                                for kind, by_length in scores["reverse"].items()},
    }

    def rows(task: str) -> list[tuple]:
        return [(n, "yes" if shortest <= n <= longest else "no", *(scores[task][kind][n].letters for kind in KINDS),
                 *(scores[task][kind][n].words for kind in KINDS)) for n in test_lengths]

    header = ["length", "trained", *(f"letters {k}" for k in KINDS), *(f"words {k}" for k in KINDS)]
    text = "\n".join([
        f"Two tasks, trained on words of {shortest}..{longest} letters, {steps} steps of 64 words, seed {seed}; the "
        "same 2-layer Transformer with",
        "learned, sinusoidal or rotary positions. The learned table has "
        f"{longest} vectors: a longer word reuses vector {longest - 1} for every later position.",
        "",
        f"reversal: reverse the letters and mirror each (abc -> {translate('abc')}): output i reads letter n - 1 - i",
        table(header, rows("reverse"), 3),
        "",
        "previous letter: output i is the mirror of letter i - 1 (abc -> zzy): an offset, wherever it stands",
        table(header, rows("previous"), 3),
        f"(guessing one letter: {1 / len(LETTERS):.3f})",
        "",
        _verdict(numbers, trained, beyond),
    ])

    pictures = PictureWriter(out, fmt)
    if pictures:
        from bertkit.pictures import figures

        pictures.save("positions_by_length", lambda: figures.line_plot(
            list(test_lengths), {f"{KINDS[k]}, {name}": [scores[task][k][n].letters for n in test_lengths]
                                 for task, name in (("reverse", "reversal"), ("previous", "previous letter"))
                                 for k in KINDS},
            xlabel="word length (letters)", ylabel="share of letters right",
            reference={"guessing": 1 / len(LETTERS)},
            title=f"Learned, sinusoidal and rotary positions, trained on {shortest}..{longest} letters"))
        n = max(test_lengths)
        pictures.save("positions_by_position", lambda: figures.bar_plot(
            [str(i) for i in range(n)], {KINDS[k]: numbers["by_position_longest"][k] for k in KINDS},
            ylabel="share of letters right", title=f"Reversal, words of {n} letters, position by position"))
    return Explanation("positions", CLAIM, numbers, text, pictures.paths)
