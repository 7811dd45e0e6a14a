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
from bertkit.data.pretraining.store import PLANS, FileReader, StoreError, TokenStore, mapped_array
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
    """The plan of `entries`, built once and kept in the first store's store.plans/KEY: a second run with the same
    settings, or a resumed one, reads it back. It is built in a process of its own: planning reads every sentence's
    offset, and a process that ends gives all of that memory back (one that trains would keep it)."""
    root = corpus.stores[0].path / PLANS
    key = plan_key(corpus.stores, entries, packing)
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
    count = 0
    with open(directory / "plan.rows", "wb") as f:
        def sink(entry, *columns) -> None:
            nonlocal count
            f.write(plan_rows(*columns).tobytes())
            count += len(entry)

        build_plan(corpus, entries, packing, sink)
        f.flush()
        os.fsync(f.fileno())
    meta = {"instances": count, "packing": asdict(packing), "documents": len(entries)}
    (directory / "plan.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")  # last: it is whole


def _open_plan(directory: Path) -> Plan:
    try:
        count = json.loads((directory / "plan.json").read_text(encoding="utf-8"))["instances"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StoreError(f"{directory / 'plan.json'} cannot be read ({err}); delete {directory} and run again"
                         ) from None
    rows = directory / "plan.rows"
    return Plan(mapped_array(rows, count, PLAN_ROW), reader=FileReader(rows, PLAN_ROW))
