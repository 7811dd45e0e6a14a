"""Summarisation data: inews' news articles as (body, title) pairs, for generating a title from its body, or a
user's own source -> target pairs (a TSV or JSON Lines file: `read_pairs`).

inews ships official train / dev / test splits (`data.tasks.inews_split`); an article without a title or a body
is left out (train 5,298 / dev 993 / test 990 remain). White space runs are collapsed to one space: ROUGE on
characters does not count them, and a body's line breaks carry nothing a title needs.
"""

from __future__ import annotations

SPLITS = ("train", "dev", "test")


def inews_articles(split: str) -> list[tuple[str, str]]:
    """inews' official `split` as (body, title) pairs, white space collapsed; articles missing either are left out."""
    from bertkit.data.tasks import inews_split

    titles, bodies, _ = inews_split(split)
    pairs = [(" ".join(body.split()), " ".join(title.split())) for title, body in zip(titles, bodies)]
    return [(body, title) for body, title in pairs if body and title]


def load_articles() -> dict[str, list[tuple[str, str]]]:
    """inews' three splits of (body, title) pairs."""
    return {split: inews_articles(split) for split in SPLITS}


MIN_PAIRS = 3  # one to train on, one to measure the loss on, one to score


def pairs_file_splits(path: str, seed: int = 0) -> dict[str, list[tuple[str, str]]]:
    """A user's pairs file cut into train / dev / test: a tenth each for dev and test (at least one pair each),
    the rest to train on, shuffled by `seed` (`data.tasks.seeded_split`)."""
    from bertkit.data.readers import read_pairs
    from bertkit.data.tasks import seeded_split
    from bertkit.errors import InputError

    pairs = [(" ".join(source.split()), " ".join(target.split())) for source, target in read_pairs(path)]
    if len(pairs) < MIN_PAIRS:
        raise InputError(f"{path} has {len(pairs)} usable source -> target pairs; at least {MIN_PAIRS} are needed "
                         "(one to train on, one held out for the loss, one to score)")
    share = max(1, round(len(pairs) * 0.1)) / len(pairs)
    return seeded_split(pairs, seed, dev=share, test=share)
