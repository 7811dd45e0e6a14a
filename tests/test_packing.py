"""The packing rule run on all documents at once (data/packing.py) against a direct implementation of
google-research/bert's create_instances_from_document, walking one document at a time with the same choices."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bertkit.data import packing
from bertkit.data.packing import (
    CUT,
    OTHER,
    RANDOM_NEXT,
    SHORT,
    SPLIT,
    START,
    SWAP,
    TARGET,
    TRUNCATE_A,
    TRUNCATE_B,
    Corpus,
    Packing,
    draw,
    plan_in_memory,
    randint,
    removals,
    uniform,
)
from toy_store import write_store


def reference(documents: list[list[list[int]]], rule: Packing) -> list[tuple]:
    """google's rule, as bertkit applies it (a one-sentence chunk is cut at a token), on lists of token ids.

    Each choice is read from `draw(0, seed, document, instance)` and what it chooses, as data/packing.py reads it."""
    out = []
    for e, document in enumerate(documents):
        first = draw(0, rule.seed, e, 0)
        target = rule.max_tokens
        if uniform(first, SHORT)[0] < rule.short_seq_prob:
            target = int(randint(2, rule.max_tokens, first, TARGET)[0])
        chunk, length, i, k = [], 0, 0, 0
        while i < len(document):
            chunk.append(document[i])
            length += len(document[i])
            if i == len(document) - 1 or length >= target:
                key = draw(0, rule.seed, e, k)

                def choose(low, high, what, *more, key=key):
                    return int(randint(low, high, key, what, *more)[0])

                b, label = None, None
                if not rule.pair:
                    a = sum(chunk, [])
                else:
                    pieces = chunk
                    if len(chunk) == 1:  # one long sentence: cut it at a random token
                        only = chunk[0]
                        cut = choose(1, len(only) - 1, CUT) if len(only) > 1 else 1
                        pieces = [only[:cut], only[cut:]]
                    a_end = choose(1, len(pieces) - 1, SPLIT) if len(chunk) > 1 else 1
                    a, b, label = sum(pieces[:a_end], []), sum(pieces[a_end:], []), 0
                    if rule.objective == "mlm+nsp" and uniform(key, RANDOM_NEXT)[0] < 0.5:
                        other = e
                        for attempt in range(10):
                            other = choose(0, len(documents) - 1, OTHER, attempt)
                            if other != e:
                                break
                        random_document = documents[other]
                        b = []
                        for sentence in random_document[choose(0, len(random_document) - 1, START):]:
                            b = b + sentence
                            if len(b) >= max(1, target - len(a)):
                                break
                        label = 1
                        if len(chunk) > 1:
                            i -= len(chunk) - a_end  # put back the sentences the random B did not use
                    elif rule.objective == "mlm+sop" and uniform(key, SWAP)[0] < 0.5:
                        a, b, label = b, a, 1
                removed = {"a": 0, "b": 0}
                while len(a) + len(b or []) > rule.max_tokens:  # truncate_seq_pair
                    name = "a" if b is None or len(a) > len(b) else "b"
                    segment, j = (a if name == "a" else b), removed[name]
                    removed[name] += 1
                    coin = int(draw(key, TRUNCATE_A if name == "a" else TRUNCATE_B, j // 64)[0]) >> (j % 64) & 1
                    del segment[0 if coin else -1]
                if a and (b is None or b):
                    out.append((a, b, label))
                chunk, length = [], 0
                k += 1
            i += 1
    return out


def planned(stores, entries, rule: Packing) -> list[tuple]:
    """The plan's instances as token lists, a document's in order, documents in order."""
    corpus = Corpus(stores)
    plan = plan_in_memory(corpus, np.asarray(entries, np.int64), rule)
    out = []
    for j in np.argsort(plan.entry, kind="stable"):
        a = corpus.tokens(int(plan.a_start[j]), int(plan.a_len[j])).tolist()
        b = corpus.tokens(int(plan.b_start[j]), int(plan.b_len[j])).tolist() if rule.pair else None
        out.append((a, b, int(plan.label[j]) if rule.pair else None))
    return out


def toy_documents(count: int, seed: int) -> list[list[list[int]]]:
    """Documents whose token ids are all different (so a range of ids says where it came from), with sentences of
    1 to 90 tokens: single long sentences, chunks of many short ones, truncation of more than 64 tokens."""
    rng, documents, token = random.Random(seed), [], 10
    for _ in range(count):
        document = []
        for _ in range(rng.randint(1, 12)):
            n = rng.choice([1, 2, 3, 5, 8, 13, 40, 90])
            document.append(list(range(token, token + n)))
            token += n
        documents.append(document)
    return documents


@pytest.mark.parametrize("objective", ["mlm+nsp", "mlm+sop", "mlm"])
@pytest.mark.parametrize("max_seq_length, short_seq_prob, seed", [(32, 0.1, 1), (16, 0.5, 2), (128, 0.0, 3),
                                                                   (9, 0.3, 4)])
def test_the_plan_is_googles_rule(tmp_path, objective, max_seq_length, short_seq_prob, seed):
    documents = toy_documents(30, seed)
    store = write_store(tmp_path / "store", documents)
    rule = Packing(max_seq_length, objective, short_seq_prob, seed)
    expected = reference(documents, rule)
    assert len(expected) > 40
    assert planned([store], range(len(documents)), rule) == expected
    if rule.pair:
        labels = [label for _, _, label in expected]
        assert 0 < sum(labels) < len(labels)


def test_documents_named_twice_across_stores_in_a_small_pool(tmp_path, monkeypatch):
    """Copies are packed afresh, documents come from two stores, and the pool refills mid-way."""
    monkeypatch.setattr(packing, "POOL", 4)
    documents = toy_documents(25, 7)
    stores = [write_store(tmp_path / "a", documents[:10]), write_store(tmp_path / "b", documents[10:])]
    entries = [0, 0, 1, 3, 3, 3, 5, 9, 10, 11, 11, 12, 20, 24, 24]
    for objective in ("mlm+nsp", "mlm+sop", "mlm"):
        rule = Packing(24, objective, 0.2, 7)
        expected = reference([documents[e] for e in entries], rule)
        assert planned(stores, entries, rule) == expected


def test_choices_are_pure_functions_of_their_keys():
    assert np.array_equal(draw(0, 5, np.arange(4), 2, 7), draw(draw(0, 5, np.arange(4), 2), 7))
    assert np.array_equal(draw(0, 5, np.arange(4), 2, 7), [draw(0, 5, i, 2, 7)[0] for i in range(4)])
    values = uniform(draw(0, 1, np.arange(20000)), 3)
    assert values.min() >= 0 and values.max() < 1 and abs(values.mean() - 0.5) < 0.01
    ints = randint(np.full(20000, 2), np.arange(20000) % 5 + 2, draw(0, 1, np.arange(20000)), 4)
    assert (ints >= 2).all() and (ints <= np.arange(20000) % 5 + 2).all()
    assert set(randint(0, 3, draw(0, 2, np.arange(1000)), 9).tolist()) == {0, 1, 2, 3}


def test_removals_match_removing_one_token_at_a_time():
    for a_len in range(0, 12):
        for b_len in range(0, 12):
            for limit in range(1, 20):
                a, b = a_len, b_len
                while a + b > limit:
                    if a > b:
                        a -= 1
                    else:
                        b -= 1
                got = removals(np.array([a_len]), np.array([b_len]), limit)
                assert (got[0][0], got[1][0]) == (a_len - a, b_len - b)


def test_bad_settings_are_named(tmp_path):
    store = write_store(tmp_path / "one", toy_documents(1, 0))
    with pytest.raises(ValueError, match="at least 2 documents"):
        plan_in_memory(Corpus([store]), np.array([0]), Packing(32, "mlm+nsp"))
    with pytest.raises(ValueError, match=r"objective 'mlm\+mop'"):
        Packing(32, "mlm+mop")
    with pytest.raises(ValueError, match="too short"):
        Packing(7)
