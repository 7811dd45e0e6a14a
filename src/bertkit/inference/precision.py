"""A model in another number format for inference: float32, a bfloat16 copy, or int8 Linear layers.

    fast = for_inference(model, "bfloat16")       # a copy: bf16 weights, so every activation is bf16 too
    small = for_inference(model, "int8")          # a copy: Linear weights int8, activations quantized per call
    encode(fast, tokenizer, texts)                # a converted model runs as it is

bfloat16 keeps float32's exponent range with an 8-bit mantissa: sentence vectors stay within cosine ~0.9999 of
float32's, and a CPU that computes it natively (AVX-512 BF16, AMX) runs its matmuls several times faster. A
CPU without it would emulate every product, slower than float32: there the float32 model runs, with a warning.

int8 (`Int8Linear`) multiplies every Linear in int8 and accumulates in int32: each token's activations get a scale
of their own, after SmoothQuant's migration of the batch's large input channels into the weights; embeddings,
LayerNorm and attention stay float32. On m3e-small's headlines the sentence vectors stay within cosine 0.9996 of
float32's (torch's dynamic quantization, one activation scale per batch: 0.98).

The original model is never changed. The copy shares nothing it could write back: a bf16 copy holds new
tensors, an int8 copy holds new Int8Linears and shares the float32 embeddings and LayerNorms read-only. An int8
copy's vectors depend a little on the batch (its smoothing is the batch's); float32's and bfloat16's do not.
"""

from __future__ import annotations

import copy
import functools
import warnings

import torch
from torch import nn

from bertkit.errors import InputError
from bertkit.inference.machine import native_bfloat16
from bertkit.utils.dtypes import BFLOAT16, DTYPES, FLOAT32, INT8


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
        return INT8
    first = next((p for p in model.parameters() if p.is_floating_point()), None)
    return FLOAT32 if first is None else dtype_name(first.dtype)


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
    if want == BFLOAT16 and not native_bfloat16(device):
        what, lacks = (("GPU", "compute capability below 8.0") if device.type == "cuda" else
                       (device.type.upper(), "no AVX-512 BF16 or AMX"))
        warnings.warn(f"this {what} does not compute bfloat16 natively ({lacks}), "
                      "so bfloat16 would be slower than float32: running in float32", PrecisionWarning, stacklevel=3)
        want = FLOAT32
        if have == want:
            return model
    if have == INT8:
        raise InputError(f"this model's Linear layers are quantized to int8; convert the original model to {want}")
    if want == INT8:
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


# SmoothQuant's migration strength: how much of an input channel's range moves into the weights (0: none, 1: all).
# On m3e-small's THUCNews headlines 0.5 leaves the sentence vectors at min cosine 0.9992 to float32's, 0.7 at 0.9997.
SMOOTHING = 0.7


@functools.cache
def exact_int8_products() -> bool:
    """Whether `torch._int_mm` multiplies 8-bit weights exactly on this CPU: so with VNNI or AMX. Without them its
    kernel sums pairs of u8 x s8 products in int16, which saturates on weights of all 8 bits (a 23% error measured
    on AVX2) and is exact on 7 (fbgemm's `reduce_range`). Found by multiplying a probe once, not from the CPU's name."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randint(-127, 128, (32, 256), dtype=torch.int8, generator=generator)
    b = torch.randint(-127, 128, (256, 32), dtype=torch.int8, generator=generator)
    return torch.equal(torch._int_mm(a, b), (a.long() @ b.long()).int())


def int8_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b in int32, exactly, for int8 `a` (M, K) and `b` (K, N): one `torch._int_mm`, or where the CPU's kernel
    saturates on 8-bit weights (`exact_int8_products`), two on b's 7-bit halves, b = 2 * high + low."""
    if exact_int8_products():
        return torch._int_mm(a, b)
    high = torch.div(b, 2, rounding_mode="floor")                                       # [-64, 63]
    return torch._int_mm(a, high).mul_(2).add_(torch._int_mm(a, b - 2 * high))          # low: 0 or 1


class Int8Linear(nn.Module):
    """A Linear that multiplies in int8 with int32 accumulation (`torch._int_mm`: VNNI or AMX where the CPU has them).

    Dynamic quantization with one scale for a whole batch's activations loses most where a few input channels are
    far larger than the rest (after LayerNorm, after GELU): every other channel keeps a few levels. Here each
    token's activations get a scale of their own, and, before that, SmoothQuant's migration evens the channels out
    on this very batch: channel j of the input is divided by s_j = max|x_j|^a / max|W_j|^(1-a) and column j of the
    weights multiplied by it (the product is unchanged), and the weights are quantized per output column for the
    batch (a few cheap passes over the weight, against a matmul over every token). Nothing is calibrated in advance.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight_t", weight.t().contiguous())                     # (in, out), float32
        self.register_buffer("weight_range", weight.abs().amax(0).clamp(min=1e-5).pow(1 - SMOOTHING))
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        smooth = rows.abs().amax(0).clamp(min=1e-5).pow(SMOOTHING) / self.weight_range   # (in,)
        rows = rows / smooth
        row_scale = rows.abs().amax(1, keepdim=True).clamp(min=1e-8) / 127               # a scale per token
        quantized = (rows / row_scale).round_().to(torch.int8)
        weight = self.weight_t * smooth[:, None]
        column_scale = weight.abs().amax(0).clamp(min=1e-8) / 127                         # a scale per output
        weight = (weight / column_scale).round_().to(torch.int8)
        out = int8_matmul(quantized, weight).float().mul_(row_scale).mul_(column_scale)
        if self.bias is not None:
            out += self.bias
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def quantize_int8(model: nn.Module) -> nn.Module:
    """A copy of `model` whose Linear layers compute in int8 (`Int8Linear`, CPU); the rest shares float32."""
    device = next(model.parameters()).device
    if device.type != "cpu":
        raise InputError(f"int8 quantization runs on CPU only; this model is on {device}: run it on the CPU for int8, "
                         "or in bfloat16 or float32 where it is")
    # the Linears are replaced in the copy; the tensors they read are shared, read-only, not copied
    memo: dict[int, object] = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    shallow = copy.deepcopy(model, memo).eval()
    for module in list(shallow.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, name, Int8Linear(child))
    return shallow


def _is_quantized_linear(module: nn.Module) -> bool:
    return isinstance(module, Int8Linear)

