"""Where a command computes: the one rule that turns `--device auto|cpu|cuda|cuda:N` into a torch device.

    auto     the GPU when there is one (under torchrun, LOCAL_RANK's), else the CPU
    cpu      the CPU, even beside a GPU
    cuda     the current GPU (under torchrun, LOCAL_RANK's)
    cuda:N   GPU number N

A spelling is checked without torch (`check_device`: the command line reads it at start-up); what the machine has is
checked when the device is resolved (`resolve_device`), with an error that names the GPUs there are. bf16 follows the
device (`bf16_on`): on a GPU without bfloat16 (before compute capability 8.0) a run asked for bf16 runs in float32 and
says so once.
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Any

from bertkit.errors import InputError

DEVICE_HELP = "where the model computes: auto (the GPU when there is one), cpu, cuda or cuda:N"
_SPELLING = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def check_device(spec: str) -> str:
    """`spec` when it is a device bertkit knows how to spell (auto, cpu, cuda, cuda:N), else an InputError."""
    if not isinstance(spec, str) or not _SPELLING.match(spec.strip().lower()):
        raise InputError(f"--device must be auto, cpu, cuda or cuda:N (N a GPU number), got {spec!r}")
    return spec.strip().lower()


def resolve_device(spec: str | None = "auto") -> Any:
    """The torch.device `spec` names on this machine (None means auto); an InputError for a GPU it does not have.

    Under torchrun (LOCAL_RANK set) auto and cuda mean this process's own GPU, LOCAL_RANK's, and more processes on
    this machine than it has GPUs is an error naming both counts (the CPU with gloo is `--device cpu`)."""
    import torch

    spec = check_device("auto" if spec is None else spec)
    if spec == "cpu":
        return torch.device("cpu")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if spec == "auto" and gpus == 0:
        return torch.device("cpu")
    if gpus == 0:
        raise InputError(f"--device {spec}: this machine has no CUDA GPU that torch {torch.__version__} can use "
                         "(torch.cuda.is_available() is False); give --device cpu, or auto")
    local = os.environ.get("LOCAL_RANK")
    if spec in ("auto", "cuda") and local is not None:
        processes = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
        if processes > gpus:
            raise InputError(f"torchrun started {processes} processes on this machine but it has {gpus} GPU"
                             f"{'s' if gpus > 1 else ''}: one process per GPU (--nproc-per-node {gpus}), or give "
                             "--device cpu to run them all on the CPU")
        return torch.device("cuda", int(local))
    if spec in ("auto", "cuda"):
        return torch.device("cuda", torch.cuda.current_device())
    index = int(spec.partition(":")[2])
    if index >= gpus:
        raise InputError(f"--device {spec}: this machine has {gpus} GPU{'s' if gpus > 1 else ''} "
                         f"(cuda:0{f' to cuda:{gpus - 1}' if gpus > 1 else ''})")
    return torch.device("cuda", index)


def gpu_computes_bf16(device: Any) -> bool:
    """Whether the GPU `device` computes bfloat16 in hardware (compute capability 8.0 on), not the emulation torch
    offers on older GPUs."""
    import torch

    with torch.cuda.device(torch.device(device)):
        return torch.cuda.is_bf16_supported(including_emulation=False)


def bf16_on(device: Any, asked: bool) -> bool:
    """Whether a run asked for bf16 autocast (`asked`) gets it on `device`: everywhere but a GPU that has no bfloat16
    (compute capability below 8.0: V100, T4), where it runs in float32 with a warning. The CPU keeps the choice as
    asked (emulated bf16 is slower there, but computes the same numbers)."""
    import torch

    device = torch.device(device)
    if not asked or device.type != "cuda" or gpu_computes_bf16(device):
        return asked
    warnings.warn(f"{torch.cuda.get_device_name(device)} has no bfloat16 arithmetic (compute capability "
                  f"{'.'.join(map(str, torch.cuda.get_device_capability(device)))}, bf16 needs 8.0): this run "
                  "computes in float32", stacklevel=2)
    return False


def to_device(batch: Any, device: Any) -> Any:
    """A tensor, or each tensor of a dict (other values as they are), on `device`: the one host-to-device copy. To a
    GPU it goes from page-locked memory without waiting, so the copy overlaps the work the GPU still has queued and
    the host goes on (a tensor already pinned, by a data loader, is not copied twice); on the CPU nothing moves."""
    import torch

    device = torch.device(device)

    def moved(tensor: Any) -> Any:
        if not torch.is_tensor(tensor):
            return tensor
        if device.type == "cuda" and tensor.device.type == "cpu":
            return (tensor if tensor.is_pinned() else tensor.pin_memory()).to(device, non_blocking=True)
        return tensor.to(device)

    return {key: moved(value) for key, value in batch.items()} if isinstance(batch, dict) else moved(batch)


def synchronize(device: Any) -> None:
    """Wait for the work queued on `device` (a GPU runs ahead of the Python that queues its kernels): a clock read
    after it times the work itself. Nothing to wait for on the CPU."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: Any) -> str:
    """What a plan or report calls `device`: the GPU's name ("NVIDIA H100 80GB HBM3, cuda:0"), or "cpu"."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"{torch.cuda.get_device_name(index)}, cuda:{index}"
    return device.type
