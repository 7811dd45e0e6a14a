"""`compile_forward`: a model's forward under torch.compile, in whole graphs although its shapes depend on the data.

Masked-LM heads score only the positions a batch predicts (`masked_lm_scores`), so their row count is known only
when the labels are: dynamo would stop its graph there (`nonzero`) and run the head in eager mode, and again where a
mean divides by that count. Compiled here, it records such a count as a symbol instead, and the forward compiles to
whole graphs that do not change with it. Dropout under compilation takes torch's kernel (`functional.dropout`), which
the compiler fuses with its neighbours.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

BACKEND = "inductor"  # torch.compile's default; a test may take "aot_eager", which compiles in seconds


def compile_forward(module: nn.Module, backend: str | None = None) -> Callable[..., Any]:
    """module's forward, compiled (`backend`: BACKEND) with data-dependent shapes captured in the graph."""
    compiled = torch.compile(module, backend=backend or BACKEND)

    @functools.wraps(module.forward)
    def forward(*args: Any, **kwargs: Any) -> Any:
        # read while dynamo traces, i.e. inside the call; a context, so the process's own setting is left alone
        with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True):
            return compiled(*args, **kwargs)
    return forward
