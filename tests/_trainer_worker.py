"""A tiny model, data set and collator for the trainer tests, and the script the subprocess tests run.

    python tests/_trainer_worker.py run OUT --max-steps 10 --save-every 3 [--kill-at-step 8] [--resume]
    python -m torch.distributed.run --nproc_per_node 2 tests/_trainer_worker.py ddp OUT --accumulation 2

The model has two loss terms with uneven item counts: a token term over a seed-chosen, variable
number of labelled positions per example ("mlm"), and a per-example term ("cls"). Its output
exposes `loss_sums`, so the trainer can weight micro-batches exactly.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

VOCAB, MASK_ID, PAD_ID = 23, 1, 0


@dataclass
class TinyOutput:
    loss: torch.Tensor
    loss_sums: dict[str, torch.Tensor] | None = None


class TinyModel(nn.Module):
    """Embedding → LayerNorm → dropout → tanh(Linear) with a token head and a pooled 2-class head."""

    def __init__(self, hidden: int = 16, dropout: float = 0.0, expose_sums: bool = True,
                 nan_at_forward: int | None = None) -> None:
        super().__init__()
        self.config = {"hidden": hidden, "dropout": dropout, "expose_sums": expose_sums,
                       "nan_at_forward": nan_at_forward}
        self.embed = nn.Embedding(VOCAB, hidden)
        self.LayerNorm = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(hidden, hidden)
        self.token_head = nn.Linear(hidden, VOCAB)
        self.cls_head = nn.Linear(hidden, 2)
        self.forward_calls = 0

    def forward(self, input_ids, attention_mask, labels, cls_label) -> TinyOutput:
        self.forward_calls += self.training
        h = torch.tanh(self.dense(self.dropout(self.LayerNorm(self.embed(input_ids)))))
        mlm_sum = F.cross_entropy(self.token_head(h).flatten(0, 1), labels.flatten(), reduction="sum")
        mask = attention_mask.unsqueeze(-1).float()
        pooled = (h * mask).sum(1) / mask.sum(1)
        cls_sum = F.cross_entropy(self.cls_head(pooled), cls_label, reduction="sum")
        loss = mlm_sum / (labels != -100).sum().clamp(min=1) + cls_sum / len(cls_label)
        if self.config["nan_at_forward"] is not None and self.forward_calls >= self.config["nan_at_forward"]:
            loss, mlm_sum = loss * float("nan"), mlm_sum * float("nan")
        sums = {"mlm": mlm_sum, "cls": cls_sum} if self.config["expose_sums"] else None
        return TinyOutput(loss=loss, loss_sums=sums)

    def save_pretrained(self, directory) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        (Path(directory) / "config.json").write_text(json.dumps(self.config))
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(Path(directory) / "model.safetensors"))

    @classmethod
    def from_pretrained(cls, directory) -> TinyModel:
        model = cls(**json.loads((Path(directory) / "config.json").read_text()))
        model.load_state_dict(load_file(str(Path(directory) / "model.safetensors")))
        return model


class TinyTokenizer:
    def save_pretrained(self, directory) -> None:
        (Path(directory) / "vocab.txt").write_text("\n".join(f"t{i}" for i in range(VOCAB)) + "\n")


def make_dataset(n: int = 48, seed: int = 0) -> list[dict]:
    """Examples of 3..9 tokens (ids 2..VOCAB-1) and a label: does the sequence hold more even than odd ids?"""
    rng = random.Random(seed)
    data = []
    for _ in range(n):
        tokens = [rng.randrange(2, VOCAB) for _ in range(rng.randint(3, 9))]
        data.append({"tokens": tokens, "label": int(sum(t % 2 == 0 for t in tokens) * 2 > len(tokens))})
    return data


def collate(examples: list[dict], seeds: list[int]) -> dict[str, torch.Tensor]:
    """Pad, and label a seed-chosen number (1..len) of positions per example, replaced by MASK_ID."""
    width = max(len(e["tokens"]) for e in examples)
    input_ids = torch.full((len(examples), width), PAD_ID)
    labels = torch.full((len(examples), width), -100)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (example, seed) in enumerate(zip(examples, seeds)):
        rng = random.Random(seed)
        tokens = example["tokens"]
        input_ids[row, :len(tokens)] = torch.tensor(tokens)
        attention_mask[row, :len(tokens)] = 1
        for pos in rng.sample(range(len(tokens)), rng.randint(1, len(tokens))):
            labels[row, pos] = tokens[pos]
            input_ids[row, pos] = MASK_ID
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels,
            "cls_label": torch.tensor([e["label"] for e in examples])}


def count_items(batch: dict[str, torch.Tensor]) -> dict[str, int]:
    return {"mlm": int((batch["labels"] != -100).sum()), "cls": len(batch["cls_label"])}


def build_model(seed: int = 0, **kwargs) -> TinyModel:
    torch.manual_seed(seed)
    return TinyModel(**kwargs)


def main(argv: list[str] | None = None) -> int:
    from bertkit.training.trainer import Trainer, TrainingArguments

    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["run", "ddp"])
    parser.add_argument("out")
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--save-every", type=int, default=None)
    parser.add_argument("--kill-at-step", type=int, default=None)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--accumulation", type=int, default=1)
    opts = parser.parse_args(argv)
    torch.set_num_threads(1)

    kill_at, calls = opts.kill_at_step, [0]

    def collate_or_die(examples, seeds):
        calls[0] += 1  # one collation per step here (one process, no accumulation)
        if kill_at is not None and calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return collate(examples, seeds)

    if opts.mode == "run":  # dropout on, so the RNG state must be restored for an exact resume
        model = build_model(dropout=0.1)
        args = TrainingArguments(output_dir=opts.out, max_steps=opts.max_steps, batch_size=8, learning_rate=3e-3,
                                 warmup_steps=2, save_every=opts.save_every, log_every=1, progress=False, seed=7,
                                 device="cpu")
        trainer = Trainer(model, args, make_dataset(40), collate_or_die, count_items=count_items,
                          tokenizer=TinyTokenizer())
    else:  # a test that times out sends SIGUSR1 to learn where each process waits
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        model = build_model(dropout=0.0)
        args = TrainingArguments(output_dir=opts.out, max_steps=opts.max_steps, batch_size=12,
                                 gradient_accumulation_steps=opts.accumulation, learning_rate=1e-2,
                                 log_every=1, progress=False, seed=3, device="cpu")  # gloo, beside a GPU too
        trainer = Trainer(model, args, make_dataset(30), collate, count_items=count_items)
    trainer.train(resume=opts.resume)
    return 0


if __name__ == "__main__":
    sys.exit(main())
