"""`Dropout`: torch's `nn.Dropout` interface over `bertkit.models.functional.dropout` (a faster mask on CPU).

It holds no parameters, so swapping it for `nn.Dropout` changes no checkpoint or parameter name.
"""

from __future__ import annotations

from torch import Tensor, nn

from bertkit.models.functional import check_dropout_probability, dropout


class Dropout(nn.Module):
    """Zero each element with probability p while training (the others scaled by 1/(1-p)); identity in eval."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = check_dropout_probability(p)

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
