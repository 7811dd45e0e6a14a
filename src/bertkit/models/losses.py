"""Labels and losses the model families share: the ignored label, teacher forcing, the token losses."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from bertkit.errors import InputError
from bertkit.utils.constants import IGNORE_INDEX  # noqa: F401  (re-exported: the models' label convention)


def shift_tokens_right(labels: Tensor, pad_token_id: int, start_token_id: int) -> Tensor:
    """Teacher forcing: the decoder reads [start] + labels[:-1] and predicts labels (-100 read as padding)."""
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = start_token_id
    return shifted.masked_fill(shifted == IGNORE_INDEX, pad_token_id)


def sequence_loss(logits: Tensor, labels: Tensor, label_smoothing: float = 0.0, check: bool = True) -> Tensor:
    """Mean cross-entropy over the labelled positions; with smoothing ε the target is (1-ε)·one-hot + ε/V.

    `check` reads the labels back to refuse a batch with nothing to predict (the mean would be nan): a
    device sync, so models pass their validation switch.
    """
    if check and not bool((labels != IGNORE_INDEX).any()):
        raise InputError("every label is -100: nothing to predict in this batch")
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1),
                           ignore_index=IGNORE_INDEX, label_smoothing=label_smoothing)


def mean_or_zero(total: Tensor, count: int) -> Tensor:
    """total / count; an empty selection (whose total is 0) contributes 0, not nan. No branch on count, which
    under torch.compile may be a symbol standing for a size the data decides (`training.compiling`)."""
    return total / max(count, 1)
