"""The pointer-generator: a frozen pretrained BERT encodes the source once, and a Transformer decoder trained from
nothing writes the target, copying source tokens through the pointer-generator's mixture
(`models.seq2seq.bert_encoder`).

The encoder's states of every training source are computed once, before training, so a step trains the decoder
alone and many epochs fit in minutes on a CPU. The decoder writes in a vocabulary of the tokens the training
targets use (a few thousand, against BERT's 21,128: the output layer is a large share of a step), its embeddings
starting from the encoder's.

A trained directory holds config.json + model.safetensors (a `bertkit-bert-seq2seq` model), `source_tokenizer/`
(the encoder's) and `target_tokenizer/`.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from bertkit.data.sources import resolve_model
from bertkit.errors import InputError
from bertkit.models.losses import IGNORE_INDEX
from bertkit.models.seq2seq.bert_encoder import BertSeq2Seq, BertSeq2SeqConfig
from bertkit.pipelines.options import SummarizationOptions
from bertkit.pipelines.summarization.unilm import encode_sources
from bertkit.tokenizer import BertTokenizer, detokenize
from bertkit.training.budget import plan_for_budget, probe_batches, seconds_per_step
from bertkit.utils.devices import to_device

DEV_LOSS_ARTICLES = 256                  # dev articles the end-of-run loss is measured on
ENCODE_BATCH = 32


# ---- tokenizers ---------------------------------------------------------------------------------

class SummaryTokenizer:
    """The encoder's tokenizer for bodies ([CLS] body [SEP]); a smaller one for titles (ending with [SEP]), whose
    vocabulary is the tokens of the training titles, split by the same rules."""

    def __init__(self, source: BertTokenizer, target: BertTokenizer) -> None:
        if source.pad_token_id != target.pad_token_id:
            raise InputError(f"source and target vocabularies put [PAD] at different ids ({source.pad_token_id}, "
                             f"{target.pad_token_id}); one model config needs one pad id")
        self.source, self.target = source, target

    @classmethod
    def from_titles(cls, source: BertTokenizer, titles: Sequence[str]) -> SummaryTokenizer:
        """The target vocabulary: the source's special tokens ([PAD] first, at its id 0), then every token the
        source tokenizer splits `titles` into, commonest first."""
        if source.pad_token_id != 0:
            raise InputError(f"the encoder's vocabulary puts [PAD] at id {source.pad_token_id}, not 0")
        specials = [source.pad_token, source.unk_token, source.cls_token, source.sep_token, source.mask_token]
        counts = Counter(token for title in titles for token in source.tokenize(title))
        tokens = [t for t in dict.fromkeys(specials) if t] + [t for t, _ in counts.most_common() if t not in specials]
        target = BertTokenizer({token: i for i, token in enumerate(tokens)}, do_lower_case=source.do_lower_case,
                               strip_accents=source.strip_accents, tokenize_chinese_chars=source.tokenize_chinese_chars)
        return cls(source, target)

    def encode_source(self, texts: Sequence[str], max_length: int) -> list[list[int]]:
        """[CLS] text [SEP], cut to max_length tokens, as UniLM reads a source (`unilm.encode_sources`)."""
        return encode_sources(self.source, texts, max_length)

    def encode_target(self, texts: Sequence[str]) -> list[list[int]]:
        """Title ids with eos; the decoder's start token (bos) is added by the model when it shifts them."""
        rows = self.target(list(texts), add_special_tokens=False)["input_ids"]
        return [row + [self.target.sep_token_id] for row in rows]

    def source_to_target(self) -> torch.Tensor:
        """Each source id's target id: the same token's, else the target's [UNK]."""
        mapping = torch.full((len(self.source),), self.target.unk_token_id, dtype=torch.long)
        target = self.target.get_vocab()
        for token, index in self.source.get_vocab().items():
            if token in target:
                mapping[index] = target[token]
        return mapping

    def decode(self, ids: Sequence[int]) -> str:
        return detokenize(self.target.decode(list(ids), skip_special_tokens=True), "zh")

    def save_pretrained(self, path: str | Path) -> None:
        self.source.save_pretrained(Path(path) / "source_tokenizer")
        self.target.save_pretrained(Path(path) / "target_tokenizer")

    @classmethod
    def from_pretrained(cls, path: str | Path) -> SummaryTokenizer:
        path = Path(path)
        if not (path / "target_tokenizer").is_dir():
            raise FileNotFoundError(f"{path} has no target_tokenizer/: not a bertkit summarisation model")
        return cls(BertTokenizer.from_pretrained(path / "source_tokenizer"),
                   BertTokenizer.from_pretrained(path / "target_tokenizer"))


# ---- the frozen encoder's states, batches -------------------------------------------------------

@torch.no_grad()
def encoder_states(model: BertSeq2Seq, sources: Sequence[list[int]], batch_size: int = ENCODE_BATCH,
                   ) -> list[torch.Tensor]:
    """The encoder's last hidden states (S_i, C) of each source, in float16 (half the memory; the decoder reads
    them in float32), computed in batches of like length on the device the model is on, kept on the CPU."""
    model.eval()
    device = next(model.parameters()).device
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    states: list[torch.Tensor] = [torch.empty(0)] * len(sources)
    collate = SummaryCollator(model.config.pad_token_id)
    for start in range(0, len(order), batch_size):
        chunk = order[start: start + batch_size]
        batch = to_device(collate([{"input_ids": sources[i], "labels": [0]} for i in chunk]), device)
        hidden = model.encoder(batch["input_ids"], batch["attention_mask"]).last_hidden_state
        if hidden.device.type != "cpu":  # one copy of the batch to the CPU, in float16 (as each row is kept)
            hidden = hidden.to(torch.float16).cpu()
        for row, i in enumerate(chunk):  # each row a tensor of its own, without the batch's padding
            states[i] = hidden[row, : len(sources[i])].to(torch.float16, copy=True)
    return states


class SummaryCollator:
    """Articles {input_ids, labels[, encoder_hidden_states]} -> padded tensors (labels -100 on padding)."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, items: list[dict[str, Any]], seeds: list[int] | None = None) -> dict[str, torch.Tensor]:
        if not items:
            raise ValueError("empty batch: no articles to collate")
        S, T = max(len(x["input_ids"]) for x in items), max(len(x["labels"]) for x in items)
        input_ids = torch.full((len(items), S), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(items), T), IGNORE_INDEX, dtype=torch.long)
        for i, item in enumerate(items):
            input_ids[i, : len(item["input_ids"])] = torch.tensor(item["input_ids"])
            labels[i, : len(item["labels"])] = torch.tensor(item["labels"])
        batch = {"input_ids": input_ids, "attention_mask": (input_ids != self.pad_token_id).long(), "labels": labels}
        if "encoder_hidden_states" in items[0]:
            states = torch.zeros(len(items), S, items[0]["encoder_hidden_states"].size(-1))
            for i, item in enumerate(items):
                states[i, : len(item["input_ids"])] = item["encoder_hidden_states"].float()
            batch["encoder_hidden_states"] = states
        return batch


def dev_loss_fn(examples: list[dict[str, Any]], collator: SummaryCollator, batch_size: int):
    """eval_fn for the trainer: mean token cross-entropy (no label smoothing) on the dev articles, on the device the
    model is on."""
    def evaluate(model) -> dict[str, float]:
        device = next(model.parameters()).device
        total, count = 0.0, 0
        for start in range(0, len(examples), batch_size):
            inputs = to_device(collator(examples[start: start + batch_size]), device)
            logits = model(**{k: v for k, v in inputs.items() if k != "labels"}, labels=inputs["labels"]).logits
            keep = inputs["labels"] != IGNORE_INDEX
            total += torch.nn.functional.cross_entropy(logits[keep].float(), inputs["labels"][keep],
                                                       reduction="sum").item()
            count += int(keep.sum())
        return {"loss": total / count, "perplexity": math.exp(min(total / count, 50.0))}

    return evaluate


# ---- model, writing -----------------------------------------------------------------------------

def check_encoder(options: SummarizationOptions, config) -> None:
    """Refuse options the encoder (its BertConfig) cannot take."""
    if options.max_source_length > config.max_position_embeddings:
        raise InputError(f"--max-source-length {options.max_source_length} is more than the encoder's "
                         f"{config.max_position_embeddings} positions")
    if config.hidden_size % options.decoder_heads:
        raise InputError(f"--decoder-heads {options.decoder_heads} does not divide the encoder's hidden size "
                         f"{config.hidden_size}")


def build_model(options: SummarizationOptions, tokenizer: SummaryTokenizer, encoder) -> BertSeq2Seq:
    """The encoder-decoder around a loaded BertModel: its config, its weights, target embeddings from its own."""
    check_encoder(options, encoder.config)
    enc, target = encoder.config, tokenizer.target
    config = BertSeq2SeqConfig(
        encoder=enc.to_dict(), vocab_size=enc.vocab_size, decoder_vocab_size=len(target), d_model=enc.hidden_size,
        encoder_layers=enc.num_hidden_layers, decoder_layers=options.decoder_layers,
        attention_heads=options.decoder_heads, ffn_dim=options.decoder_ffn, dropout=options.dropout,
        label_smoothing=options.label_smoothing, normalize_before=True, copy_attention=options.copy,
        max_position_embeddings=options.max_target_length + 1, pad_token_id=target.pad_token_id,
        bos_token_id=target.cls_token_id, eos_token_id=target.sep_token_id, unk_token_id=target.unk_token_id)
    torch.manual_seed(options.seed)
    model = BertSeq2Seq(config)
    model.warm_start(encoder, tokenizer.source_to_target())
    return model


@torch.no_grad()
def write(model: BertSeq2Seq, tokenizer: SummaryTokenizer, texts: Sequence[str], num_beams: int = 4,
          batch_size: int = 32, max_new_tokens: int | None = None, length_penalty: float = 1.0,
          max_source_length: int | None = None, no_repeat_ngram_size: int = 0,
          ) -> tuple[list[str], list[list[int]], int]:
    """A title for each text, batched by length (little padding), on the device the model is on; returns the
    titles in input order, the source ids read and the id of [UNK] (what an empty title is explained by)."""
    model.eval()
    device = next(model.parameters()).device
    limit = model.encoder.config.max_position_embeddings
    sources = tokenizer.encode_source(texts, min(max_source_length or limit, limit))
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[str] = [""] * len(sources)
    collate = SummaryCollator(tokenizer.source.pad_token_id)
    for start in range(0, len(order), batch_size):
        chunk = order[start: start + batch_size]
        batch = to_device(collate([{"input_ids": sources[i], "labels": [0]} for i in chunk]), device)
        generated = model.generate(batch["input_ids"], batch["attention_mask"], num_beams=num_beams,
                                   max_new_tokens=max_new_tokens, length_penalty=length_penalty,
                                   no_repeat_ngram_size=no_repeat_ngram_size)
        for i, ids in zip(chunk, generated.tolist()):
            out[i] = tokenizer.decode(ids)
    return out, sources, tokenizer.source.unk_token_id


# ---- training -----------------------------------------------------------------------------------

def _examples(tokenizer: SummaryTokenizer, articles: Sequence[tuple[str, str]],
              options: SummarizationOptions) -> tuple[list[dict[str, Any]], int]:
    """Each article's body ids and title ids; titles longer than max_target_length are left out (and counted)."""
    sources = tokenizer.encode_source([body for body, _ in articles], options.max_source_length)
    targets = tokenizer.encode_target([title for _, title in articles])
    kept = [{"input_ids": s, "labels": t} for s, t in zip(sources, targets) if len(t) <= options.max_target_length]
    return kept, len(articles) - len(kept)


def _with_states(model: BertSeq2Seq, examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    states = encoder_states(model, [x["input_ids"] for x in examples])
    return [{**x, "encoder_hidden_states": h} for x, h in zip(examples, states)]


def train_pointer_generator(options: SummarizationOptions, splits: dict[str, list[tuple[str, str]]], device: Any,
                             started: float) -> tuple[BertSeq2Seq, SummaryTokenizer, dict[str, Any]]:
    """Tokenizers -> the frozen encoder's states -> decoder training; returns the model (on `device`), its
    tokenizer and what the report says of the training."""
    from bertkit.models.bert.modeling import BertModel
    from bertkit.training.trainer import Trainer

    model_dir = resolve_model(options.model)
    encoder = BertModel.from_pretrained(model_dir)
    check_encoder(options, encoder.config)
    tokenizer = SummaryTokenizer.from_titles(BertTokenizer.from_pretrained(model_dir),
                                             [title for _, title in splits["train"]])
    model = build_model(options, tokenizer, encoder)
    for parameter in model.encoder.parameters():  # frozen: its states are computed once, below
        parameter.requires_grad_(False)
    train, dropped = _examples(tokenizer, splits["train"], options)
    if len(train) < options.batch_size:
        raise InputError(f"{len(train)} training articles have titles within --max-target-length "
                         f"{options.max_target_length}: fewer than one batch of {options.batch_size}")
    dev = _examples(tokenizer, splits["dev"][:DEV_LOSS_ARTICLES], options)[0]
    model.to(device)  # the encoder's states are computed where the run trains (the Trainer keeps the model there)
    train, dev = _with_states(model, train), _with_states(model, dev)
    encode_seconds = time.perf_counter() - started
    collator = SummaryCollator(tokenizer.source.pad_token_id)

    # batches of like body lengths, short to long (probe_batches); the clock counts the states computed above:
    # `--minutes` is the whole training, encoder pass included
    B = options.batch_size
    lengths = [len(example["input_ids"]) for example in train]
    probes = [collator([train[i] for i in batch]) for batch in probe_batches(len(train), B, lengths)]
    max_steps = options.max_steps or plan_for_budget(seconds_per_step(model, probes, options.bf16, device=device),
                                                     minutes=options.minutes, device=device, spent=encode_seconds)
    args = options.training_arguments(max_steps, spent=encode_seconds, learning_rate=options.lr, weight_decay=0.01,
                                      save_total_limit=1, group_by_length=True, eval_every=None)  # dev loss at the end
    trainer = Trainer(model, args, train, collator, eval_fn=dev_loss_fn(dev, collator, B), tokenizer=tokenizer)
    state = trainer.train()
    final = state.log_history[-1] if state.log_history else {}
    return model, tokenizer, {
        "copy": options.copy, "steps": state.step, "stop_reason": state.stop_reason,
        "epochs": state.step * B / len(train), "train_seconds": state.seconds, "encode_seconds": encode_seconds,
        "train_pairs": len(train), "train_targets_too_long": dropped, "dev_loss": final.get("eval_loss"),
        "vocab_sizes": {"source": len(tokenizer.source), "target": len(tokenizer.target)}}


