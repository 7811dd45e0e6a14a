"""The packing rule run on all documents at once (data/pretraining/packing.py) against a direct implementation of
google-research/bert's create_instances_from_document, walking one document at a time with the same choices."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bertkit.data.pretraining import packing
from bertkit.data.pretraining.chain import StoreChain
from bertkit.data.pretraining.packing import (
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
    Packing,
    draw,
    plan_in_memory,
    randint,
    removals,
    uniform,
)
from toy_store import write_store

# The reference's random source, written here on plain Python integers: splitmix64, the generator
# whose outputs data/pretraining/packing.py computes with numpy for many documents at once.
_M64 = (1 << 64) - 1


def mix(key: int, *values: int) -> int:
    """64 random bits: `key` with `values` mixed in one after another by splitmix64's step and finaliser."""
    for value in values:
        h = ((key ^ value) + 0x9E3779B97F4A7C15) & _M64
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _M64
        key = h ^ (h >> 31)
    return key


def chance(key: int, *values: int) -> float:
    """A float in [0, 1): the top 53 bits."""
    return (mix(key, *values) >> 11) * 2.0 ** -53


def pick(low: int, high: int, key: int, *values: int) -> int:
    """An integer in [low, high], both included."""
    span = high - low + 1
    return low + min(int(chance(key, *values) * span), span - 1)


def reference(documents: list[list[list[int]]], rule: Packing) -> list[tuple]:
    """google's rule, as bertkit applies it (a one-sentence chunk is cut at a token), on lists of token ids, one
    document at a time as create_instances_from_document walks it.

    Each choice is read from the key mix(0, seed, document, instance) and what it chooses (the names imported from
    data/pretraining/packing.py), as data/pretraining/packing.py reads it; nothing else of that module is used."""
    out = []
    for e, document in enumerate(documents):
        first = mix(0, rule.seed, e, 0)
        target = rule.max_tokens
        if chance(first, SHORT) < rule.short_seq_prob:
            target = pick(2, rule.max_tokens, first, TARGET)
        chunk, length, i, k = [], 0, 0, 0
        while i < len(document):
            chunk.append(document[i])
            length += len(document[i])
            if i == len(document) - 1 or length >= target:
                key = mix(0, rule.seed, e, k)

                def choose(low, high, what, *more, key=key):
                    return pick(low, high, key, what, *more)

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
                    if rule.objective == "mlm+nsp" and chance(key, RANDOM_NEXT) < 0.5:
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
                    elif rule.objective == "mlm+sop" and chance(key, SWAP) < 0.5:
                        a, b, label = b, a, 1
                removed = {"a": 0, "b": 0}
                while len(a) + len(b or []) > rule.max_tokens:  # truncate_seq_pair
                    name = "a" if b is None or len(a) > len(b) else "b"
                    segment, j = (a if name == "a" else b), removed[name]
                    removed[name] += 1
                    coin = mix(key, TRUNCATE_A if name == "a" else TRUNCATE_B, j // 64) >> (j % 64) & 1
                    del segment[0 if coin else -1]
                if a and (b is None or b):
                    out.append((a, b, label))
                chunk, length = [], 0
                k += 1
            i += 1
    return out


def planned(stores, entries, rule: Packing) -> list[tuple]:
    """The plan's instances as token lists, a document's in order, documents in order."""
    corpus = StoreChain(stores)
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


def test_the_rules_choices_show_in_the_plan(tmp_path):
    """Read off the plan, whatever the reference says: NSP's random B (label 1) comes from another document, its real
    B (label 0) follows A in A's document; SOP's label 1 is B before A in one document; short_seq_prob makes shorter
    instances. Toy token ids are unique and increase through the corpus, so an id tells its document and place."""
    documents = toy_documents(60, 5)
    store = write_store(tmp_path / "store", documents)
    owner = {t: d for d, document in enumerate(documents) for sentence in document for t in sentence}
    for objective in ("mlm+nsp", "mlm+sop"):
        instances = planned([store], range(len(documents)), Packing(64, objective, 0.1, 5))
        for a, b, label in instances:
            same = owner[a[0]] == owner[a[-1]] == owner[b[0]] == owner[b[-1]]
            if objective == "mlm+nsp":
                assert (owner[b[0]] != owner[a[0]] and owner[b[0]] == owner[b[-1]]) if label else \
                    (same and a[-1] < b[0])
            else:
                assert same and ((b[-1] < a[0]) if label else (a[-1] < b[0]))
        assert 0.3 < np.mean([label for _, _, label in instances]) < 0.7
    counts = {p: len(planned([store], range(len(documents)), Packing(64, "mlm", p, 5))) for p in (0.0, 1.0)}
    assert counts[1.0] > 1.2 * counts[0.0]  # shorter targets: the same documents cut into more instances


def test_the_references_random_source_is_packings():
    keys = [0, 1, 12345, 2**63 + 7]
    for key in keys:
        for values in ((1,), (5, 2, 7), (2**40, 3)):
            assert mix(key, *values) == int(draw(key, *values)[0])
            assert chance(key, *values) == float(uniform(draw(key, *values[:-1]) if len(values) > 1 else key,
                                                         values[-1])[0])
    many = np.arange(1000)
    assert [mix(0, 9, 4, int(i), 3) for i in many] == draw(0, 9, 4, many, 3).tolist()
    assert [pick(2, 9, mix(0, 1, int(i)), 4) for i in many] == randint(2, 9, draw(0, 1, many), 4).tolist()


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
        plan_in_memory(StoreChain([store]), np.array([0]), Packing(32, "mlm+nsp"))
    with pytest.raises(ValueError, match=r"objective 'mlm\+mop'"):
        Packing(32, "mlm+mop")
    with pytest.raises(ValueError, match="too short"):
        Packing(7)


def test_the_store_chain_is_found_under_its_new_name_only():
    from bertkit.data.pretraining import chain

    assert chain.StoreChain is StoreChain and not hasattr(packing, "Corpus") and not hasattr(chain, "Corpus")
