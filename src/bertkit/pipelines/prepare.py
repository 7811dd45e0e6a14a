"""`bertkit prepare`: a corpus tokenized once, by worker processes on every core, into a token store in --out.

The store (data/pretraining/store.py) is what `bertkit pretrain --corpus DIR` reads: flat memory-mapped arrays, so
pretraining on it starts at once and holds a few batches in memory, not the corpus. The directory follows the
run-directory rule (pipelines/run_directory.py): a store already there is replaced only with --overwrite, and never
one of the command's inputs.
"""

from __future__ import annotations

from pathlib import Path

from bertkit.data.pretraining.corpus_stream import corpus_inputs
from bertkit.data.pretraining.store import TokenStore
from bertkit.data.pretraining.store_cache import store_key
from bertkit.data.pretraining.store_writer import prepare_store
from bertkit.pipelines.options import PrepareOptions
from bertkit.pipelines.run_directory import run_directory


def prepare_corpus(options: PrepareOptions) -> TokenStore:
    """Tokenize `options.corpus` with the tokenizer in `options.vocab` into a store in `options.out`."""
    from bertkit.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(options.vocab)
    inputs = corpus_inputs(options.corpus)  # a missing file or an unknown corpus name is said before --out is made
    with run_directory(options.out, "bertkit prepare", overwrite=options.overwrite, inputs=options.inputs()):
        return prepare_store(options.corpus, tokenizer, Path(options.out), whole_word=options.wwm,
                             encoding=options.encoding, workers=options.workers, progress=options.progress,
                             key=store_key(inputs, tokenizer, options.wwm, options.encoding), inputs=inputs)
