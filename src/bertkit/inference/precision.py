"""A model in another number format for inference: float32, a bfloat16 copy, or int8 Linear layers.

    fast = for_inference(model, "bfloat16")       # a copy: bf16 weights, so every activation is bf16 too
    small = for_inference(model, "int8")          # a copy: Linear weights int8, activations quantized per call
    encode(fast, tokenizer, texts)                # a converted model runs as it is

bfloat16 keeps float32's exponent range with an 8-bit mantissa: sentence vectors stay within cosine ~0.9999 of
float32's, and a CPU that computes it natively (AVX-512 BF16, AMX) runs its matmuls several times faster. A
CPU without it would emulate every product, slower than float32: there the float32 model runs, with a warning.

int8 is dynamic quantization (`torch.ao.quantization.quantize_dynamic`): each Linear's weight is quantized once
to int8, one scale per output row, each input per call with one scale for the whole batch, and the product
accumulated in int32; embeddings, LayerNorm and attention stay float32. That one input scale is int8's weak
spot: a few large activations (after GELU, into the feed-forward's second Linear) coarsen every other token's.

The original model is never changed. The copy shares nothing it could write back: a bf16 copy holds new
tensors, an int8 copy holds new quantized Linears and shares the float32 embeddings and LayerNorms read-only.
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from bertkit.errors import InputError
from bertkit.inference.machine import native_bfloat16

DTYPES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16", "int8": "int8"}


class PrecisionWarning(UserWarning):
    """The asked-for number format cannot run fast here, so the model runs in float32."""


def dtype_name(dtype: str | torch.dtype) -> str:
    """"float32", "bfloat16" or "int8" for any of their names (fp32, bf16, torch.bfloat16, ...), or a clear error."""
    name = str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else dtype
    if not isinstance(name, str) or name.lower() not in DTYPES:
        raise InputError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return DTYPES[name.lower()]


def model_dtype(model: nn.Module) -> str:
    """The number format `model` computes in: "int8" when its Linears are quantized, else its parameters' dtype."""
    if any(_is_quantized_linear(module) for module in model.modules()):
        return "int8"
    first = next((p for p in model.parameters() if p.is_floating_point()), None)
    return "float32" if first is None else dtype_name(first.dtype)


def for_inference(model: nn.Module, dtype: str | torch.dtype | None) -> nn.Module:
    """`model` itself when it already computes in `dtype` (or dtype is None), else a converted copy in eval mode.

    bfloat16 on a CPU without native bf16 gives a PrecisionWarning and the float32 model. int8 is CPU-only.
    """
    if dtype is None:
        return model
    want, have = dtype_name(dtype), model_dtype(model)
    if want == have:
        return model
    device = next(model.parameters()).device
    if want == "bfloat16" and not native_bfloat16(device):
        warnings.warn(f"this {device.type.upper()} does not compute bfloat16 natively (no AVX-512 BF16 or AMX), "
                      "so bfloat16 would be slower than float32: running in float32", PrecisionWarning, stacklevel=3)
        want = "float32"
        if have == want:
            return model
    if have == "int8":
        raise InputError(f"this model's Linear layers are quantized to int8; convert the original model to {want}")
    if want == "int8":
        return quantize_int8(model)
    return converted_copy(model, getattr(torch, want))


def converted_copy(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A copy of `model` in eval mode whose floating parameters and buffers are `dtype`, each tensor converted once.

    deepcopy would first copy every float32 tensor and then convert it; here each tensor's converted version is
    handed to deepcopy in advance, so the copy costs one conversion per tensor (a tied tensor stays tied).
    """
    memo: dict[int, object] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        if id(tensor) in memo:
            continue
        data = tensor.detach().to(dtype) if tensor.is_floating_point() else tensor.detach().clone()
        memo[id(tensor)] = nn.Parameter(data, requires_grad=False) if isinstance(tensor, nn.Parameter) else data
    return copy.deepcopy(model, memo).eval()


def quantize_int8(model: nn.Module) -> nn.Module:
    """A copy of `model` whose Linear layers are dynamically quantized to int8 (CPU); the rest shares float32."""
    device = next(model.parameters()).device
    if device.type != "cpu":
        raise InputError(f"int8 dynamic quantization runs on CPU only; this model is on {device}")
    if torch.backends.quantized.engine == "none":
        raise InputError("this torch build has no quantized engine (fbgemm, x86 or qnnpack) for int8")
    # the Linears are replaced in the copy; the tensors they read are shared, read-only, not copied
    memo: dict[int, object] = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    shallow = copy.deepcopy(model, memo).eval()
    with warnings.catch_warnings():
        # torch announces that quantize_dynamic moves to torchao; in this torch it is the eager int8 path
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.ao")
        warnings.filterwarnings("ignore", message=r".*quantize_per_tensor.*deprecated")
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated")
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        # one scale per output row: on m3e-small and MiniLM per-tensor weights leave the sentence vectors at mean
        # cosine 0.983 and 0.926 to float32's, per-row ones at 0.990 and 0.967, for a few percent of the speed
        return quantize_dynamic(shallow, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True)


def _is_quantized_linear(module: nn.Module) -> bool:
    return type(module).__module__.startswith("torch.ao.nn.quantized") and type(module).__name__ == "Linear"
