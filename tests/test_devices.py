"""The one device rule (bertkit.utils.devices), on any machine: a GPU is played by monkeypatching torch.cuda."""

import pytest
import torch

from bertkit.errors import InputError
from bertkit.utils.devices import check_device, resolve_device, to_device


@pytest.mark.parametrize("spec, canonical", [("auto", "auto"), ("CPU", "cpu"), (" cuda ", "cuda"),
                                             ("cuda:3", "cuda:3")])
def test_spellings_it_knows(spec, canonical):
    assert check_device(spec) == canonical


@pytest.mark.parametrize("spec", ["gpu", "cuda:", "cuda:x", "mps0", "", "cuda:1:2"])
def test_spellings_it_refuses(spec):
    with pytest.raises(InputError, match="--device must be auto, cpu, cuda or cuda:N"):
        check_device(spec)


@pytest.fixture
def gpus(monkeypatch):
    """This machine as one with `n` GPUs (0: none), whatever it has."""
    def have(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    return have


def test_auto_is_the_gpu_when_there_is_one(gpus, monkeypatch):
    gpus(0)
    assert resolve_device("auto") == resolve_device(None) == torch.device("cpu")
    with pytest.raises(InputError, match="--device cuda: this machine has no CUDA GPU"):
        resolve_device("cuda")
    gpus(2)
    assert resolve_device("auto") == torch.device("cuda", 0) and resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(InputError, match=r"--device cuda:2: this machine has 2 GPUs \(cuda:0 to cuda:1\)"):
        resolve_device("cuda:2")


def test_under_torchrun_each_process_takes_its_own_gpu_and_no_more_processes_than_gpus(gpus, monkeypatch):
    gpus(2)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert resolve_device("auto") == resolve_device("cuda") == torch.device("cuda", 1)
    gpus(1)
    with pytest.raises(InputError, match=r"torchrun started 2 processes on this machine but it has 1 GPU: one process "
                                         r"per GPU \(--nproc-per-node 1\), or give --device cpu"):
        resolve_device("auto")
    assert resolve_device("cpu") == torch.device("cpu")  # gloo, every process on the CPU


def test_to_device_moves_tensors_and_leaves_the_rest():
    ids = torch.arange(6).view(2, 3)
    batch = to_device({"input_ids": ids, "size": 2, "names": ["a", "b"]}, "cpu")
    assert batch["input_ids"] is ids and batch["size"] == 2 and batch["names"] == ["a", "b"]  # on the CPU: no copy
    assert to_device(ids, torch.device("cpu")) is ids and to_device(None, "cpu") is None
