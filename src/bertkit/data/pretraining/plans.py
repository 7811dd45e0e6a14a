"""Plans cached beside the store: a run's plan of instances (packing.py's rule) built once, in a process of its own,
and read back by later runs with the same settings and by resumed ones."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np

from bertkit.data.pretraining.chain import StoreChain
from bertkit.data.pretraining.packing import PLAN_ROW, Packing, Plan, build_plan, plan_rows
from bertkit.data.pretraining.store import PLANS, FileReader, StoreError, TokenStore, mapped_array, stores_home
from bertkit.utils.locking import locked
from bertkit.utils.processes import process_pool

PLAN_VERSION = 2          # of packing.py's rule and its rows: a change makes new keys


def plan_key(stores: list[TokenStore], entries: np.ndarray, packing: Packing) -> str:
    """What decides a plan: the stores, the documents packed (which and how often), the rule's settings."""
    described = {"version": PLAN_VERSION, "stores": [s.meta.get("key") or str(s.path.resolve()) for s in stores],
                 "entries": hashlib.sha256(memoryview(np.ascontiguousarray(entries, np.int64))).hexdigest(),
                 "packing": asdict(packing)}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode("utf-8")).hexdigest()[:24]


def cached_plan(corpus: StoreChain, entries: np.ndarray, packing: Packing) -> Plan:
    """The plan of `entries`, built once and kept in the first store's store.plans/KEY (a store that cannot be
    written, one shared read-only: in `stores_home()`/plans/KEY): a second run with the same settings, or a resumed
    one, reads it back, and takes no lock to read it. It is built in a process of its own: planning reads every
    sentence's offset, and a process that ends gives all of that memory back (one that trains would keep it)."""
    store = corpus.stores[0]
    key = plan_key(corpus.stores, entries, packing)
    roots = [store.path / PLANS, stores_home() / "plans"]
    for root in roots:
        if (root / key / "plan.json").exists():  # a plan is moved into place whole: no lock needed to read it
            return _open_plan(root / key)
    root = roots[0] if os.access(store.path, os.W_OK) else roots[1]
    directory = root / key
    with locked(root, key):
        if not (directory / "plan.json").exists():
            staging = root / f".{key}.tmp-{os.getpid()}"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            try:
                with _planner() as pool:
                    pool.apply(_plan_into, ([str(store.path) for store in corpus.stores], entries, packing, staging))
                os.replace(staging, directory)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return _open_plan(directory)


def _planner():
    """One worker process (utils.processes.process_pool: forked where that is safe; it runs numpy only)."""
    return process_pool(1)


def _plan_into(stores: list[str], entries: np.ndarray, packing: Packing, directory: Path) -> None:
    """(In the planning process) open the stores, check their sentence offsets, and write the plan into `directory`."""
    opened = [TokenStore.open(path) for path in stores]
    for store in opened:
        store.check_offsets()
    _write_plan(StoreChain(opened), entries, packing, directory)


def _write_plan(corpus: StoreChain, entries: np.ndarray, packing: Packing, directory: Path) -> None:
    count = planned = 0
    with open(directory / "plan.rows", "wb") as f:
        def sink(entry, a_start, a_len, b_start, b_len, label) -> None:
            nonlocal count, planned
            f.write(plan_rows(a_start, a_len, b_start, b_len, label).tobytes())
            count += len(entry)
            planned += int(a_len.sum()) + int(b_len.sum())

        build_plan(corpus, entries, packing, sink)
        f.flush()
        os.fsync(f.fileno())
    meta = {"instances": count, "packing": asdict(packing), "documents": len(entries), "planned_tokens": planned,
            "document_tokens": document_tokens(corpus, entries)}
    (directory / "plan.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")  # last: it is whole


def document_tokens(corpus: StoreChain, entries: np.ndarray, block: int = 1 << 20) -> int:
    """The tokens of the documents `entries` (each as often as it is named), a block of documents at a time."""
    total = 0
    for first in range(0, len(entries), block):
        documents = entries[first:first + block]
        starts, ends = corpus.document_starts[documents], corpus.document_starts[documents + 1]
        total += int((corpus.offsets(ends) - corpus.offsets(starts)).sum())
    return total


def _open_plan(directory: Path) -> Plan:
    try:
        meta = json.loads((directory / "plan.json").read_text(encoding="utf-8"))
        count = meta["instances"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StoreError(f"{directory / 'plan.json'} cannot be read ({err}); delete {directory} and run again"
                         ) from None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise StoreError(f"{directory / 'plan.json'}: 'instances' is {count!r}, not a count; delete {directory} and "
                         "run again")
    rows = directory / "plan.rows"
    tokens = {k: meta[k] for k in ("planned_tokens", "document_tokens") if isinstance(meta.get(k), int)}
    return Plan(mapped_array(rows, count, PLAN_ROW, f"delete {directory} and run again"),
                reader=FileReader(rows, PLAN_ROW), tokens=tokens)
