"""Summarisation with UniLM: a pretrained BERT fine-tuned, every weight of it, to write a target after its source.

Each training pair is one sequence, `[CLS] source [SEP] target [SEP]`, segment 0 on the source and 1 on the
target, under UniLM's mask (`models.bert.unilm`); the loss is the next-token cross-entropy on the target's tokens
(and its closing [SEP]). Nothing is built from nothing: the encoder, the embeddings and (where the checkpoint has
one) the masked-LM head are pretrained, so a few thousand pairs teach it to write titles. Writing is beam search
(or greedy) with the source's keys and values computed once.

The run directory is a BERT masked-LM directory whose config.json names BertForUniLM, with the BERT's tokenizer,
generation_config.json (the decoding settings `bertkit summarize` uses), metrics.jsonl and report.json.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from bertkit.data.sources import resolve_model
from bertkit.errors import InputError
from bertkit.models.bert.unilm import TARGET, BertForUniLM
from bertkit.models.losses import IGNORE_INDEX
from bertkit.tokenizer import BertTokenizer, detokenize
from bertkit.training.budget import plan_for_budget, probe_batches, seconds_per_step
from bertkit.utils.devices import to_device

SOURCE_CHARACTERS_PER_TOKEN = 10  # more than any WordPiece token spans, its white space included
DEV_LOSS_PAIRS = 256              # held-out pairs the end-of-run loss is measured on


def encode_sources(tokenizer: BertTokenizer, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """[CLS] text [SEP], cut to max_length tokens; only the first SOURCE_CHARACTERS_PER_TOKEN x max_length
    characters are tokenized (a body runs to thousands, and the tokens past max_length would be cut anyway)."""
    keep = SOURCE_CHARACTERS_PER_TOKEN * max_length
    return tokenizer([text[:keep] for text in texts], truncation=True, max_length=max_length)["input_ids"]


def encode_pairs(tokenizer: BertTokenizer, pairs: Sequence[tuple[str, str]], max_source_length: int,
                 max_target_length: int) -> tuple[list[dict[str, list[int]]], int]:
    """Each (source, target) as one training sequence; targets longer than max_target_length tokens (their [SEP]
    included) are left out, and counted."""
    sources = encode_sources(tokenizer, [source for source, _ in pairs], max_source_length)
    targets = tokenizer([target for _, target in pairs], add_special_tokens=False)["input_ids"]
    examples = []
    for source, target in zip(sources, targets):
        target = target + [tokenizer.sep_token_id]
        if len(target) > max_target_length:
            continue
        examples.append({"input_ids": source + target, "token_type_ids": [0] * len(source) + [TARGET] * len(target),
                         "labels": [IGNORE_INDEX] * len(source) + target})
    return examples, len(pairs) - len(examples)


class UniLMCollator:
    """Sequences {input_ids, token_type_ids, labels} -> right-padded tensors and the padding mask (UniLM's own
    mask is built by the model from the segments and this)."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, items: list[dict[str, Any]], seeds: list[int] | None = None) -> dict[str, torch.Tensor]:
        if not items:
            raise ValueError("empty batch: no pairs to collate")
        T = max(len(item["input_ids"]) for item in items)
        batch = {name: torch.full((len(items), T), fill, dtype=torch.long)
                 for name, fill in (("input_ids", self.pad_token_id), ("token_type_ids", 0),
                                    ("labels", IGNORE_INDEX), ("attention_mask", 0))}
        for i, item in enumerate(items):
            n = len(item["input_ids"])
            for name in ("input_ids", "token_type_ids", "labels"):
                batch[name][i, :n] = torch.tensor(item[name])
            batch["attention_mask"][i, :n] = 1
        return batch


def dev_loss_fn(examples: list[dict[str, Any]], collator: UniLMCollator, batch_size: int):
    """eval_fn for the trainer: the mean next-token cross-entropy on held-out pairs' targets (no smoothing)."""
    def evaluate(model: BertForUniLM) -> dict[str, float]:
        device = next(model.parameters()).device
        smoothing, model.label_smoothing = model.label_smoothing, 0.0
        total, count = 0.0, 0
        try:
            for start in range(0, len(examples), batch_size):
                out = model(**to_device(collator(examples[start: start + batch_size]), device))
                total += float(out.loss_sums["lm"])
                count += out.logits.size(0)
        finally:
            model.label_smoothing = smoothing
        return {"loss": total / count, "perplexity": math.exp(min(total / count, 50.0))}

    return evaluate


def build_writer(model_dir: str | Path, label_smoothing: float) -> tuple[BertForUniLM, bool]:
    """A BertForUniLM from any BERT directory: its encoder, and its masked-LM head where it has one (a `pretrain`
    run's, a masked-LM checkpoint's); and whether the head is fresh. Where it has none (a sentence encoder's, m3e's),
    the head's vocabulary projection is the word embeddings all the same (tied), and its transform starts as a fresh
    head's does: started as the identity instead, scoring each token by its embedding's likeness to the hidden
    state, the writer learnt slower and wrote each character twice (docs/summarization.md)."""
    from bertkit.models.bert.configuration import BertConfig

    config = BertConfig.from_pretrained(model_dir)
    model = BertForUniLM(config)
    fresh = model.load_weights(model_dir)
    model.label_smoothing = label_smoothing
    return model, bool(fresh)


def special_ids(tokenizer: BertTokenizer) -> tuple[int, ...]:
    """The tokens a writer never writes: [CLS], [PAD], [MASK], [UNK] (its [SEP] ends a target)."""
    tokens = (tokenizer.cls_token, tokenizer.pad_token, tokenizer.mask_token, tokenizer.unk_token)
    vocab = tokenizer.get_vocab()
    return tuple(sorted({vocab[t] for t in tokens if t in vocab}))


@torch.no_grad()
def write(model: BertForUniLM, tokenizer: BertTokenizer, texts: Sequence[str], num_beams: int = 4,
          batch_size: int = 32, max_new_tokens: int | None = None, length_penalty: float = 1.0,
          max_source_length: int | None = None, no_repeat_ngram_size: int = 0,
          ) -> tuple[list[str], list[list[int]], int]:
    """A target for each text, batched by source length, on the device the model is on; returns the targets in
    input order, the source ids read and the id of [UNK]. Sources are cut to `max_source_length` tokens (default:
    half the model's positions), targets to `max_new_tokens` (default: the rest of the positions)."""
    model.eval()
    device = next(model.parameters()).device
    limit = model.config.max_position_embeddings
    sources = encode_sources(tokenizer, texts, min(max_source_length or limit // 2, limit - 1))
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out = [""] * len(sources)
    for start in range(0, len(order), batch_size):
        chunk = order[start: start + batch_size]
        S = max(len(sources[i]) for i in chunk)
        ids = torch.tensor([sources[i] + [tokenizer.pad_token_id] * (S - len(sources[i])) for i in chunk])
        keep = (ids != tokenizer.pad_token_id).long()
        generated = model.generate(to_device(ids, device), to_device(keep, device), num_beams=num_beams,
                                   max_new_tokens=min(max_new_tokens or limit, limit - S),
                                   length_penalty=length_penalty, eos_token_id=tokenizer.sep_token_id,
                                   pad_token_id=tokenizer.pad_token_id, suppress_tokens=special_ids(tokenizer),
                                   no_repeat_ngram_size=no_repeat_ngram_size)
        for i, row in zip(chunk, generated.tolist()):
            out[i] = detokenize(tokenizer.decode(row, skip_special_tokens=True), "zh")
    return out, sources, tokenizer.unk_token_id


def check_model(options, config) -> None:
    """Refuse lengths the model (its config) cannot take: source and target share one sequence."""
    positions = config.max_position_embeddings
    if options.max_source_length + options.max_target_length > positions:
        raise InputError(f"--max-source-length {options.max_source_length} + --max-target-length "
                         f"{options.max_target_length} is more than the model's {positions} positions: source and "
                         "target share one sequence")


def train_unilm(options, splits: dict[str, list[tuple[str, str]]], device: Any,
                started: float) -> tuple[BertForUniLM, BertTokenizer, dict]:
    """Fine-tune options.model as a UniLM writer on splits["train"] for options' steps or minutes (the clock
    started at `started`); returns the model (trained, on `device`), its tokenizer and what the report says of the
    training."""
    from bertkit.training.trainer import Trainer

    model_dir = resolve_model(options.model)
    tokenizer = BertTokenizer.from_pretrained(model_dir)
    model, fresh_head = build_writer(model_dir, options.label_smoothing)
    check_model(options, model.config)
    train, dropped = encode_pairs(tokenizer, splits["train"], options.max_source_length, options.max_target_length)
    if len(train) < 1:
        raise InputError(f"no training pair has a target within --max-target-length {options.max_target_length}")
    dev = encode_pairs(tokenizer, splits["dev"][:DEV_LOSS_PAIRS], options.max_source_length,
                       options.max_target_length)[0]
    collator = UniLMCollator(tokenizer.pad_token_id)
    B = min(options.batch_size, len(train))
    model.to(device)
    lengths = [len(example["input_ids"]) for example in train]
    probes = [collator([train[i] for i in batch]) for batch in probe_batches(len(train), B, lengths)]
    max_steps = options.max_steps or plan_for_budget(seconds_per_step(model, probes, options.bf16, device=device),
                                                     minutes=options.minutes, device=device,
                                                     spent=time.perf_counter() - started)
    spent = time.perf_counter() - started
    args = options.training_arguments(max_steps, spent=spent, batch_size=B, learning_rate=options.lr,
                                      weight_decay=0.01, save_total_limit=1, group_by_length=True, eval_every=None)
    trainer = Trainer(model, args, train, collator, eval_fn=dev_loss_fn(dev, collator, B) if dev else None,
                      count_items=model.count_loss_items, tokenizer=tokenizer)
    state = trainer.train()
    final = state.log_history[-1] if state.log_history else {}
    return model, tokenizer, {
        "steps": state.step, "stop_reason": state.stop_reason, "epochs": state.step * B / len(train),
        "train_seconds": state.seconds, "prepare_seconds": spent, "train_pairs": len(train),
        "train_targets_too_long": dropped, "dev_loss": final.get("eval_loss"),
        "fresh_head": fresh_head}
