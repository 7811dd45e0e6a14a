"""Conventions more than one layer writes down: here once, so that a layer need not import another for them."""

from __future__ import annotations

# The label of a position that is not predicted (transformers' and cross_entropy's convention): data/ writes it
# into the batches it makes, models/ skip it in their losses.
IGNORE_INDEX = -100

# The pretraining tasks: masked LM, and next-sentence (BERT) or sentence-order (ALBERT) prediction. data/ packs and
# masks instances for an objective (`bertkit pretrain --objective`), models/ name their loss terms by the task.
MLM, NSP, SOP = "mlm", "nsp", "sop"
MLM_NSP, MLM_SOP = f"{MLM}+{NSP}", f"{MLM}+{SOP}"
OBJECTIVES = (MLM_NSP, MLM_SOP, MLM)

# How far inference lets a batch of short texts grow past its batch size on a GPU, in padded tokens (rows x longest
# row): text-embeddings-inference's default --max-batch-tokens. inference/ batches by it, cli/ says it in --help.
GPU_BATCH_TOKENS = 16_384
