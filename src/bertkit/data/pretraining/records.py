"""Which store each corpus of a run was read from, written in the run's directory, so that a resumed run can check
that it reads the text the run started with (its data order and plan were made for that text)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from bertkit.data.pretraining.corpus_stream import corpus_inputs
from bertkit.data.pretraining.mix import CorpusMix
from bertkit.data.pretraining.store import META, TokenStore, is_store
from bertkit.data.pretraining.store_cache import store_key
from bertkit.errors import InputError
from bertkit.utils.atomic import atomic_write_text

STORES_NAME = "corpus_stores.json"


def record_stores(mix: CorpusMix, stores: list[TokenStore], out: Path) -> None:
    """Write which store each corpus of the mix was read from (and its key), for `check_corpus_unchanged`."""
    records = [{"corpus": spec, "store": str(store.path.resolve()), "key": store.meta.get("key")}
               for spec, store in zip(mix.corpora, stores)]
    atomic_write_text(out / STORES_NAME, json.dumps(records, indent=2, ensure_ascii=False) + "\n")


def check_corpus_unchanged(mix: CorpusMix, out: Path, tokenizer, wwm: bool, encoding: str) -> None:
    """An InputError naming a corpus file that changed since the run in `out` started: resuming would train on
    other text than the run's data order and plan were made for."""
    path = out / STORES_NAME
    if not path.is_file():
        return  # a run from before stores were recorded
    # the mix's paths are resolved for where the run now is; the records are in the same order
    for spec, record in zip(mix.corpora, json.loads(path.read_text(encoding="utf-8"))):
        if is_store(spec) or record.get("key") is None:
            continue  # a prepared store checks its own inputs when opened
        inputs = corpus_inputs([spec])
        if store_key(inputs, tokenizer, wwm, encoding) == record["key"]:
            continue
        then = {}
        with contextlib.suppress(OSError, ValueError, KeyError):
            then = {i.get("path"): i for i in json.loads((Path(record["store"]) / META).read_text())["inputs"]}
        changed = [i.name for i in inputs if i.kind != "corpus" and i.identity() != then.get(i.identity()["path"])]
        raise InputError(f"{', '.join(changed) or spec} changed since the run in {out} started (its size or time "
                         "differ): resuming would train on other text than the run's; put back the corpus it started "
                         "with, or start a new run")
