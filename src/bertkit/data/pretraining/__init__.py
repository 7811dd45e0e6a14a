"""Pretraining data, from text to masked batches; `build` is the one entry point a run calls.

In the order the data flows:

    mix.py            the corpora of a run, each with its weight (CorpusMix)
    corpus_stream.py  a corpus read as chunks of whole lines, and a worker's tokenizing of one chunk
    store_writer.py   chunks tokenized in parallel into a token store's files (`bertkit prepare`)
    store.py          the token store's format and its reader (memory-mapped, read with pread)
    store_cache.py    stores made for runs from text, kept by a key of their inputs and tokenizer
    chain.py          stores seen as one corpus (StoreChain)
    packing.py        google-research/bert's packing rule, run on every document at once -> a Plan of instances
    plans.py          plans cached beside the store, built in a process of their own
    instances.py      an instance assembled from the stores when drawn; masking; the collator
    run_data.py       all of it for one run: stores, held-out split, plan, probe, masking -> PretrainingData
    records.py        which store a run read, so that a resumed run reads the same text
"""

import importlib

# Read when first asked for (PEP 562): a worker process that tokenizes imports corpus_stream.py, and should not pay
# for torch (instances.py's). Only these names: `from bertkit.data.pretraining import corpus_stream` asks the package
# for its submodule first, and must not import run_data.py (which imports the stores) on the way.
_EXPORTS = {"CorpusMix": "mix", "DataSettings": "run_data", "PretrainingData": "run_data", "build": "run_data"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
