"""A tiny sentence-embedding run for the torchrun test: the same global batches on 1 or 2 processes.

    python tests/_embedding_worker.py OUT --loss infonce [--cached-batch 3]
    python -m torch.distributed.run --nproc_per_node 2 tests/_embedding_worker.py OUT --loss infonce

Dropout is off and the model is fp32, so two processes that gather each other's vectors must take the steps one
process takes with the whole batch: the same losses, the same weights.
"""

from __future__ import annotations

import argparse
import faulthandler
import random
import signal
import sys

import torch

VOCAB = 40


def make_features(n: int, columns: int, scored: bool, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    features = []
    for _ in range(n):
        texts = [[2, *(rng.randrange(5, VOCAB) for _ in range(rng.randint(2, 12))), 3] for _ in range(columns)]
        features.append({"input_ids": texts[0], "texts": texts, "score": rng.random() if scored else None})
    return features


def build_model(loss: str, columns: int, cached_batch: int | None, seed: int = 0):
    from bertkit.models.bert.configuration import BertConfig
    from bertkit.models.bert.modeling import BertModel
    from bertkit.training.embedding_model import EmbeddingSettings, SentenceEmbeddingModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=32, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    settings = EmbeddingSettings(loss, columns=columns, cached_batch=cached_batch, symmetric=loss == "infonce")
    return SentenceEmbeddingModel(BertModel(config), settings)


COLUMNS = {"infonce": 3, "cosent": 2, "simcse": 1}


def main(argv: list[str] | None = None) -> int:
    from bertkit.training.embedding_model import EmbeddingCollator, count_items
    from bertkit.training.trainer import Trainer, TrainingArguments

    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--loss", default="infonce", choices=list(COLUMNS))
    parser.add_argument("--cached-batch", type=int)
    parser.add_argument("--steps", type=int, default=3)
    opts = parser.parse_args(argv)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a test that times out asks where each process waits
    torch.set_num_threads(1)
    columns = COLUMNS[opts.loss]
    model = build_model(opts.loss, columns, opts.cached_batch)
    # 9 rows a step: two processes take 5 and 4, so the gathering of uneven shares is exercised
    args = TrainingArguments(output_dir=opts.out, max_steps=opts.steps, batch_size=9, learning_rate=1e-3,
                             log_every=1, progress=False, seed=5, group_by_length=False, device="cpu")
    features = make_features(36, columns, scored=opts.loss == "cosent")
    Trainer(model, args, features, EmbeddingCollator(0), count_items=count_items).train()
    return 0


if __name__ == "__main__":
    sys.exit(main())
