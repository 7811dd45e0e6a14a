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
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_write_text

STORES_NAME = "corpus_stores.json"


def content_identity(meta: dict) -> dict:
    """What a store holds, from its store.json: the digest of its arrays (stores made before it was kept: the
    counts, the tokenizer and the inputs), so that a store prepared again from other text is told apart."""
    if "content_sha256" in meta:
        return {"content_sha256": meta["content_sha256"]}
    return {name: meta.get(name) for name in ("tokens", "sentences", "documents", "dtype", "whole_word", "tokenizer",
                                                "inputs")}


def record_stores(mix: CorpusMix, stores: list[TokenStore], out: Path) -> None:
    """Write which store each corpus of the mix was read from (its key and what it holds), for
    `check_corpus_unchanged`."""
    records = [{"corpus": spec, "store": str(store.path.resolve()), "key": store.meta.get("key"),
                "content": content_identity(store.meta)} for spec, store in zip(mix.corpora, stores)]
    atomic_write_text(out / STORES_NAME, jsonfiles.dumps(records, indent=2, ensure_ascii=False) + "\n")


def check_corpus_unchanged(mix: CorpusMix, out: Path, tokenizer, wwm: bool, encoding: str) -> None:
    """An InputError naming a corpus file, or a prepared store, that changed since the run in `out` started:
    resuming would train on other text than the run's data order and plan were made for."""
    path = out / STORES_NAME
    if not path.is_file():
        return  # a run from before stores were recorded
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        records = None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise InputError(f"{path} cannot be read: it records which text the run in {out} trained on; a run cannot "
                         "be resumed without it") from None
    # the mix's paths are resolved for where the run now is; the records are in the same order
    for spec, record in zip(mix.corpora, records):
        if is_store(spec):
            check_store_unchanged(spec, record, out)
            continue
        if record.get("key") is None:
            continue
        inputs = corpus_inputs([spec])
        if store_key(inputs, tokenizer, wwm, encoding) == record["key"]:
            continue
        then = {}
        with contextlib.suppress(OSError, ValueError, KeyError):
            then = {i.get("path"): i for i in json.loads((Path(record["store"]) / META).read_text())["inputs"]}
        changed = [i.name for i in inputs if i.kind != "corpus" and i.identity() != then.get(i.identity().get("path"))]
        raise InputError(f"{', '.join(changed) or spec} changed since the run in {out} started (its size or time "
                         "differ): resuming would train on other text than the run's; put back the corpus it started "
                         "with, or start a new run")


def check_store_unchanged(spec: str, record: dict, out: Path) -> None:
    """An InputError if the prepared store `spec` holds other text than when the run in `out` read it (it was
    prepared again from other text, say)."""
    if "content" not in record:
        return  # a run from before contents were recorded
    meta_path = Path(spec) / META
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return  # TokenStore.open names what is wrong with it
    if isinstance(meta, dict) and content_identity(meta) != record["content"]:
        raise InputError(f"the store {spec} holds other text than when the run in {out} started (it was prepared "
                         "again): resuming would train on text the run's data order and plan were not made for; put "
                         "back the store it started with, or start a new run")
