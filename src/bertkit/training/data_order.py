"""A run's data order: which examples each optimizer step trains on, and how they are collated.

The order is a pure function of (seed, epoch): global batch i of an epoch is the next `batch_size` indices of a
seeded permutation (optionally grouped by length), each process of a torchrun job takes its contiguous share of every
global batch, and every example gets a collation seed from (seed, epoch, index). So the examples of a step and their
masking do not depend on the number of processes or accumulation steps, and a resumed run repeats nothing. Worker
processes can collate the steps ahead while the model computes (`collating_loader`); they give the same batches.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from bertkit.errors import BertkitError, InputError
from bertkit.utils.rng import mix

MicroBatches = list[tuple[int, dict[str, Any]]]  # a process's share of a step: (number of examples, batch) each


def example_seed(seed: int, epoch: int, index: int) -> int:
    """A 63-bit collation seed from (seed, epoch, dataset index): splitmix64 mixing (utils/rng.py), stable across
    processes."""
    return mix(0, seed, epoch, index) >> 1


def example_length(example: Any) -> int:
    """Tokens in a training example: its input_ids, a key (fine-tuning features) or an attribute (pretraining
    instances)."""
    return len(example["input_ids"] if isinstance(example, Mapping) else example.input_ids)


def length_grouped(perm: np.ndarray, lengths: np.ndarray, batch_size: int, rng: np.random.Generator,
                   window: int = 50) -> np.ndarray:
    """Reorder an epoch's permutation so each batch holds examples of similar length, the batches in random order.

    Take the shuffled examples `window` batches at a time, sort each window by length and cut it into
    batches (so a batch pads to little more than its own examples), then shuffle the order of the batches.
    Which examples share a batch stays random; padding, and so compute, shrinks. The epoch's remainder
    (fewer than a batch, which the trainer drops) is left where it was.
    """
    grouped, order = _sorted_windows(perm.copy(), lengths, batch_size, rng, window)
    full = len(order) * batch_size
    return np.concatenate([grouped[:full].reshape(-1, batch_size)[order].reshape(-1), perm[full:]])


def _sorted_windows(perm: np.ndarray, lengths: np.ndarray, batch_size: int, rng: np.random.Generator,
                    window: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """`length_grouped` without its copies: `perm` with each window sorted by length (in place), and the random
    order of its batches (batch p of the epoch is batch order[p] of the sorted permutation). A pretraining corpus
    has millions of examples: one array of them per epoch, not five."""
    full = len(perm) // batch_size * batch_size          # the remainder, dropped by the trainer, stays random
    span = window * batch_size
    for start in range(0, full, span):
        chunk = perm[start:min(start + span, full)]
        chunk[:] = chunk[np.argsort(-lengths[chunk].astype(np.int64), kind="stable")]
    return perm, rng.permutation(full // batch_size)


class DataOrder:
    """The examples of every step of a run over `dataset`: `global_batch(step)` says which, `collated(step, rank,
    world_size)` gives one process's micro-batches of them, through `collate_fn(examples, seeds)`."""

    def __init__(self, dataset: Sequence[Any], collate_fn: Callable[[list[Any], list[int]], dict[str, torch.Tensor]],
                 batch_size: int, seed: int, group_by_length: bool = False, accumulation: int = 1) -> None:
        self.dataset, self.collate_fn, self.batch_size, self.seed = dataset, collate_fn, batch_size, seed
        self.group_by_length, self.accumulation = group_by_length, accumulation
        self.steps_per_epoch = len(dataset) // batch_size
        if self.steps_per_epoch == 0:
            raise InputError(f"the training set has {len(dataset)} examples, fewer than one global batch "
                             f"({batch_size}); lower batch_size or add data")
        self._perm_epoch, self._perm, self._order = -1, np.empty(0, dtype=np.int64), None
        self._example_lengths: np.ndarray | None = None

    def global_batch(self, step: int) -> tuple[int, np.ndarray]:
        """(epoch, dataset indices) of the global batch consumed by optimizer step `step` (0-based)."""
        epoch, position = divmod(step, self.steps_per_epoch)
        if epoch != self._perm_epoch:
            rng = np.random.default_rng([self.seed, epoch])
            n = len(self.dataset)
            perm = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)  # rng.permutation(n), in half the memory
            rng.shuffle(perm)
            order = None
            if self.group_by_length:
                perm, order = _sorted_windows(perm, self._lengths(), self.batch_size, rng)
            self._perm_epoch, self._perm, self._order = epoch, perm, order
        if self._order is not None:
            position = int(self._order[position])
        return epoch, self._perm[position * self.batch_size:(position + 1) * self.batch_size]

    def _lengths(self) -> np.ndarray:
        if self._example_lengths is None:
            lengths = getattr(self.dataset, "lengths", None)
            if callable(lengths):  # a dataset that knows its lengths without building its examples (pretraining)
                self._example_lengths = lengths()
                return self._example_lengths
            try:
                self._example_lengths = np.array([example_length(ex) for ex in self.dataset])
            except (TypeError, KeyError, IndexError, AttributeError) as err:
                raise InputError("group_by_length needs examples with input_ids (a key or an attribute)") from err
        return self._example_lengths

    def collated(self, step: int, rank: int = 0, world_size: int = 1) -> MicroBatches:
        """Process `rank`'s micro-batches of a step, collated (on the CPU), as (num_examples, batch)."""
        epoch, indices = self.global_batch(step)
        share = np.array_split(indices, world_size)[rank]
        out = []
        for part in np.array_split(share, self.accumulation):
            ids = [int(i) for i in part]
            out.append((len(ids), self.collate_fn([self.dataset[i] for i in ids],
                                                  [example_seed(self.seed, epoch, i) for i in ids])))
        return out


def count_tokens(batch: Mapping[str, Any]) -> int:
    """Real (unpadded) tokens of a collated batch, counted on its host copy."""
    if "attention_mask" in batch:
        return int(batch["attention_mask"].sum())
    return int(batch["input_ids"].numel()) if "input_ids" in batch else 0


class _Steps(torch.utils.data.Dataset):
    """A data loader's view of a run: item k is one process's collated micro-batches of step start + k."""

    def __init__(self, order: DataOrder, start: int, total_steps: int, rank: int, world_size: int) -> None:
        self.order, self.start, self.total_steps, self.rank, self.world_size = (order, start, total_steps, rank,
                                                                                world_size)

    def __len__(self) -> int:
        return max(0, self.total_steps - self.start)

    def __getitem__(self, k: int) -> tuple[int, MicroBatches | BertkitError]:
        try:
            micro = self.order.collated(self.start + k, self.rank, self.world_size)
        except BertkitError as err:  # bad data, said for people: handed back as it is (the data loader would raise
            return self.start + k, err  # it again with its worker's traceback in the message; a bug keeps that)
        return self.start + k, [(size, {key: _as_array(v) for key, v in batch.items()}) for size, batch in micro]


# A worker's batch crosses to the main process as numpy arrays, pickled whole through the loader's pipe. As tensors,
# each would cross as shared memory whose file descriptor the main process fetches from the worker, one socket round
# trip per tensor, answered only when the worker, busy collating the next batch, lets go of its interpreter lock (a
# profile of the tiny BERT on a GPU: 17 ms a step in the loader's pinning thread, more than the model's whole step).
def _as_array(value: Any) -> Any:
    return value.numpy() if torch.is_tensor(value) and value.dtype != torch.bfloat16 else value


def _as_tensor(value: Any) -> Any:
    return torch.from_numpy(value) if isinstance(value, np.ndarray) else value


def _as_is(item: Any) -> Any:  # the loader's collate_fn: a step arrives collated, as `_Steps` made it
    return item


def _received(loader: Iterator) -> Iterator[tuple[int, MicroBatches | BertkitError]]:
    for step, micro in loader:
        if isinstance(micro, BertkitError):
            yield step, micro
        else:
            yield step, [(size, {key: _as_tensor(value) for key, value in batch.items()}) for size, batch in micro]


# Worker processes that collate a GPU run's batches when the run does not say how many (`dataloader_workers` 0): the
# host's collation of a small model's batch takes as long as the GPU's step, so done inline it halves the speed. At
# most half the cores, so the process that drives the GPU keeps one.
GPU_LOADER_WORKERS = 4


def loader_workers(requested: int, device: torch.device) -> int:
    """Processes that collate batches for a run on `device`: as requested, or on a GPU, when the run asked for none,
    GPU_LOADER_WORKERS (at most half the cores); on the CPU none, as they would take cores from the model."""
    if requested or device.type != "cuda":
        return requested
    return max(1, min(GPU_LOADER_WORKERS, (os.cpu_count() or 2) // 2))


def _one_thread(_: int) -> None:
    torch.set_num_threads(1)  # a worker collates; the model's threads are the main process's


def collating_loader(order: DataOrder, start: int, total_steps: int, workers: int, rank: int = 0,
                     world_size: int = 1) -> Iterator[tuple[int, MicroBatches | BertkitError]] | None:
    """`workers` processes that collate steps start, start + 1, ... while the model computes (each step's batches
    are a pure function of the step, so the order and a resume are the same as without them), or None for none."""
    if not workers or start >= total_steps:
        return None
    from torch.utils.data import DataLoader

    # a generator of its own: a loader seeds its workers from the one it is given, by default torch's global one,
    # and a draw from that would shift the dropout of every step after it (and differently after a resume)
    # no pin_memory thread: `to_device` pins each batch as it copies it to the GPU
    loader = DataLoader(_Steps(order, start, total_steps, rank, world_size), batch_size=None, num_workers=workers,
                        prefetch_factor=2, worker_init_fn=_one_thread, collate_fn=_as_is,
                        generator=torch.Generator().manual_seed(order.seed))
    with warnings.catch_warnings():
        # Python warns that forking a process with threads (CUDA's) can deadlock the child; the workers only
        # collate on the CPU and never touch CUDA, as torch's data loaders always have
        warnings.filterwarnings("ignore", message=r".*use of fork\(\) may lead to deadlocks",
                                category=DeprecationWarning)
        return _received(iter(loader))
