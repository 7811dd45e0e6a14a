"""The machine a command computes on: its CPU, its threads, and whether it computes bfloat16 natively.

bf16 is only worth using where the CPU has it in hardware (AVX-512 BF16, AMX); elsewhere every product is emulated
and slower than float32. Most users' CPUs lack it, so a slower machine can be run on a faster one by capping the
instruction sets this process may use, and everything bertkit decides from `native_bfloat16` is then decided as
that machine would (the main job's plan, the recipes' bf16, `serve --dtype`):

    ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI OMP_NUM_THREADS=1 bertkit demo   # as an Intel Cascade Lake (no bf16)
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 bertkit demo        # as an AVX2-only laptop
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

import torch

from bertkit.utils.devices import gpu_computes_bf16

# oneDNN's names of the instruction sets below AVX-512 BF16 (ONEDNN_MAX_CPU_ISA); at or above it bf16 is native
ISAS_WITHOUT_BFLOAT16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI")


def cpu_isa_cap() -> str | None:
    """The setting that holds this process below native bfloat16, as `NAME=value`, or None.

    ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16 caps oneDNN, which computes the bf16 matmuls (they are then emulated,
    as on such a CPU); ATEN_CPU_CAPABILITY=avx2 (or default) caps torch's own kernels as on a CPU without AVX-512."""
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    if isa in ISAS_WITHOUT_BFLOAT16:
        return f"ONEDNN_MAX_CPU_ISA={isa}"
    asked = os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    if asked in ("default", "avx2"):
        return f"ATEN_CPU_CAPABILITY={asked}"
    return None


def native_bfloat16(device: torch.device | str = "cpu") -> bool:
    """Whether `device` computes bfloat16 matmuls natively (CPU: AVX-512 BF16 or AMX, unless `cpu_isa_cap` holds the
    process below them; CUDA: compute capability 8.0 on)."""
    device = torch.device(device)
    if device.type == "cuda":
        return gpu_computes_bf16(device)
    if device.type != "cpu":
        return True  # other accelerators are built for it
    cpu = torch.cpu
    has = any(bool(getattr(cpu, check, lambda: False)()) for check in ("_is_avx512_bf16_supported",
                                                                       "_is_amx_tile_supported"))
    return has and cpu_isa_cap() is None


def cpu_name() -> str:
    """The CPU's model name as the system reports it (lscpu's "Model name"), e.g. "AMD EPYC"."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


@dataclass(frozen=True)
class Machine:
    """What a timing or a result depends on: the CPU, the threads torch computes with, native bf16 or not, and the
    setting that holds the process below the CPU's own instruction sets (an emulated slower machine), if any."""

    cpu: str
    threads: int
    bf16: bool
    capped_by: str | None = None

    @classmethod
    def here(cls) -> Machine:
        return cls(cpu_name(), torch.get_num_threads(), native_bfloat16(), cpu_isa_cap())

    def describe(self) -> str:
        """One line, e.g. "AMD EPYC, 2 threads, native bf16"."""
        bf16 = "native bf16" if self.bf16 else "no native bf16"
        if self.capped_by:
            bf16 += f" (held below the CPU's own by {self.capped_by})"
        return f"{self.cpu}, {self.threads} thread{'' if self.threads == 1 else 's'}, {bf16}"
