"""Conventions more than one layer writes down: here once, so that a layer need not import another for them."""

from __future__ import annotations

# The label of a position that is not predicted (transformers' and cross_entropy's convention): data/ writes it
# into the batches it makes, models/ skip it in their losses.
IGNORE_INDEX = -100
