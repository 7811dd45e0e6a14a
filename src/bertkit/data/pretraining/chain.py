"""Token stores seen as one corpus: documents, sentences and tokens numbered across them, store after store."""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

from bertkit.data.pretraining.store import TokenStore


class StoreChain:
    """Token stores seen as one: documents, sentences and tokens numbered across them, store after store. (The
    text a store is made from, documents of sentences, and the named corpora are data/corpus.py's.)"""

    def __init__(self, stores: list[TokenStore]) -> None:
        self.stores = stores
        self.token_base = np.cumsum([0] + [s.num_tokens for s in stores])
        self.sentence_base = np.cumsum([0] + [len(s.sentence_offsets) - 1 for s in stores])
        self.document_base = np.cumsum([0] + [s.num_documents for s in stores])
        # each document's first sentence, and the end of the last, across the stores (one store: its own array)
        self.document_starts = stores[0].document_offsets if len(stores) == 1 else np.concatenate(
            [s.document_offsets[:-1] + base for s, base in zip(stores, self.sentence_base)] + [self.sentence_base[-1:]])

    @property
    def num_documents(self) -> int:
        return int(self.document_base[-1])

    def _by_store(self, sentences: np.ndarray) -> list[tuple[TokenStore, np.ndarray, int, int]]:
        if len(self.stores) == 1:
            return [(self.stores[0], slice(None), 0, 0)]
        which = np.searchsorted(self.sentence_base[1:-1], sentences, side="right")
        return [(store, which == k, self.sentence_base[k], self.token_base[k]) for k, store in enumerate(self.stores)]

    def offsets(self, sentences: np.ndarray) -> np.ndarray:
        """Where each sentence starts, as a token position (a store's end sentence: where its tokens end)."""
        out = np.empty(len(sentences), np.int64)
        for store, rows, sentence_base, token_base in self._by_store(sentences):
            out[rows] = store.sentence_offsets[sentences[rows] - sentence_base] + token_base
        return out

    def reaching(self, start: np.ndarray, tokens: np.ndarray, end: np.ndarray) -> np.ndarray:
        """The first sentence e in (start, end] such that sentences start..e-1 hold >= `tokens` tokens, else end."""
        out = np.empty(len(start), np.int64)
        for store, rows, sentence_base, _ in self._by_store(start):
            local = start[rows] - sentence_base
            wanted = store.sentence_offsets[local] + tokens[rows]
            out[rows] = np.searchsorted(store.sentence_offsets, wanted, side="left") + sentence_base
        return np.clip(out, start + 1, end)

    def _store_of(self, position: int) -> tuple[TokenStore, int]:
        k = bisect_right(self.token_base, position) - 1
        return self.stores[k], position - int(self.token_base[k])

    def tokens(self, position: int, length: int) -> np.ndarray:
        """`length` token ids from token position `position` (within one store)."""
        store, local = self._store_of(position)
        return store.read_ids(local, local + length)

    def word_starts(self, position: int, length: int) -> np.ndarray | None:
        """The stored word starts of those tokens (whole-word stores), else None."""
        store, local = self._store_of(position)
        return store.word_starts(local, local + length) if store.word_bits is not None else None
