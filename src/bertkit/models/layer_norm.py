"""`LayerNorm`: torch's `nn.LayerNorm`, which under a GPU's bf16 autocast reads and writes bf16 instead of float32.

Autocast runs LayerNorm in float32: it casts a bf16 input up and returns float32. In a post-LN BERT that float32
output is the residual stream, so every block then casts it back down for each matrix product that reads it, adds
its sublayer's bf16 output to it in float32, and normalises 4-byte values: on an H200, profiled over BERT-base's
pretraining step at 256 x 128, the casts alone took 7.5 ms and LayerNorm with its backward 7.9 ms of a 68 ms step,
with the matrix products 24 ms. Here LayerNorm reads its input in autocast's dtype and writes that dtype; the
kernel still computes each row's mean and variance in float32 (torch's GPU LayerNorm accumulates bf16 in float32),
so only the stored activations are rounded, as every bf16 activation of a matrix product already is. The residual
stream is then bf16, and the casts and half of the normalisation's bytes are gone (MosaicBERT's "low-precision
LayerNorm" does the same).

It applies on the devices in LOW_PRECISION_DEVICES (the GPU). Elsewhere, and outside autocast, it is exactly
`nn.LayerNorm`: a CPU computes as it always did, bit for bit. A subclass of `nn.LayerNorm` with the same parameters,
so checkpoints, initialisation and the weight-decay groups do not change.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# The device types whose autocast LayerNorm runs in low precision. Not the CPU: its runs stay bit-identical to
# earlier versions'. A benchmark or a test may change it (an empty set: autocast's float32 LayerNorm everywhere).
LOW_PRECISION_DEVICES: set[str] = {"cuda"}


def low_precision_dtype(x: Tensor) -> torch.dtype | None:
    """The dtype LayerNorm should read and write for x: autocast's on a LOW_PRECISION_DEVICES device while autocast
    is on there; None (float32, autocast's rule, or x's own dtype outside autocast) otherwise."""
    device = x.device.type
    if device not in LOW_PRECISION_DEVICES or not torch.is_autocast_enabled(device):
        return None
    return torch.get_autocast_dtype(device)


class LayerNorm(nn.LayerNorm):
    """LayerNorm over the last dimensions, in autocast's dtype on a GPU (see the module's docstring)."""

    def forward(self, x: Tensor) -> Tensor:
        dtype = low_precision_dtype(x)
        if dtype is None:
            return super().forward(x)
        weight = None if self.weight is None else self.weight.to(dtype)
        bias = None if self.bias is None else self.bias.to(dtype)
        with torch.autocast(x.device.type, enabled=False):  # else autocast would run it in float32 again
            return F.layer_norm(x.to(dtype), self.normalized_shape, weight, bias, self.eps)
