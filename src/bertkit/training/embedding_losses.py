"""The losses that train sentence vectors, as pure functions of the vectors: no model, no data here.

Every loss compares vectors by their cosine similarity scaled by 1 / temperature (0.05 by default: the scale 20
of sentence-transformers' MultipleNegativesRankingLoss and CoSENTLoss, and SimCSE's temperature).

    loss      data                                   what it asks of the vectors
    infonce   (anchor, positive[, negative ...])     each anchor nearer its positive than every other candidate
                                                     of the batch: the other rows' positives and every hard
                                                     negative (in-batch negatives; MultipleNegativesRanking)
    cosent    (text, text, score)                    the pairs' cosines in the order of their scores (CoSENT)
    simcse    one sentence                           two dropout views of a sentence nearer each other than any
                                                     other sentence's view (unsupervised SimCSE: InfoNCE on views)

`LOSS_FOR_SHAPE` (bertkit.data.embedding_data) is the rule that picks a loss from the data's shape (`bertkit finetune
--task embedding`; `--loss` overrides it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from bertkit.data.embedding_data import LOSS_FOR_SHAPE, LOSSES  # noqa: F401  (the rule that picks a loss)
from bertkit.errors import InputError

TEMPERATURE = 0.05


def at_least_float32(x: Tensor) -> Tensor:
    """x in float32, or float64 where it is: losses of bf16 vectors are computed in float32."""
    return x if x.dtype == torch.float64 else x.float()


def cosine_matrix(a: Tensor, b: Tensor) -> Tensor:
    """(N, C), (M, C) -> (N, M): the cosine similarity of every row of `a` with every row of `b` (float32 at least)."""
    return F.normalize(at_least_float32(a), dim=-1) @ F.normalize(at_least_float32(b), dim=-1).T


def info_nce(anchors: Tensor, candidates: Tensor, temperature: float = TEMPERATURE,
             symmetric: bool = False) -> Tensor:
    """In-batch negatives: anchors (B, C) against candidates (K·B, C), whose first B rows are the anchors'
    positives (row i is anchor i's) and whose other rows are hard negatives; every candidate that is not an
    anchor's own positive is one of its negatives. The mean over anchors of

        -log softmax_j(cos(anchor_i, candidate_j) / temperature)[i]

    `symmetric` averages it with the same loss the other way, each positive against all anchors (the hard negatives
    are no queries there): sentence-transformers' MultipleNegativesSymmetricRankingLoss."""
    B = anchors.size(0)
    if candidates.size(0) < B or candidates.size(0) % B:
        raise InputError(f"candidates must be K x {B} rows (positives first), got {candidates.size(0)}")
    target = torch.arange(B, device=anchors.device)
    loss = F.cross_entropy(cosine_matrix(anchors, candidates) / temperature, target)
    if symmetric:
        backward = F.cross_entropy(cosine_matrix(candidates[:B], anchors) / temperature, target)
        loss = (loss + backward) / 2
    return loss


def cosent(first: Tensor, second: Tensor, scores: Tensor, temperature: float = TEMPERATURE) -> Tensor:
    """CoSENT (Su, 2022): the pairs (first_i, second_i), B of them, with gold similarity scores (B,). For every two
    pairs whose scores say i is more alike than j, the cosine of i should be above j's:

        log(1 + sum over (i, j) with score_i > score_j of exp((cos_j - cos_i) / temperature))

    Only the order of the scores counts, so any scale of scores (0-1, 0-5, labels 0/1) trains alike."""
    cos = (F.normalize(at_least_float32(first), dim=-1) * F.normalize(at_least_float32(second), dim=-1)).sum(-1)
    scores = scores.to(cos.device)
    differences = (cos[None, :] - cos[:, None]) / temperature                  # [i, j] = (cos_j - cos_i) / t
    ordered = scores[:, None] > scores[None, :]                                # pairs (i, j) with score_i > score_j
    terms = differences.masked_fill(~ordered, float("-inf")).flatten()
    return torch.logsumexp(torch.cat([terms.new_zeros(1), terms]), dim=0)     # log(1 + sum exp) = lse(0, terms)


def simcse(first_view: Tensor, second_view: Tensor, temperature: float = TEMPERATURE) -> Tensor:
    """Unsupervised SimCSE (Gao et al., 2021): two dropout views (B, C) of the same B sentences; each first view's
    positive is its own second view, the other sentences' second views its negatives (`info_nce`)."""
    return info_nce(first_view, second_view, temperature)


def embedding_loss(name: str, columns: Tensor, scores: Tensor | None, temperature: float = TEMPERATURE,
                   symmetric: bool = False) -> Tensor:
    """The loss `name` of one batch's vectors, columns (K, B, C): column 0 the anchors (or first texts, or first
    views), column 1 their positives (second texts, second views), further columns hard negatives; `scores` (B,)
    for cosent."""
    if name not in LOSSES:
        raise InputError(f"loss must be one of {', '.join(LOSSES)}, not {name!r}")
    K = columns.size(0)
    if name == "cosent":
        if scores is None or K != 2:
            raise InputError("the cosent loss needs scored pairs: (text, text, score) rows")
        return cosent(columns[0], columns[1], scores, temperature)
    if K < 2:
        raise InputError(f"{name} needs at least two columns of vectors, got {K}")
    if name == "simcse":
        return simcse(columns[0], columns[1], temperature)
    return info_nce(columns[0], columns[1:].flatten(0, 1), temperature, symmetric)
