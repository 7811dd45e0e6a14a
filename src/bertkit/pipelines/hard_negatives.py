"""`bertkit mine-negatives`: a pairs file with hard negatives, ranked by a model, for `finetune --task embedding`.

The anchors search the pairs' own positives (each distinct text once), as `evaluate --task retrieval` searches;
bertkit.data.hard_negatives picks the negatives from what ranks high. The file written is the pairs file with
negative columns, ready to train on.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.embedding_data import EmbeddingExample, read_embedding_data, shape_of
from bertkit.data.hard_negatives import mine_hard_negatives
from bertkit.errors import InputError
from bertkit.pipelines.options import MineOptions
from bertkit.pipelines.run_directory import check_output_file
from bertkit.utils.atomic import atomic_write_text
from bertkit.utils.dtypes import BFLOAT16


def search_space(rows: list[EmbeddingExample]) -> tuple[list[str], list[int], list[frozenset[int]]]:
    """(documents: each distinct positive once, each row's positive index, each row's anchor's positives)."""
    index: dict[str, int] = {}
    by_anchor: dict[str, set[int]] = {}
    for row in rows:
        anchor, positive = row.texts
        by_anchor.setdefault(anchor, set()).add(index.setdefault(positive, len(index)))
    positives = [index[row.texts[1]] for row in rows]
    return list(index), positives, [frozenset(by_anchor[row.texts[0]]) for row in rows]


def rows_text(rows: list[EmbeddingExample], negatives: list[list[str]], suffix: str) -> str:
    if suffix == ".jsonl":
        return "".join(json.dumps({"anchor": row.texts[0], "positive": row.texts[1], "negative": found},
                                  ensure_ascii=False) + "\n" for row, found in zip(rows, negatives))
    one_line = lambda text: " ".join(text.split())  # noqa: E731 - a TSV cell holds no tab or line end
    return "".join("\t".join(map(one_line, (*row.texts, *found))) + "\n" for row, found in zip(rows, negatives))


def mine_negatives(options: MineOptions) -> dict[str, Any]:
    """Mine options.negatives hard negatives per pair of options.data with options.model; write options.out;
    return what was done (counts, the positives' ranks, seconds)."""
    from bertkit.data.sources import resolve_model
    from bertkit.inference.encode import declared_settings, encode
    from bertkit.inference.loading import load_text_model
    from bertkit.inference.machine import native_bfloat16
    from bertkit.utils.devices import resolve_device

    resolve_device(options.device)  # a GPU this machine lacks is refused before anything is read
    started = time.perf_counter()
    out = check_output_file(options.out, options.overwrite, suffixes=(".tsv", ".jsonl"),
                            inputs=[("--data", options.data)])
    rows = read_embedding_data(options.data, "train", "to mine negatives for", options.encoding)
    if shape_of(rows) != "pairs":
        raise InputError(f"--data {options.data}: mining needs pairs (anchor, positive), not "
                         f"{'scored pairs' if shape_of(rows) == 'scored' else 'plain text'}")
    if len(rows[0].texts) > 2:
        raise InputError(f"--data {options.data} already has negatives ({len(rows[0].texts) - 2} a row); give "
                         "its anchor and positive columns only")
    documents, positives, related = search_space(rows)
    # it encodes (what encode reads), where the one device rule puts it: the GPU when there is one
    model, tokenizer = load_text_model(options.model, "encode", device=options.device)
    device = next(model.parameters()).device
    settings = declared_settings(resolve_model(options.model), None, None, options.max_length)

    def vectors(texts: list[str]) -> np.ndarray:
        return encode(model, tokenizer, texts, batch_size=options.batch_size, pooling=settings.pooling,
                      max_length=settings.max_seq_length, normalize=True, progress=options.progress,
                      dtype=BFLOAT16 if native_bfloat16(device) else None)

    mined = mine_hard_negatives(vectors([row.texts[0] for row in rows]), vectors(documents), positives, related,
                                negatives=options.negatives, candidates=options.candidates, margin=options.margin,
                                duplicate=options.duplicate, max_positive_rank=options.max_positive_rank,
                                seed=options.seed)
    kept = [i for i in range(len(rows)) if mined.kept[i]]
    if not kept:
        raise InputError(f"--max-positive-rank {options.max_positive_rank} drops every pair of {options.data}")
    negatives = [[documents[j] for j in mined.negatives[i]] for i in kept]
    atomic_write_text(out, rows_text([rows[i] for i in kept], negatives, Path(out).suffix.lower()))
    ranks = mined.positive_rank
    return {"rows": len(rows), "written": len(kept), "dropped": len(rows) - len(kept), "documents": len(documents),
            "negatives": options.negatives, "random_negatives": mined.filled,
            "positive_rank_median": float(np.median(ranks)), "positive_first": float(np.mean(ranks == 1)),
            "pooling": settings.pooling, "out": str(out),
            # what encode cut the texts to: the declared length, else the model's positions
            "max_length": settings.max_seq_length or model.config.max_position_embeddings,
            "seconds": time.perf_counter() - started}
