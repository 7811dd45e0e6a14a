"""The stores made for runs from text: $BERTKIT_HOME/stores/KEY, made on first use, found again by later runs.

KEY is a hash of the inputs (a file's path, size and modification time; a named corpus's package hashes), the
tokenizer (its vocabulary and settings), whole-word masking and the encoding: a second run, or a resumed one, finds
the store and tokenizes nothing ($BERTKIT_STORES moves them elsewhere).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import warnings

from bertkit.data.pretraining.corpus_stream import CorpusInput, corpus_inputs
from bertkit.data.pretraining.store import META, VERSION, StoreError, TokenStore, stores_home, tokenizer_identity
from bertkit.data.pretraining.store_writer import prepare_store
from bertkit.data.readers import DataWarning
from bertkit.errors import InputError
from bertkit.utils.locking import locked

TEXT_VERSION = 2          # how text becomes sentences (data/corpus.py, corpus_stream.py): a change makes new keys


def store_key(inputs: list[CorpusInput], tokenizer, whole_word: bool, encoding: str) -> str:
    """The cache key of a store: its inputs' identities, the tokenizer's, whole-word masking and the encoding."""
    described = {"format": VERSION, "text": TEXT_VERSION, "inputs": [item.identity() for item in inputs],
                 "tokenizer": tokenizer_identity(tokenizer), "whole_word": whole_word, "encoding": encoding}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode("utf-8")).hexdigest()[:24]


def cached_store(specs: list[str], tokenizer, *, whole_word: bool = False, encoding: str = "utf-8",
                 progress: bool = True) -> TokenStore:
    """The store of `specs` in $BERTKIT_HOME/stores, made on first use (concurrent callers wait for one maker). A
    cached store that cannot be opened (damaged, or cut short) is made again, with a warning that says why."""
    inputs = corpus_inputs(specs)
    streams = [item.name for item in inputs if item.is_stream()]
    if streams:
        raise InputError(f"--corpus {streams[0]} is a pipe or standard input: a run's store is kept by its files' "
                         "path, size and time, which a stream has not, and a resumed run reads its corpus again; save "
                         f"the text to a file first, or prepare it (bertkit prepare --corpus {streams[0]} --out DIR) "
                         "and give DIR to pretrain --corpus")
    key = store_key(inputs, tokenizer, whole_word, encoding)
    directory = stores_home() / key
    if (directory / META).exists():
        with contextlib.suppress(StoreError):  # a whole store is read without the lock; a damaged one waits for it
            return TokenStore.open(directory)
    with locked(directory.parent, key):
        if (directory / META).exists():  # else: none yet, or a maker was killed (prepare_store starts afresh)
            try:
                return TokenStore.open(directory)
            except StoreError as err:
                warnings.warn(DataWarning(f"the store bertkit made for {' '.join(specs)} cannot be used ({err}); it "
                                          "is made again"), stacklevel=2)
                shutil.rmtree(directory)
        return prepare_store(specs, tokenizer, directory, whole_word=whole_word, encoding=encoding,
                             progress=progress, key=key, inputs=inputs)
