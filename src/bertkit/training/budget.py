"""Sizing a run to a wall-clock budget: how many optimizer steps fit in the time a user gave."""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Sequence

import torch
from torch import Tensor, nn


def steps_in_budget(model: nn.Module, batches: Sequence[dict[str, Tensor]], seconds: float, bf16: bool = False,
                    reserve: float = 0.1) -> int:
    """Time training steps on a copy of `model` over `batches` (the first only warms caches up) and return
    how many fit in `seconds`, keeping a `reserve` share for evaluation, logging and saving.

    The learning-rate schedule needs its length before training starts; a time budget alone does not say it.
    """
    if len(batches) < 2:
        batches = list(batches) * 2
    probe = copy.deepcopy(model).train()
    optimizer = torch.optim.AdamW(probe.parameters(), lr=1e-6)
    times = []
    for i, batch in enumerate(batches):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = probe(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if i:
            times.append(time.perf_counter() - start)
    return max(1, int((1.0 - reserve) * seconds / statistics.median(times)))
