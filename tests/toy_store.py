"""Token stores written straight from token ids, for tests of what reads them (packing, instances, batches)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bertkit.data.pretraining.corpus_stream import Tokenized
from bertkit.data.pretraining.store import META, TokenStore
from bertkit.data.pretraining.store_writer import StoreWriter


def write_store(directory: Path, documents: list[list[list[int]]],
                word_starts: list[list[list[bool]]] | None = None) -> TokenStore:
    """A store of `documents` (each a list of sentences, each a list of token ids), with jieba-like word starts
    when given, as bertkit prepare would write it."""
    directory.mkdir(parents=True, exist_ok=True)
    writer = StoreWriter(directory, "uint16", word_starts is not None)
    for d, document in enumerate(documents):
        ids = np.array([t for sentence in document for t in sentence], np.uint16)
        starts = None if word_starts is None else np.array([s for sentence in word_starts[d] for s in sentence], bool)
        writer.add(Tokenized("toy", 0, ids, np.array([len(s) for s in document]), [len(document), None], starts, 0))
    writer.close()
    (directory / META).write_text(json.dumps({**writer.counts(), "key": f"toy-{directory.name}"}))
    return TokenStore.open(directory)
