"""The corpora a run pretrains on, each with its weight.

A corpus of weight k is read, split into training and held-out documents, and held out once; its training
documents are packed k times (each copy packed and masked afresh), so it weighs k times in training. On the command
line a corpus named k times weighs k: `--corpus zh news news` is the mix {zh: 1, news: 2}. `CorpusMix.parse` reads
that form, `specs` writes it back: nothing else counts names.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from bertkit.errors import InputError


@dataclass(frozen=True)
class CorpusMix:
    """(corpus, weight) pairs in the order the corpora were first named; a corpus is a file, directory, prepared
    store or named corpus, as `--corpus` takes it."""

    parts: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        if not self.parts:
            raise InputError("no corpus given")
        names = [name for name, _ in self.parts]
        if len(set(names)) != len(names):
            raise InputError(f"a corpus is named twice in the mix {names}: give each once, with its weight")
        for name, weight in self.parts:
            if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
                raise InputError(f"the weight of corpus {name} is {weight!r}; a weight is a whole number, at least 1")

    @classmethod
    def parse(cls, specs: list[str]) -> CorpusMix:
        """The mix of `--corpus` values: each distinct value once, weighing as often as it is named."""
        counts = Counter(specs)
        return cls(tuple((spec, counts[spec]) for spec in dict.fromkeys(specs)))

    def specs(self) -> list[str]:
        """The command line's form: each corpus named as often as it weighs."""
        return [name for name, weight in self.parts for _ in range(weight)]

    @property
    def corpora(self) -> list[str]:
        return [name for name, _ in self.parts]

    @property
    def weights(self) -> list[int]:
        return [weight for _, weight in self.parts]

    def as_dict(self) -> dict[str, int]:
        return dict(self.parts)
