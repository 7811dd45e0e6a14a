"""Sizing a run to a wall-clock budget: how many optimizer steps fit in the time a user gave."""

from __future__ import annotations

import copy
import math
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bertkit.errors import InputError
from bertkit.training.compiling import compile_forward
from bertkit.training.memory import keep_freed_memory
from bertkit.training.schedule import build_optimizer
from bertkit.utils.devices import bf16_on, synchronize, to_device


def wall_clock_budget(minutes: float | None, spent: float = 0.0) -> dict[str, float | bool | None]:
    """The TrainingArguments of a `--minutes` budget: stop at the clock, and let warmup and decay follow the
    clock when training runs slower than the planned steps, so a run the clock stops still ends its decay. `spent`:
    seconds of the budget used before the training began (as `plan_for_budget` takes them); at least a second is
    left."""
    if not minutes:
        return {"max_seconds": None, "time_aware_schedule": False}
    return {"max_seconds": max(minutes * 60 - spent, 1.0) if spent else minutes * 60, "time_aware_schedule": True}


def timed_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: dict[str, Tensor], bf16: bool,
               forward: Callable[..., Any] | None = None) -> float:
    """Seconds of one training step as the Trainer runs it on the CPU: forward (bf16 autocast if asked), backward,
    the gradient's norm and clipping, optimizer update. `forward`: what runs the model (its compiled forward)."""
    keep_freed_memory()  # the allocator the Trainer runs with, so timed steps match trained ones
    start = time.perf_counter()
    _step(model, optimizer, batch, bf16, read_back=True, forward=forward)
    return time.perf_counter() - start


def _step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: dict[str, Tensor], bf16: bool,
          read_back: bool, forward: Callable[..., Any] | None = None) -> None:
    """One training step as the Trainer runs it, on the device the model is on: the batch's copy there, forward (bf16
    autocast if asked; through `forward`, the model's compiled forward, where given), backward, the gradient's norm
    and clipping, the update. On the CPU the Trainer reads the loss and the norm back every step (`read_back`: about
    3% of the tiny BERT's step); on a GPU it does not."""
    device = next(model.parameters()).device
    batch = to_device(batch, device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        loss = (forward or model)(**batch).loss
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if read_back:
        loss.item()
        norm.item()
    optimizer.step()
    optimizer.zero_grad()


GPU_RUNS = 3  # runs over the timing batches at least: the median of three forgives one disturbed run


def _gpu_seconds_per_step(model: nn.Module, optimizer: torch.optim.Optimizer, batches: Sequence[dict[str, Tensor]],
                          bf16: bool, min_seconds: float, max_timed: int,
                          forward: Callable[..., Any] | None = None) -> float:
    """Seconds a step takes on a GPU, as the Trainer runs them: back to back, the host queueing the next step while
    the GPU computes the last, so a step costs the larger of the two. Timed over runs of consecutive steps (a clock
    around one step would time the wait for the GPU as well), each run once over every batch, until `min_seconds`
    have passed or `max_timed` steps, and at least GPU_RUNS times; the median run's mean step."""
    device = next(model.parameters()).device
    for batch in batches:  # each shape's kernels chosen and its memory allocated, as a run's first steps do
        _step(model, optimizer, batch, bf16, read_back=False, forward=forward)
    runs: list[float] = []
    timed, spent = 0, 0.0
    while len(runs) < GPU_RUNS or (spent < min_seconds and timed < max_timed):
        synchronize(device)
        start = time.perf_counter()
        for batch in batches:
            _step(model, optimizer, batch, bf16, read_back=False, forward=forward)
        synchronize(device)
        elapsed = time.perf_counter() - start
        runs.append(elapsed / len(batches))
        timed, spent = timed + len(batches), spent + elapsed
    return statistics.median(runs)


def length_probes(lengths: Sequence[int], batch_size: int, quantiles: Sequence[float]) -> list[list[int]]:
    """Indices of `batch_size` examples of like length at each quantile of `lengths`: the batches to time for a
    run whose batches group similar lengths (each pads to its own longest), so the timing sees short and long."""
    order = np.argsort(np.asarray(lengths), kind="stable")  # numpy: a pretraining corpus has millions of examples
    B = min(batch_size, len(order))
    starts = [min(int(q * len(order)), len(order) - B) for q in quantiles]
    return [order[i:i + B].tolist() for i in starts]


# Where along the examples' lengths every `--minutes` plan takes the batches it times, short to long: a run of
# like-length batches pads each to its own longest, so its steps cost what the lengths say, and short and long
# ones must both be timed.
PROBE_QUANTILES = (0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95)
PLAIN_PROBES = 4  # batches timed where every batch has the same shape, or lengths are mixed in each batch


def probe_batches(count: int, batch_size: int, lengths: Sequence[int] | None = None) -> list[list[int]]:
    """The one choice of the batches a `--minutes` plan times, as the indices of their examples: `batch_size` of
    like length at each of PROBE_QUANTILES of `lengths` (a run whose batches group similar lengths), or without
    lengths (batches of one shape, or of mixed lengths) the first PLAIN_PROBES batches."""
    if lengths is not None:
        return length_probes(lengths, batch_size, PROBE_QUANTILES)
    size = min(batch_size, count)
    return [list(range(i * size, min((i + 1) * size, count))) for i in range(PLAIN_PROBES) if i * size < count]


def timing_batches(dataset, collate: Callable, batch_size: int,
                   group_by_length: bool) -> tuple[list[dict[str, Tensor]], float]:
    """Batches of `dataset` to time a run's training steps on (`probe_batches`; with like lengths, as
    `dataset.lengths()` says each item's), and the seconds it took to assemble one: a training step pays that
    too, before the model sees its batch. `collate(items, seeds)` makes a batch, as the trainer calls it."""
    chosen = probe_batches(len(dataset), batch_size, dataset.lengths() if group_by_length else None)
    start = time.perf_counter()
    batches = [collate([dataset[i] for i in batch], list(range(len(batch)))) for batch in chosen]
    return batches, (time.perf_counter() - start) / len(batches)


def mean_step_seconds(times_per_batch: Iterable[Sequence[float]]) -> float:
    """Seconds a run of mixed batches spends per step: each batch's median time (a load spike on one step
    does not count), averaged over the batches (long batches are dear, so the mean is above the median)."""
    return statistics.mean(statistics.median(times) for times in times_per_batch)


def seconds_per_step(model: nn.Module, batches: Sequence[dict[str, Tensor]], bf16: bool = False,
                     hold: Sequence[str] = (), min_seconds: float = 2.0, max_timed: int = 20,
                     device: Any = None, compile: bool = False) -> float:
    """Seconds a training step of `model` takes over `batches`, timed on a copy of it on `device`, the device the
    run will train on (default: where `model` is), with the precision it will have there (`bf16_on`).

    Each batch first runs once untimed (at least two steps in all): a shape's first step chooses its kernels and
    finds its memory (on a CPU with AMX, compiles them), and runs slower than the rest. Then the batches are cycled
    until every one was timed and `min_seconds` have passed (or `max_timed` steps),
    and `mean_step_seconds` says what a step costs. Parameters whose names start with a `hold` prefix are held
    as the Trainer holds them (`TrainingArguments.freeze`): no gradient reaches them. `compile`: the run compiles
    its model (`--compile`), so the copy is compiled as the Trainer compiles it, and its untimed first steps compile
    each shape (in the same process, the run's own compilation then finds their graphs made).
    """
    if not batches:
        raise InputError("timing training steps needs at least one batch")
    device = next(model.parameters()).device if device is None else torch.device(device)
    bf16 = bf16_on(device, bf16)
    probe = copy.deepcopy(model).to(device).train()
    for name, parameter in probe.named_parameters():
        if name.startswith(tuple(hold)):
            parameter.requires_grad_(False)
    optimizer = build_optimizer(probe, 1e-6, 0.01)  # the trainer's (fused) AdamW, over what it trains
    forward = compile_forward(probe) if compile else None
    if device.type != "cpu":
        seconds = _gpu_seconds_per_step(probe, optimizer, batches, bf16, min_seconds, max_timed, forward)
        del probe, optimizer, forward
        torch.cuda.empty_cache()  # the probe's copy and its optimizer's moments: the run gets its memory back
        return seconds
    for batch in list(batches) * (2 if len(batches) == 1 else 1):
        timed_step(probe, optimizer, batch, bf16, forward)  # untimed: each shape's first step (kernels, memory)
    times: dict[int, list[float]] = {}
    step, timed, spent = 0, 0, 0.0
    while timed < min(max_timed, len(batches)) or (spent < min_seconds and timed < max_timed):
        elapsed = timed_step(probe, optimizer, batches[step % len(batches)], bf16, forward)
        times.setdefault(step % len(batches), []).append(elapsed)
        timed, spent, step = timed + 1, spent + elapsed, step + 1
    return mean_step_seconds(times.values())


# The share of a time budget every plan keeps back for what no probe measures (step times spread around the timed
# ones, logging, checkpoint saves); `steps_for_budget` says how it is applied. A GPU's steps, timed back to back on
# the device itself, vary by a percent or two where a CPU's (shared with everything else the machine runs) vary by
# ten: a GPU run keeps back GPU_RESERVE (`reserve_for`).
RESERVE = 0.1
GPU_RESERVE = 0.04


def reserve_for(device: Any) -> float:
    """The share of a budget a run on `device` keeps back: RESERVE on the CPU, GPU_RESERVE on a GPU."""
    return GPU_RESERVE if device is not None and torch.device(device).type == "cuda" else RESERVE
# The evaluations of a run that evaluates once a tenth of the run (`TrainingOptions.training_arguments` without an
# `--eval-every`): ten, whatever its steps, so a fixed overhead.
EVALUATIONS = 10


def steps_for_budget(seconds_per_step: float, *, minutes: float | None = None, seconds: float | None = None,
                     overhead: float = 0.0, reserve: float = RESERVE) -> int:
    """How many optimizer steps a time budget holds: the one rule by which a run (every command's `--minutes`,
    the main job's planner) turns its time into steps, which its learning-rate schedule needs before it starts.

    The budget is `minutes` or `seconds` (one of them). From it goes first `overhead`, the seconds the run spends
    on work its clock counts that is not a training step and that the caller knows or measured (its evaluations,
    a fixed count of passes over held-out data); work that recurs with the steps (an evaluation every so many
    steps) belongs in `seconds_per_step`, as its share of each step. Of what is left, `reserve` (a share) is kept
    back for what nothing measured: step times spread around the probe's (batches it did not time, a busier
    machine), logging, checkpoint saves. The rest is divided by `seconds_per_step` (what the probe of that name
    measured, plus any per-step share):

        steps = floor((1 - reserve) * (budget - overhead) / seconds_per_step), at least 1

    (the floor forgives a rounding error of a billionth, so that a budget of exactly N steps plans N). At least
    one step: a budget the overhead fills, or one shorter than a step, plans one step rather than failing after
    the run loaded its data; its clock (`wall_clock_budget`) stops it at the budget all the same.
    """
    if (minutes is None) == (seconds is None):
        raise TypeError("give the budget as minutes or as seconds (one of them)")
    budget = minutes * 60 if minutes is not None else seconds
    if not math.isfinite(budget):
        raise InputError(f"a time budget must be a finite number of seconds, got {budget}")
    if not (math.isfinite(seconds_per_step) and seconds_per_step > 0):
        raise InputError(f"seconds_per_step must be a finite number above 0, got {seconds_per_step}")
    if not (math.isfinite(overhead) and overhead >= 0):
        raise InputError(f"overhead must be a finite number of seconds, 0 or more, got {overhead}")
    if not 0 <= reserve < 1:
        raise InputError(f"reserve must be a share in [0, 1), got {reserve}")
    steps = (1.0 - reserve) * (budget - overhead) / seconds_per_step
    return max(1, math.floor(steps * (1 + 1e-9)))


def plan_for_budget(seconds_per_step: float, *, minutes: float, device: Any, evaluation: float = 0.0,
                    eval_every: int | None = None, spent: float = 0.0) -> int:
    """The steps a `--minutes` run plans (`steps_for_budget`, with the reserve of its `device`), its evaluations paid
    first: each `evaluation` seconds long, one every `eval_every` steps (a share of each step), or, without
    `eval_every`, one a tenth of the run (EVALUATIONS of them, a fixed overhead); an evaluation 0 seconds long (a run
    that evaluates after its clock, or has nothing held out) costs nothing. `spent`: seconds of the budget the run
    used before its first step (summarize-train's encoder pass); at least a second is left."""
    reserve = reserve_for(device)
    budget = {"seconds": wall_clock_budget(minutes, spent)["max_seconds"]} if spent else {"minutes": minutes}
    if evaluation and eval_every:
        return steps_for_budget(seconds_per_step + evaluation / eval_every, reserve=reserve, **budget)
    return steps_for_budget(seconds_per_step, overhead=EVALUATIONS * evaluation, reserve=reserve, **budget)


def forward_seconds(examples: int, batch_size: int, seconds_per_step: float) -> float:
    """Seconds a forward pass over `examples` (an evaluation) takes, estimated from a training step over batches of
    `batch_size`: forward, backward and the update of a step cost about three forward passes."""
    return examples / batch_size * seconds_per_step / 3


def planned_steps(model: nn.Module, features: Sequence[Any], collate: Callable[[list[Any]], dict[str, Tensor]],
                  batch_size: int, max_steps: int, minutes: float | None, bf16: bool = False,
                  group_by_length: bool = True, eval_examples: int = 0, eval_every: int = 1,
                  device: Any = None) -> int:
    """`max_steps`, or fewer when `minutes` is given and fewer fit: a fine-tuning run's schedule sized to its time
    budget, so that it decays fully. The batches timed are `probe_batches`' (of like lengths where the run groups
    them so). A run that evaluates `eval_examples` every `eval_every` steps pays a share of that evaluation on each
    step (`forward_seconds`). The steps are timed on `device`, the run's."""
    if not minutes:
        return max_steps
    from bertkit.training.data_order import example_length

    B = min(batch_size, len(features))
    lengths = [example_length(f) for f in features] if group_by_length else None
    probes = [collate([features[i] for i in batch]) for batch in probe_batches(len(features), B, lengths)]
    step = seconds_per_step(model, probes, bf16, device=device)
    evaluation = forward_seconds(eval_examples, B, step)
    return min(max_steps, plan_for_budget(step, minutes=minutes, device=device, evaluation=evaluation,
                                          eval_every=eval_every))


def steps_per_epoch(examples: int, batch_size: int, what: str = "examples") -> int:
    """Optimizer steps in one pass over `examples` training `what`; a warning when a batch is more than all of them
    (each step then takes them all)."""
    if batch_size > examples:
        warnings.warn(f"--batch-size {batch_size} is more than the {examples} training {what}: each step takes all "
                      f"{examples}", stacklevel=3)
    return max(1, examples // batch_size)
