"""CorpusMix: the corpora of a run and their weights, read from the command line's form once."""

from __future__ import annotations

import pytest

from bertkit.data.pretraining import CorpusMix
from bertkit.errors import InputError


def test_a_corpus_named_k_times_weighs_k_in_first_named_order():
    mix = CorpusMix.parse(["zh", "news.txt", "zh", "news.txt", "news.txt", "store"])
    assert mix.parts == (("zh", 2), ("news.txt", 3), ("store", 1))
    assert mix.corpora == ["zh", "news.txt", "store"] and mix.weights == [2, 3, 1]
    assert mix.as_dict() == {"zh": 2, "news.txt": 3, "store": 1}


def test_the_command_line_form_round_trips():
    mix = CorpusMix((("zh", 1), ("news.txt", 3)))
    assert mix.specs() == ["zh", "news.txt", "news.txt", "news.txt"]
    assert CorpusMix.parse(mix.specs()) == mix


@pytest.mark.parametrize("parts, message", [
    ((), "no corpus given"),
    ((("zh", 1), ("zh", 2)), "named twice"),
    ((("zh", 0),), "weight of corpus zh is 0"),
    ((("zh", 1.5),), "weight of corpus zh is 1.5"),
    ((("zh", True),), "weight of corpus zh is True"),
])
def test_a_mix_that_means_nothing_is_refused(parts, message):
    with pytest.raises(InputError, match=message):
        CorpusMix(parts)
