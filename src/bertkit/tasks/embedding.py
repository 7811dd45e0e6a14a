"""`--task embedding`: sentence vectors. Texts -> one vector each (the encoder's tokens pooled), trained so that
texts that mean the same are near: InfoNCE with in-batch negatives on (anchor, positive) pairs, CoSENT on scored
pairs, SimCSE on plain text (docs/embeddings.md).

No head of its own and no labels: its data, their shapes and named sets are bertkit.data.embedding_data's, its run
is bertkit.pipelines.embedding, and the model it keeps is a sentence-transformers directory that `bertkit encode`,
`bertkit serve` (/embed) and bertkit.SentenceEncoder read as they read any encoder.
"""

from __future__ import annotations

from typing import Any

from bertkit.data.task_kinds import TaskKind, register


class Embedding(TaskKind):
    """Sentence vectors: trained here, encoded by any command that encodes."""

    def train(self, options: Any) -> dict[str, Any]:
        from bertkit.pipelines.embedding import finetune_embedding

        return finetune_embedding(options)

    def kept(self, results: dict[str, Any]) -> str:
        return (f"{results['loss']} loss on {results['shape']}; best model ({results['pooling']} pooling"
                f"{', normalized' if results['normalize'] else ''}, sentence-transformers' files) in "
                f"{results['best_model']}")


VECTORS = register(Embedding("embedding", "embedding", "mrr@10 or spearman, by the data", files="TSV or JSONL"))
