"""The stores made for runs from text: $BERTKIT_HOME/stores/KEY, made on first use, found again by later runs.

KEY is a hash of the inputs (a file's path, size and modification time; a named corpus's package hashes), the
tokenizer (its vocabulary and settings), whole-word masking and the encoding: a second run, or a resumed one, finds
the store and tokenizes nothing ($BERTKIT_STORES moves them elsewhere).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from bertkit.data.pretraining.corpus_stream import CorpusInput, corpus_inputs
from bertkit.data.pretraining.store import META, VERSION, TokenStore, tokenizer_identity
from bertkit.data.pretraining.store_writer import prepare_store
from bertkit.data.sources import home
from bertkit.utils.locking import locked

TEXT_VERSION = 1          # how text becomes sentences (data/corpus.py, corpus_stream.py): a change makes new keys


def store_key(inputs: list[CorpusInput], tokenizer, whole_word: bool, encoding: str) -> str:
    """The cache key of a store: its inputs' identities, the tokenizer's, whole-word masking and the encoding."""
    described = {"format": VERSION, "text": TEXT_VERSION, "inputs": [item.identity() for item in inputs],
                 "tokenizer": tokenizer_identity(tokenizer), "whole_word": whole_word, "encoding": encoding}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode("utf-8")).hexdigest()[:24]


def stores_home() -> Path:
    """Where stores made for runs live: `$BERTKIT_STORES`, else $BERTKIT_HOME/stores (read at each call)."""
    env = os.environ.get("BERTKIT_STORES")
    return Path(env).expanduser() if env else home() / "stores"


def cached_store(specs: list[str], tokenizer, *, whole_word: bool = False, encoding: str = "utf-8",
                 progress: bool = True) -> TokenStore:
    """The store of `specs` in $BERTKIT_HOME/stores, made on first use (concurrent callers wait for one maker)."""
    key = store_key(corpus_inputs(specs), tokenizer, whole_word, encoding)
    directory = stores_home() / key
    with locked(directory.parent, key):
        if (directory / META).exists():
            return TokenStore.open(directory)
        return prepare_store(specs, tokenizer, directory, whole_word=whole_word, encoding=encoding,
                             progress=progress, key=key)
