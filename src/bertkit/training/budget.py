"""Sizing a run to a wall-clock budget: how many optimizer steps fit in the time a user gave."""

from __future__ import annotations

import copy
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bertkit.training.memory import keep_freed_memory
from bertkit.training.schedule import build_optimizer


def wall_clock_budget(minutes: float | None) -> dict[str, float | bool | None]:
    """The TrainingArguments of a `--minutes` budget: stop at the clock, and let warmup and decay follow the
    clock when training runs slower than the planned steps, so a run the clock stops still ends its decay."""
    return {"max_seconds": minutes * 60 if minutes else None, "time_aware_schedule": bool(minutes)}


def timed_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: dict[str, Tensor], bf16: bool) -> float:
    """Seconds of one training step: forward (bf16 autocast if asked), backward, optimizer update."""
    keep_freed_memory()  # the allocator the Trainer runs with, so timed steps match trained ones
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return time.perf_counter() - start


def length_probes(lengths: Sequence[int], batch_size: int, quantiles: Sequence[float]) -> list[list[int]]:
    """Indices of `batch_size` examples of like length at each quantile of `lengths`: the batches to time for a
    run whose batches group similar lengths (each pads to its own longest), so the timing sees short and long."""
    order = np.argsort(np.asarray(lengths), kind="stable")  # numpy: a pretraining corpus has millions of examples
    B = min(batch_size, len(order))
    starts = [min(int(q * len(order)), len(order) - B) for q in quantiles]
    return [order[i:i + B].tolist() for i in starts]


def mean_step_seconds(times_per_batch: Iterable[Sequence[float]]) -> float:
    """Seconds a run of mixed batches spends per step: each batch's median time (a load spike on one step
    does not count), averaged over the batches (long batches are dear, so the mean is above the median)."""
    return statistics.mean(statistics.median(times) for times in times_per_batch)


def seconds_per_step(model: nn.Module, batches: Sequence[dict[str, Tensor]], bf16: bool = False,
                     hold: Sequence[str] = (), min_seconds: float = 2.0, max_timed: int = 20) -> float:
    """Seconds a training step of `model` takes over `batches`, timed on a copy of it.

    The first two steps only warm caches and the allocator up (they run slower than the rest); then the
    batches are cycled until every one was timed and `min_seconds` have passed (or `max_timed` steps),
    and `mean_step_seconds` says what a step costs. Parameters whose names start with a `hold` prefix are held
    as the Trainer holds them (`TrainingArguments.freeze`): no gradient reaches them.
    """
    if not batches:
        raise ValueError("timing training steps needs at least one batch")
    probe = copy.deepcopy(model).train()
    for name, parameter in probe.named_parameters():
        if name.startswith(tuple(hold)):
            parameter.requires_grad_(False)
    optimizer = build_optimizer(probe, 1e-6, 0.01)  # the trainer's (fused) AdamW, over what it trains
    times: dict[int, list[float]] = {}
    step, timed, spent = 0, 0, 0.0
    while timed < min(max_timed, len(batches)) or (spent < min_seconds and timed < max_timed):
        elapsed = timed_step(probe, optimizer, batches[step % len(batches)], bf16)
        if step >= 2:
            times.setdefault(step % len(batches), []).append(elapsed)
            timed, spent = timed + 1, spent + elapsed
        step += 1
    return mean_step_seconds(times.values())


def steps_in_budget(model: nn.Module, batches: Sequence[dict[str, Tensor]], seconds: float, bf16: bool = False,
                    reserve: float = 0.1, min_seconds: float = 2.0, max_timed: int = 20) -> int:
    """How many training steps of `model` over `batches` fit in `seconds` (`seconds_per_step`), keeping a
    `reserve` share for evaluation, logging and saving. The learning-rate schedule needs its length before
    training starts; a time budget alone does not say it."""
    step = seconds_per_step(model, batches, bf16, min_seconds=min_seconds, max_timed=max_timed)
    return max(1, int((1.0 - reserve) * seconds / step))


def planned_steps(model: nn.Module, features: Sequence[Any], collate: Callable[[list[Any]], dict[str, Tensor]],
                  batch_size: int, max_steps: int, minutes: float | None, bf16: bool = False,
                  group_by_length: bool = True, reserve: float = 0.15) -> int:
    """`max_steps`, or fewer when `minutes` is given and fewer fit: a fine-tuning run's schedule sized to its time
    budget, so that it decays fully. Batches of like lengths are timed at each quartile of the lengths (the run
    groups them so), plain batches otherwise."""
    if not minutes:
        return max_steps
    from bertkit.training.trainer import example_length

    B = min(batch_size, len(features))
    if group_by_length:
        lengths = [example_length(f) for f in features]
        probes = [collate([features[i] for i in batch]) for batch in length_probes(lengths, B, (0.25, 0.5, 0.75))]
    else:
        probes = [collate(list(features[i * B:(i + 1) * B])) for i in range(3) if features[i * B:(i + 1) * B]]
    return min(max_steps, steps_in_budget(model, probes, minutes * 60, bf16, reserve=reserve))


def steps_per_epoch(examples: int, batch_size: int, what: str = "examples") -> int:
    """Optimizer steps in one pass over `examples` training `what`; a warning when a batch is more than all of them
    (each step then takes them all)."""
    if batch_size > examples:
        warnings.warn(f"--batch-size {batch_size} is more than the {examples} training {what}: each step takes all "
                      f"{examples}", stacklevel=3)
    return max(1, examples // batch_size)
