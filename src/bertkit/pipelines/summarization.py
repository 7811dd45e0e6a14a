"""Summarisation, end to end: inews bodies -> titles with a pretrained BERT encoder and a Transformer decoder,
scored by character ROUGE beside the LEAD baseline.

The encoder (m3e-small by default; its vocabulary has one token per Chinese character) is frozen: its states of
every training body are computed once, before training, so a step trains the decoder alone and many epochs fit
in minutes on a CPU. The decoder writes titles in a vocabulary of the tokens the training titles use (a few
thousand, against BERT's 21,128: the output layer is a large share of a step), its embeddings starting from the
encoder's, and copies body tokens through the pointer-generator's mixture (`models.seq2seq.bert_encoder`).

LEAD, the first N characters of the body, is the baseline a summariser must beat (news puts its gist first);
N is chosen by ROUGE-L on the dev split, and both are scored on the same test articles (`training.rouge`).

A trained directory holds config.json + model.safetensors, `source_tokenizer/` (the encoder's), `target_tokenizer/`,
generation_config.json (beams, length penalty and title length `bertkit summarize` uses), the trainer's
metrics.jsonl and report.json.
"""

from __future__ import annotations

import json
import math
import time
import warnings
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
from bertkit.pipelines.run_directory import holds_out
from bertkit.tokenizer import BertTokenizer, detokenize
from bertkit.training.budget import plan_for_budget, probe_batches, seconds_per_step
from bertkit.training.rouge import characters, corpus_rouge
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_write_text
from bertkit.utils.devices import to_device

REPORT_NAME = "report.json"
OPTIONS_NAME = "summarization_options.json"
GENERATION_NAME = "generation_config.json"
LEAD_LENGTHS = tuple(range(4, 65, 4))   # the N tried for LEAD on dev
DEV_LOSS_ARTICLES = 256                  # dev articles the end-of-run loss is measured on
ENCODE_BATCH = 32
SOURCE_CHARACTERS_PER_TOKEN = 10        # more than any WordPiece token spans, its white space included


# ---- LEAD ---------------------------------------------------------------------------------------

def lead(body: str, length: int) -> str:
    """The LEAD summary: the body's first `length` characters, white space not counted (as ROUGE counts)."""
    return "".join(characters(body)[:length])


def choose_lead_length(articles: Sequence[tuple[str, str]], lengths: Sequence[int] = LEAD_LENGTHS,
                       ) -> tuple[int, list[dict[str, float]]]:
    """The N whose LEAD scores the best ROUGE-L on `articles` (body, title), and each N's scores."""
    if not articles:
        raise InputError("no articles to choose the LEAD length on")
    titles = [title for _, title in articles]
    sweep = [{"length": n, **corpus_rouge([lead(body, n) for body, _ in articles], titles)} for n in lengths]
    return max(sweep, key=lambda row: row["rougeL"])["length"], sweep   # ties go to the shorter


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
        """[CLS] text [SEP], cut to max_length tokens. Only the text's first SOURCE_CHARACTERS_PER_TOKEN x max_length
        characters are tokenized: a body runs to thousands, and the tokens past max_length would be cut anyway."""
        keep = SOURCE_CHARACTERS_PER_TOKEN * max_length
        return self.source([text[:keep] for text in texts], truncation=True, max_length=max_length)["input_ids"]

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


# ---- model, decoding ----------------------------------------------------------------------------

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


def summarize(model, tokenizer, texts: Sequence[str], num_beams: int = 4, batch_size: int = 32,
              max_new_tokens: int | None = None, length_penalty: float = 1.0, max_source_length: int | None = None,
              no_repeat_ngram_size: int = 0) -> list[str]:
    """A title for each text, by either kind of summariser (a UniLM writer or the pointer-generator), on the
    device the model is on; results in input order; a warning names the texts whose title came out empty."""
    from bertkit.models.bert.unilm import BertForUniLM

    if isinstance(model, BertForUniLM):
        from bertkit.pipelines.unilm import encode_sources, write

        out = write(model, tokenizer, texts, num_beams, batch_size, max_new_tokens or 48, length_penalty,
                    max_source_length or model.config.max_position_embeddings // 2, no_repeat_ngram_size)
        sources = encode_sources(tokenizer, texts, max_source_length or model.config.max_position_embeddings // 2)
        _warn_empty(out, sources, tokenizer.unk_token_id)
        return out
    return _pointer_generator_summaries(model, tokenizer, texts, num_beams, batch_size, max_new_tokens,
                                        length_penalty, max_source_length, no_repeat_ngram_size)


@torch.no_grad()
def _pointer_generator_summaries(model: BertSeq2Seq, tokenizer: SummaryTokenizer, texts: Sequence[str],
                                 num_beams: int, batch_size: int, max_new_tokens: int | None, length_penalty: float,
                                 max_source_length: int | None, no_repeat_ngram_size: int) -> list[str]:
    """The pointer-generator's titles, batched by length (little padding)."""
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
    _warn_empty(out, sources, tokenizer.source.unk_token_id)
    return out


class EmptySummaryWarning(UserWarning):
    """A text got an empty title: said with where and why, not left as a blank line."""


def _warn_empty(titles: Sequence[str], sources: Sequence[Sequence[int]], unknown: int) -> None:
    """One warning naming the texts whose title came out empty, and how much of each the model could not read
    ([UNK]: emoji, a script its vocabulary lacks), the usual reason."""
    empty = [i for i, title in enumerate(titles) if not title.strip()]
    if not empty:
        return
    first = empty[0]
    words = list(sources[first][1:-1]) or list(sources[first])  # its tokens, less [CLS] and [SEP]
    unread = sum(t == unknown for t in words)
    why = (f"{unread} of its {len(words)} tokens are [UNK], characters not in the model's vocabulary (emoji, a "
           "script it was not trained on)" if unread else "the model wrote no token it could turn into text")
    warnings.warn(f"{len(empty)} of {len(titles)} texts got an empty title (the first is text {first + 1}): {why}",
                  EmptySummaryWarning, stacklevel=3)


def decoding_settings(options: SummarizationOptions) -> dict[str, Any]:
    """How a run's test titles are written, and what generation_config.json keeps for `bertkit summarize`."""
    return {"num_beams": options.num_beams, "length_penalty": options.length_penalty,
            "max_source_length": options.max_source_length, "max_new_tokens": options.max_target_length,
            "no_repeat_ngram_size": options.no_repeat_ngram_size}


def save_generation_config(path: str | Path, options: SummarizationOptions) -> None:
    atomic_write_text(Path(path) / GENERATION_NAME, jsonfiles.dumps(
        {"architecture": options.architecture, **decoding_settings(options)}, indent=2) + "\n")


def load_generation_config(path: str | Path) -> dict[str, Any]:
    """The decoding settings saved with a trained model (defaults where none were saved)."""
    file = Path(path) / GENERATION_NAME
    saved = json.loads(file.read_text()) if file.is_file() else {}
    return {"num_beams": saved.get("num_beams", 4), "length_penalty": saved.get("length_penalty", 1.0),
            "max_source_length": saved.get("max_source_length"), "max_new_tokens": saved.get("max_new_tokens"),
            "no_repeat_ngram_size": saved.get("no_repeat_ngram_size", 0)}


def load_summarizer(path: str | Path):
    """A trained summarisation directory -> (model, tokenizer): a UniLM writer (a BERT directory whose config
    names BertForUniLM) or a pointer-generator (`bertkit-bert-seq2seq`)."""
    from bertkit.models.configuration import ConfigError
    from bertkit.models.registry import family_of

    family = family_of(path)
    if family.name == "BERT":
        if not family.holds_head(path, "seq2seq"):
            raise ConfigError(f"{path} holds a BERT that has not learnt to write (its config.json names no "
                              "BertForUniLM); train one with `bertkit summarize-train --model` it")
        return family.head("seq2seq").from_pretrained(path), BertTokenizer.from_pretrained(path)
    return BertSeq2Seq.from_pretrained(path), SummaryTokenizer.from_pretrained(path)


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


def _train_pointer_generator(options: SummarizationOptions, splits: dict[str, list[tuple[str, str]]], device: Any,
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


def load_splits(options: SummarizationOptions) -> dict[str, list[tuple[str, str]]]:
    """inews' splits, or the user's pairs file (`--data FILE`) cut into train / dev / test."""
    from bertkit.data.summaries import load_articles, pairs_file_splits

    return load_articles() if options.data == "inews" else pairs_file_splits(options.data, options.seed)


@holds_out("bertkit summarize-train")
def train_summarizer(options: SummarizationOptions, splits: dict[str, list[tuple[str, str]]] | None = None,
                     ) -> dict[str, Any]:
    """LEAD on dev -> the model trained (UniLM, or the pointer-generator) -> test ROUGE of the model and of LEAD;
    writes OUT/report.json and returns it. `splits` ({train, dev, test}: (source, target) pairs) replaces
    options.data. The run holds OUT (`bertkit.pipelines.run_directory`: an earlier run there is refused unless
    options.overwrite)."""
    started = time.perf_counter()
    device = options.start(OPTIONS_NAME)  # the device, the threads, OUT with these options in it
    out = Path(options.out)
    splits = splits or load_splits(options)
    lead_length, lead_sweep = ((options.lead_length, None) if options.lead_length
                               else choose_lead_length(splits["dev"]))
    if options.architecture == "unilm":
        from bertkit.pipelines.unilm import train_unilm
        model, tokenizer, training = train_unilm(options, splits, device, started)
    else:
        model, tokenizer, training = _train_pointer_generator(options, splits, device, started)
    save_generation_config(out, options)

    test = splits["test"][: options.max_test]
    bodies, titles = [body for body, _ in test], [title for _, title in test]
    decode_started = time.perf_counter()
    summaries = summarize(model, tokenizer, bodies, **decoding_settings(options))
    leads = [lead(body, lead_length) for body in bodies]
    report = {
        "architecture": options.architecture, "data": options.data,
        "rouge": corpus_rouge(summaries, titles), "lead": corpus_rouge(leads, titles), "lead_length": lead_length,
        "lead_dev": lead_sweep, "model": options.model, "parameters": model.num_parameters(),
        "trained_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad), **training,
        "test_articles": len(test), "num_beams": options.num_beams, "length_penalty": options.length_penalty,
        "no_repeat_ngram_size": options.no_repeat_ngram_size, "decode_seconds": time.perf_counter() - decode_started,
        "minutes": options.minutes, "seconds": time.perf_counter() - started,
        "mean_title_characters": {"reference": _mean_length(titles), "model": _mean_length(summaries)},
        "samples": [{"body": body[:200], "reference": title, "summary": summary, "lead": first}
                    for body, title, summary, first in zip(bodies[:8], titles, summaries, leads)],
    }
    atomic_write_text(out / REPORT_NAME, jsonfiles.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return report


def _mean_length(texts: Sequence[str]) -> float:
    return sum(len(characters(text)) for text in texts) / max(1, len(texts))
