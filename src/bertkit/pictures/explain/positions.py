"""Learned against sinusoidal position embeddings: the same toy task, then words longer than any seen in training.

Both models learn the abc -> xyz task (reverse, mirror each letter) on words of 3..8 letters. Then they read
longer words. A learned table has one vector per trained position and none past it: here a longer input reuses
the last trained vector for every later position (the alternative is to refuse the input). The sinusoidal table
has a vector for every position, but the model has never seen those vectors: whether it can use them is the test.
"""

from __future__ import annotations

import os

from bertkit.errors import InputError
from bertkit.pictures.explain.base import Explanation, PictureWriter, one_thread, table
from bertkit.pictures.explain.toy_task import LETTERS, score, train, translate

CLAIM = "learned and sinusoidal positions both fit the trained lengths; longer words test whether either generalises"
KINDS = {"sinusoidal": "sinusoidal (fixed)", "learned": "learned table"}


def _verdict(numbers: dict, beyond: list[int]) -> str:
    """What the longer words showed, in words that follow the numbers."""
    if not beyond:
        return "(no length past the trained ones was tested)"
    past = {kind: sum(numbers[kind][n]["letters"] for n in beyond) / len(beyond) for kind in KINDS}
    said = ", ".join(f"{KINDS[kind]} {share:.3f}" for kind, share in past.items())
    text = f"Past the trained lengths, letters right on average: {said}."
    if max(past.values()) < 0.5:
        text += ("\nBoth fall towards guessing: the sinusoidal vectors exist there but the model never learned "
                 "to use them,\nand the learned table has nothing new to give.")
    return text


def explain(out: str | os.PathLike | None = None, fmt: str = "png", train_lengths: tuple[int, int] = (3, 8),
            test_lengths: tuple[int, ...] = (4, 6, 8, 10, 12, 16), steps: int = 300, seed: int = 0) -> Explanation:
    """Train both kinds on `train_lengths` words, score them at every length of `test_lengths`."""
    shortest, longest = train_lengths
    if not 1 <= shortest <= longest:
        raise InputError(f"train_lengths must be (shortest, longest) with 1 <= shortest <= longest, "
                         f"got {train_lengths}")
    if not test_lengths or min(test_lengths) < 1:
        raise InputError(f"test_lengths must be positive lengths, got {test_lengths}")
    if steps < 1:
        raise InputError(f"steps must be at least 1, got {steps}")
    models = {kind: train(kind, train_lengths, steps, seed) for kind in KINDS}
    with one_thread():
        scores = {kind: {n: score(model, n) for n in test_lengths} for kind, model in models.items()}
    beyond = [n for n in test_lengths if n > longest]
    numbers = {
        "train_lengths": list(train_lengths), "steps": steps, "chance": 1 / len(LETTERS),
        **{kind: {n: {"letters": s.letters, "words": s.words} for n, s in by_length.items()}
           for kind, by_length in scores.items()},
        # the longest test word, position by position: learned positions past the table all share its last vector
        "by_position_longest": {kind: by_length[max(test_lengths)].by_position for kind, by_length in scores.items()},
    }
    rows = [(n, "yes" if shortest <= n <= longest else "no", *(scores[kind][n].letters for kind in KINDS),
             *(scores[kind][n].words for kind in KINDS)) for n in test_lengths]
    text = "\n".join([
        f"task: reverse the letters and mirror each (abc -> {translate('abc')}), trained on words of "
        f"{shortest}..{longest} letters,",
        f"{steps} steps of 64 words, seed {seed}; the same 2-layer Transformer with learned or sinusoidal positions.",
        f"The learned table has {longest} vectors: a longer word reuses vector {longest - 1} for every later "
        "position.",
        "",
        table(["length", "trained", *(f"letters {k}" for k in KINDS), *(f"words {k}" for k in KINDS)], rows, 3),
        f"(guessing one letter: {1 / len(LETTERS):.3f})",
        "",
        _verdict(numbers, beyond),
    ])

    pictures = PictureWriter(out, fmt)
    if pictures:
        from bertkit.pictures import figures

        pictures.save("positions_by_length", lambda: figures.line_plot(
            list(test_lengths), {KINDS[k]: [scores[k][n].letters for n in test_lengths] for k in KINDS},
            xlabel="word length (letters)", ylabel="share of letters right",
            reference={"guessing": 1 / len(LETTERS)},
            title=f"Learned vs sinusoidal positions, trained on {shortest}..{longest} letters"))
        n = max(test_lengths)
        pictures.save("positions_by_position", lambda: figures.bar_plot(
            [str(i) for i in range(n)], {KINDS[k]: numbers["by_position_longest"][k] for k in KINDS},
            ylabel="share of letters right", title=f"Words of {n} letters, position by position"))
    return Explanation("positions", CLAIM, numbers, text, pictures.paths)
