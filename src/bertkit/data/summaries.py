"""Summarisation data: inews' news articles as (body, title) pairs, for generating a title from its body.

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
