"""Data parallelism under `torchrun`: process-group set-up and the few collectives the trainer needs.

With no torchrun environment (RANK / WORLD_SIZE unset) everything here is a no-op on one process,
so the training loop reads the same either way.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from bertkit.utils.devices import resolve_device


@dataclass
class Distributed:
    """This process's place in the job: rank, world size, device, and whether we own the process group."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    created_group: bool = False

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over all processes, in place, and return it."""
        if self.enabled:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every process (picklable objects only: small dicts, lists, numbers)."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every process's `obj`, in rank order, on every process."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def close(self) -> None:
        """Tear down the process group if `setup_distributed` created it."""
        if self.created_group and dist.is_initialized():
            # gloo's worker threads drop the tensors of the last collectives just after reporting them done, and
            # dropping a tensor Python has seen takes the GIL; destroy_process_group joins those threads while
            # holding the GIL (pytorch/pytorch#56297, #75097). Seen here: a worker hung at exit, its main thread
            # in the join, a gloo thread waiting for the GIL. Sleeping releases the GIL so they can finish first.
            time.sleep(0.2)
            dist.destroy_process_group()
            self.created_group = False


def process_rank() -> int:
    """This process's rank under torchrun (RANK), 0 without it; rank 0 is the one that writes and prints."""
    return int(os.environ.get("RANK", "0"))


def process_count() -> int:
    """How many processes torchrun started (WORLD_SIZE), 1 without it."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def setup_distributed(device: str | None = None) -> Distributed:
    """Read torchrun's environment, pick the device (`bertkit.utils.devices.resolve_device`: under torchrun each
    process on its own GPU, LOCAL_RANK's) and join the process group (nccl on CUDA, bound to that GPU; gloo on CPU)."""
    world_size = process_count()
    rank = process_rank()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    info = Distributed(rank=rank, world_size=world_size, local_rank=local_rank, device=dev)
    if world_size > 1 and not dist.is_initialized():
        if dev.type == "cuda":  # device_id: NCCL binds to this GPU now, not to one it guesses from the rank
            dist.init_process_group(backend="nccl", rank=rank, world_size=world_size, device_id=dev)
        else:
            dist.init_process_group(backend="gloo", rank=rank, world_size=world_size)
        info.created_group = True
    elif world_size > 1 and dist.get_world_size() != world_size:
        raise RuntimeError(f"process group has {dist.get_world_size()} processes but WORLD_SIZE={world_size}")
    return info


class _GatherWithGrad(torch.autograd.Function):
    """All processes' rows in rank order, with a backward that gives each process the gradient of every process's
    loss with respect to its own rows."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
        world, rank = dist.get_world_size(), dist.get_rank()
        # all_gather moves tensors of one shape: a process with fewer rows (an uneven share) pads, and says how many
        sizes = [torch.zeros(1, dtype=torch.long, device=tensor.device) for _ in range(world)]
        dist.all_gather(sizes, torch.tensor([tensor.size(0)], dtype=torch.long, device=tensor.device))
        counts = [int(size.item()) for size in sizes]
        padded = torch.cat([tensor, tensor.new_zeros((max(counts) - tensor.size(0), *tensor.shape[1:]))])
        parts = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded.contiguous())
        ctx.counts, ctx.rank = counts, rank
        return torch.cat([part[:count] for part, count in zip(parts, counts)])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        # Every process computed its loss from all the rows, so the gradient reaching this process's rows is the
        # sum over processes of each one's gradient for them.
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        start = sum(ctx.counts[:ctx.rank])
        return grad[start:start + ctx.counts[ctx.rank]]


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """(n_r, ...) on each process -> (sum of n_r, ...) on every process, rank 0's rows first; the tensor itself
    without a process group. Gradients flow back to each process's own rows from the losses of all processes (the
    in-batch negatives of a contrastive loss then span the whole global batch)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return tensor
    return _GatherWithGrad.apply(tensor)


def average_gradients(model: torch.nn.Module) -> None:
    """Average the parameters' gradients over the processes, in one all_reduce: what DistributedDataParallel does
    after a backward, for a model it cannot wrap (one whose backward runs its forward again)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
