"""Pretraining instances from token stores: google-research/bert's packing rule, run on every document at once.

The rule (create_pretraining_data.py, `create_instances_from_document`, as bertkit applies it). For each document:

1. the target length is max_tokens (max_seq_length less the room for [CLS] and [SEP]s), or, with probability
   short_seq_prob, a random length in [2, max_tokens], so the model also sees short inputs;
2. a chunk is the consecutive sentences from where the last one stopped until they hold >= target tokens, or the
   document ends;
3. pair objectives cut the chunk in two: A is its first `a_end` sentences (random in [1, n - 1]), B the rest; a
   chunk of one sentence is cut at a random token instead. NSP (label 1 half the time): B is replaced by text of
   another document (from a random sentence on, until it holds target - len(A) tokens), and the chunk's sentences
   that B did not use are *put back*: the next chunk starts after A. SOP (label 1 half the time): A and B swap.
   MLM alone: the chunk is one segment;
4. the longer segment loses a token from its front or its back (at random) until the pair fits max_tokens;
5. an instance with an empty segment is dropped.

Every random choice is a pure function of (seed, document entry, instance number, what is chosen) (`draw`): nothing
depends on the order in which choices are made. So the rule runs with numpy on all documents together, one
instance per document per round (`build_plan`), and a direct implementation that walks one document at a time, as
google's code does, gives the same instances (tests/test_packing.py holds one). Instances are a *plan* of small
integers: the token range of A and of B in the stores and the label (`Plan`); they are assembled from the stores
when a batch is drawn (instances.PretrainingDataset); plans.py keeps them beside the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bertkit.data.pretraining.chain import StoreChain
from bertkit.data.pretraining.store import FileReader
from bertkit.errors import InputError
from bertkit.utils.constants import MLM, MLM_NSP, OBJECTIVES
from bertkit.utils.rng import MASK64, draw

# An instance of the plan: A is tokens a_start..a_start+a_len of the corpus, B likewise (b_len 0: no B).
PLAN_ROW = np.dtype([("a_start", "<i8"), ("b_start", "<i8"), ("a_len", "<u2"), ("b_len", "<u2"), ("label", "i1")])
POOL = 1 << 16             # documents packed together: bounds the memory of a round

# What each draw chooses (the 4th value of `draw`).
SHORT, TARGET, CUT, SPLIT, RANDOM_NEXT, OTHER, START, SWAP, TRUNCATE_A, TRUNCATE_B, MASKING = range(1, 12)


@dataclass(frozen=True)
class Packing:
    """The settings of the rule."""

    max_seq_length: int
    objective: str = MLM_NSP
    short_seq_prob: float = 0.1
    seed: int = 12345

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise InputError(f"objective {self.objective!r} is not one of {', '.join(OBJECTIVES)}")
        if self.max_seq_length < 8:
            raise InputError(f"max_seq_length {self.max_seq_length} is too short for pretraining instances "
                             "(need >= 8)")

    @property
    def pair(self) -> bool:
        return self.objective != MLM

    @property
    def max_tokens(self) -> int:
        return self.max_seq_length - (3 if self.pair else 2)  # room for [CLS] and one or two [SEP]


# ---- random choices as pure functions ------------------------------------------------------------
# (of `draw`: bertkit.utils.rng, the one splitmix64 the trainer's collation seeds come from too)

def uniform(key, *values) -> np.ndarray:
    """A float in [0, 1) per element: 53 bits of `draw(key, *values)`."""
    return (draw(key, *values) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def randint(low, high, key, *values) -> np.ndarray:
    """An integer in [low, high] (both included, high >= low) per element, from `draw(key, *values)`."""
    low, span = np.asarray(low, np.int64), np.asarray(high, np.int64) - low + 1
    return low + np.minimum((uniform(key, *values) * span).astype(np.int64), span - 1)


def front_removals(key: np.ndarray, what: int, count) -> np.ndarray:
    """How many of a segment's `count` removed tokens come off its front: the first `count` coins of its stream
    (coin j is bit j % 64 of draw(key, what, j // 64); 1 means the front)."""
    count = np.asarray(count, np.int64)
    words = (count + 63) // 64
    rows = np.repeat(np.arange(len(count)), words)
    if not len(rows):
        return np.zeros(len(count), np.int64)
    word = np.arange(len(rows)) - np.repeat(np.cumsum(words) - words, words)
    bits = draw(key[rows], what, word)
    left = count[rows] - 64 * word  # coins still wanted from this word
    mask = np.where(left >= 64, np.uint64(MASK64), (np.uint64(1) << np.minimum(left, 63).astype(np.uint64))
                    - np.uint64(1))
    return np.bincount(rows, weights=_popcount(bits & mask), minlength=len(count)).astype(np.int64)


def _popcount(words: np.ndarray) -> np.ndarray:
    if hasattr(np, "bitwise_count"):  # numpy >= 2
        return np.bitwise_count(words)
    table = np.array([bin(i).count("1") for i in range(256)], np.uint8)
    return table[words.view(np.uint8)].reshape(-1, 8).sum(1)


def removals(a_len: np.ndarray, b_len: np.ndarray, max_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens the rule removes from A and from B: one at a time from the longer (B on a tie) until they fit. So the
    longer loses the difference first, then B and A take turns, B first."""
    excess = np.maximum(a_len + b_len - max_tokens, 0)
    head = np.minimum(excess, np.abs(a_len - b_len))
    rest = excess - head
    a_longer = a_len > b_len
    return np.where(a_longer, head, 0) + rest // 2, np.where(a_longer, 0, head) + (rest + 1) // 2


# ---- the plan ------------------------------------------------------------------------------------

@dataclass
class Plan:
    """Instances as PLAN_ROW records (token ranges of A and B, the label): in memory, or a cached plan's file, whose
    rows are read one at a time when batches are drawn (`row`) and whose columns are read in blocks (`lengths`)."""

    rows: np.ndarray                  # in memory, or memory-mapped (for whole columns: never touched in training)
    entry: np.ndarray | None = None   # (in memory) the position in `entries` of each instance's document
    reader: FileReader | None = None  # the cached plan's file
    tokens: dict[str, int] = field(default_factory=dict)  # a cached plan's planned_tokens and document_tokens

    def __len__(self) -> int:
        return len(self.rows)

    def __getattr__(self, name: str) -> np.ndarray:
        if name in PLAN_ROW.names:  # a column: plan.a_start, ...
            return self.rows[name]
        raise AttributeError(name)

    def row(self, k: int) -> tuple[int, int, int, int, int]:
        """(a_start, a_len, b_start, b_len, label) of instance k."""
        record = self.rows[k] if self.reader is None else self.reader.read(k, 1)[0]
        return (int(record["a_start"]), int(record["a_len"]), int(record["b_start"]), int(record["b_len"]),
                int(record["label"]))

    def lengths(self, specials: int) -> np.ndarray:
        """Tokens per instance with its `specials` ([CLS] and [SEP]s), for batches of like lengths."""
        out = np.empty(len(self), np.uint16)
        for first in range(0, len(self), 1 << 16):  # a block at a time: the whole plan is never in memory
            block = self.rows[first:first + (1 << 16)] if self.reader is None else \
                self.reader.read(first, min(1 << 16, len(self) - first))
            out[first:first + len(block)] = block["a_len"] + block["b_len"] + specials
        return out


def plan_rows(*columns: np.ndarray) -> np.ndarray:
    """PLAN_ROW records from the columns a_start, a_len, b_start, b_len, label."""
    rows = np.empty(len(columns[0]), PLAN_ROW)
    for name, column in zip(("a_start", "a_len", "b_start", "b_len", "label"), columns):
        rows[name] = column
    return rows


def build_plan(corpus: StoreChain, entries: np.ndarray, packing: Packing, sink) -> None:
    """Run the rule on the documents `entries` (document numbers of the corpus; a document may come more than once,
    each copy packed afresh), calling sink(entry, a_start, a_len, b_start, b_len, label) with each round's
    instances (entry: the position in `entries`; a document's instances come in order)."""
    if packing.objective == MLM_NSP and len(entries) < 2:
        raise InputError(f"next-sentence prediction needs at least 2 documents to train on, and there are "
                         f"{len(entries)} (random next segments come from another document; a blank line separates "
                         "documents); use objective mlm+sop or mlm, or give more documents")
    # A pool of documents takes one instance each per round; finished ones leave, and the pool is topped up from
    # `entries` whenever it falls under half: every round is a big numpy step, however long the longest document.
    pool = _Pool.empty()
    taken = 0
    while taken < len(entries) or len(pool.entry):
        if len(pool.entry) < POOL // 2 and taken < len(entries):
            more = np.arange(taken, min(taken + POOL - len(pool.entry), len(entries)), dtype=np.int64)
            pool = pool.join(_Pool.start(corpus, entries, more, packing))
            taken += len(more)
        rows, pool = _round(corpus, entries, pool, packing)
        sink(*rows)


@dataclass
class _Pool:
    """The documents being packed: entry, next sentence, end sentence, target length, instance number."""

    entry: np.ndarray
    position: np.ndarray
    end: np.ndarray
    target: np.ndarray
    number: np.ndarray

    @classmethod
    def empty(cls) -> _Pool:
        return cls(*(np.zeros(0, np.int64) for _ in range(5)))

    @classmethod
    def start(cls, corpus: StoreChain, entries: np.ndarray, entry: np.ndarray, packing: Packing) -> _Pool:
        doc = entries[entry]
        key = draw(0, packing.seed, entry, 0)  # the document's choices share its first instance's key
        target = np.where(uniform(key, SHORT) < packing.short_seq_prob,
                          randint(2, packing.max_tokens, key, TARGET), packing.max_tokens)
        return cls(entry, corpus.document_starts[doc], corpus.document_starts[doc + 1], target,
                   np.zeros(len(entry), np.int64))

    def join(self, other: _Pool) -> _Pool:
        return _Pool(*(np.concatenate([a, b]) for a, b in zip(vars(self).values(), vars(other).values())))

    def select(self, rows: np.ndarray) -> _Pool:
        return _Pool(*(column[rows] for column in vars(self).values()))


def _round(corpus: StoreChain, entries: np.ndarray, pool: _Pool, packing: Packing) -> tuple[tuple, _Pool]:
    """One instance of every document in the pool (steps 2-5 of the rule); the pool of those with sentences left."""
    entry, position, end, target = pool.entry, pool.position, pool.end, pool.target
    key = draw(0, packing.seed, entry, pool.number)
    start = corpus.offsets(position)
    chunk_end = corpus.reaching(position, target, end)
    stop = corpus.offsets(chunk_end)
    label = np.full(len(entry), -1, np.int8)
    following = chunk_end
    if not packing.pair:
        a_start, a_stop, b_start, b_stop = start, stop, stop, stop
    else:
        sentences = chunk_end - position
        single = sentences == 1
        first_len = corpus.offsets(position + 1) - start
        cut = randint(1, np.maximum(first_len - 1, 1), key, CUT)
        a_end = np.where(single, 1, randint(1, np.maximum(sentences - 1, 1), key, SPLIT))
        a_start, a_stop = start, np.where(single, start + cut, corpus.offsets(position + a_end))
        b_start, b_stop = a_stop.copy(), stop.copy()
        label[:] = 0
        if packing.objective == MLM_NSP:
            rand = np.flatnonzero(uniform(key, RANDOM_NEXT) < 0.5)
            b_start[rand], b_stop[rand] = _random_next(corpus, entries, entry[rand], key[rand],
                                                       target[rand] - (a_stop - a_start)[rand])
            label[rand] = 1
            put_back = np.zeros(len(entry), bool)
            put_back[rand] = ~single[rand]
            following = np.where(put_back, position + a_end, chunk_end)
        else:
            swap = uniform(key, SWAP) < 0.5
            a_start, a_stop, b_start, b_stop = (np.where(swap, b_start, a_start), np.where(swap, b_stop, a_stop),
                                                np.where(swap, a_start, b_start), np.where(swap, a_stop, b_stop))
            label[:] = swap
    a_len, b_len = a_stop - a_start, b_stop - b_start
    cut_a, cut_b = removals(a_len, b_len, packing.max_tokens)
    a_start = a_start + front_removals(key, TRUNCATE_A, cut_a)
    b_start = b_start + front_removals(key, TRUNCATE_B, cut_b)
    a_len, b_len = a_len - cut_a, b_len - cut_b
    keep = np.flatnonzero((a_len > 0) & ((b_len > 0) if packing.pair else True))
    rows = (entry[keep], a_start[keep], a_len[keep].astype(np.uint16), b_start[keep], b_len[keep].astype(np.uint16),
            label[keep])
    going = np.flatnonzero(following < end)
    pool = _Pool(entry[going], following[going], end[going], target[going], pool.number[going] + 1)
    return rows, pool


def _random_next(corpus: StoreChain, entries: np.ndarray, entry: np.ndarray, key: np.ndarray,
                 wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NSP's random B: another entry (ten tries to draw one that is not this; the tenth stands), from a random
    sentence on until it holds max(1, wanted) tokens or that document ends."""
    other = randint(0, len(entries) - 1, key, OTHER, 0)
    for attempt in range(1, 10):
        again = np.flatnonzero(other == entry)
        if not len(again):
            break
        other[again] = randint(0, len(entries) - 1, key[again], OTHER, attempt)
    doc = entries[other]
    first, end = corpus.document_starts[doc], corpus.document_starts[doc + 1]
    start = first + randint(0, end - first - 1, key, START)
    order = np.argsort(start)  # searching in order reads the offsets in order: far fewer cache misses
    stop = np.empty_like(start)
    stop[order] = corpus.reaching(start[order], np.maximum(wanted, 1)[order], end[order])
    return corpus.offsets(start), corpus.offsets(stop)


def plan_in_memory(corpus: StoreChain, entries: np.ndarray, packing: Packing) -> Plan:
    """The plan of `entries`, kept in memory, with each instance's entry (small corpora: tests, a look at a plan)."""
    parts: list[tuple] = []
    build_plan(corpus, entries, packing, lambda entry, *columns: parts.append((entry, plan_rows(*columns))))
    if not parts:
        return Plan(np.zeros(0, PLAN_ROW), entry=np.zeros(0, np.int64))
    return Plan(np.concatenate([rows for _, rows in parts]), entry=np.concatenate([entry for entry, _ in parts]))
