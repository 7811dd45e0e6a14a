"""The fine-tuning tasks, one module each: classify, pairs, ner, qa, embedding.

A module holds its task's record (a subclass of bertkit.data.task_kinds.TaskKind) and registers it: what the task
reads, how it trains, predicts, evaluates, serves and reports, in one place. Importing bertkit imports this package,
so the registry is full before any command or library call looks a task up. A module here that this package does
not name is a task too: it is registered after the built-in ones, in the order of its file name, so adding a task is
adding its module (and its head to bertkit.models.registry).
"""

from __future__ import annotations

import importlib
from pathlib import Path

BUILT_IN = ("classify", "pairs", "ner", "qa", "embedding")  # the order `--task` offers them in

_OTHERS = sorted({path.stem for path in Path(__file__).parent.glob("[!_]*.py")} - set(BUILT_IN))
for _name in (*BUILT_IN, *_OTHERS):
    importlib.import_module(f"{__name__}.{_name}")
