"""Translation, end to end: parallel text -> a WordPiece vocabulary per side -> an encoder–decoder -> Trainer -> BLEU.

The model is the Transformer or one of the RNN encoder–decoders it replaced (vanilla RNN, GRU or LSTM, with or
without attention: Bahdanau's additive score or the scaled dot product), so the same data, tokenizers, budget
and evaluation compare them. Training pairs are grouped into batches of similar length (little padding, for the
RNNs' step loops as for attention); the held-out BLEU is sacrebleu's, with its "zh" tokenisation for Chinese
targets.

A trained directory holds config.json + model.safetensors, `source_tokenizer/`, `target_tokenizer/`,
generation_config.json (the beam size and length penalty `bertkit translate` uses unless told otherwise),
the trainer's metrics.jsonl and report.json.
"""

from __future__ import annotations

import json
import math
import random
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from bertkit.data.lines import input_path, readable
from bertkit.errors import InputError
from bertkit.inference.batching import TruncationWarning
from bertkit.models.losses import IGNORE_INDEX
from bertkit.models.seq2seq.configuration import Seq2SeqConfig
from bertkit.models.seq2seq.transformer import build_seq2seq, load_seq2seq
from bertkit.pipelines.options import TranslationOptions
from bertkit.pipelines.presets import TRANSLATION_LENGTH_PENALTIES
from bertkit.pipelines.presets import TRANSLATION_MODELS as MODELS
from bertkit.pipelines.presets import TRANSLATION_SIZES as SIZES
from bertkit.pipelines.run_directory import holds_out
from bertkit.tokenizer import detokenize
from bertkit.training.budget import plan_for_budget, probe_batches, seconds_per_step
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_write_text
from bertkit.utils.devices import to_device

REPORT_NAME = "report.json"
OPTIONS_NAME = "translation_options.json"
GENERATION_NAME = "generation_config.json"
LENGTH_PENALTIES = TRANSLATION_LENGTH_PENALTIES  # the α tried on dev by `tune_length_penalty`
TUNING_PAIRS = 500                        # dev pairs they are scored on
DATASETS = ("bible", "hsk")

# ---- data -----------------------------------------------------------------------------------------

def load_pairs(data: str, source_lang: str, target_lang: str, seed: int = 0) -> dict[str, list[tuple[str, str]]]:
    """train/dev/test (source, target) pairs: a named dataset's splits, or a TSV file split 80/10/10 by seed."""
    from bertkit.data import tasks

    if data in DATASETS:
        return tasks.load_translation(data, source_lang, target_lang, seed=seed)
    path = input_path(data)
    if not readable(path):
        raise FileNotFoundError(f"--data {data!r} is neither a dataset ({', '.join(DATASETS)}) nor a file")
    pairs = tasks.read_parallel(path)
    if len(pairs) < 10:
        raise InputError(f"{path} has {len(pairs)} usable pairs; too few to train and evaluate on")
    return tasks.seeded_split(pairs, seed)


class TranslationTokenizer:
    """A WordPiece tokenizer per side: sources end with [SEP]; targets start with [CLS] (bos), end with [SEP] (eos)."""

    def __init__(self, source, target, source_lang: str, target_lang: str) -> None:
        if source.pad_token_id != target.pad_token_id:
            raise InputError(f"source and target vocabularies put [PAD] at different ids "
                             f"({source.pad_token_id}, {target.pad_token_id}); one model config needs one pad id")
        self.source, self.target = source, target
        self.source_lang, self.target_lang = source_lang, target_lang

    def encode_source(self, texts: Sequence[str], max_length: int | None = None) -> list[list[int]]:
        rows = self.source(list(texts), add_special_tokens=False)["input_ids"]
        if max_length is not None:
            rows = [row[: max_length - 1] for row in rows]
        return [row + [self.source.sep_token_id] for row in rows]

    def encode_target(self, texts: Sequence[str]) -> list[list[int]]:
        """Target ids with eos; the decoder's start token (bos) is added by the model when it shifts them."""
        rows = self.target(list(texts), add_special_tokens=False)["input_ids"]
        return [row + [self.target.sep_token_id] for row in rows]

    def decode(self, ids: Sequence[int]) -> str:
        return detokenize(self.target.decode(list(ids), skip_special_tokens=True), self.target_lang)

    def save_pretrained(self, path: str | Path) -> None:
        path = Path(path)
        self.source.save_pretrained(path / "source_tokenizer")
        self.target.save_pretrained(path / "target_tokenizer")
        atomic_write_text(path / "languages.json", json.dumps({"source": self.source_lang, "target": self.target_lang}))

    @classmethod
    def from_pretrained(cls, path: str | Path) -> TranslationTokenizer:
        from bertkit.tokenizer import BertTokenizer

        path = Path(path)
        if not (path / "source_tokenizer").is_dir():
            raise FileNotFoundError(f"{path} has no source_tokenizer/: not a bertkit translation model")
        langs = json.loads((path / "languages.json").read_text())
        return cls(BertTokenizer.from_pretrained(path / "source_tokenizer"),
                   BertTokenizer.from_pretrained(path / "target_tokenizer"), langs["source"], langs["target"])


def build_tokenizer(train_pairs: list[tuple[str, str]], source_lang: str, target_lang: str, vocab_size: int,
                    work_dir: Path) -> TranslationTokenizer:
    """A vocabulary per side from the training pairs: characters for Chinese, WordPiece otherwise.

    Sources are lowercased (fewer rare forms); targets keep their case, since BLEU counts it.
    """
    from bertkit.data.vocab import build_vocab
    from bertkit.tokenizer import BertTokenizer

    sides = []
    for index, (side, lowercase) in enumerate((("source", True), ("target", False))):
        texts = [pair[index] for pair in train_pairs]
        sides.append(BertTokenizer.from_pretrained(build_vocab(texts, work_dir / side, vocab_size=vocab_size,
                                                               lowercase=lowercase)))
    return TranslationTokenizer(*sides, source_lang, target_lang)


def encode_pairs(tokenizer: TranslationTokenizer, pairs: Sequence[tuple[str, str]],
                 max_length: int) -> tuple[list[tuple[list[int], list[int]]], int]:
    """Token ids of each pair; pairs with a side longer than max_length are left out (and counted)."""
    sources = tokenizer.encode_source([s for s, _ in pairs])
    targets = tokenizer.encode_target([t for _, t in pairs])
    kept = [(s, t) for s, t in zip(sources, targets) if len(s) <= max_length and len(t) <= max_length]
    return kept, len(pairs) - len(kept)


def length_batches(examples: Sequence[tuple[list[int], list[int]]], batch_size: int, seed: int,
                   max_tokens: int | None = None) -> list[list[tuple[list[int], list[int]]]]:
    """Batches of pairs of similar length: sort by (target, source) length, ties shuffled, then cut.

    With `max_tokens` a batch holds as many pairs as fit in that many target tokens, padding included (a
    batch of n pairs padded to length T counts n·T), instead of `batch_size` pairs. The loss is a mean over
    a batch's tokens, so with a fixed number of pairs a token of a short sentence weighs as much as several
    of a long one; with a fixed number of tokens every token weighs alike, and every step costs about the
    same. The trainer shuffles the batches each epoch; within a batch little is padding.
    """
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    order.sort(key=lambda i: (len(examples[i][1]), len(examples[i][0])))
    if max_tokens is None:
        return [[examples[i] for i in order[start: start + batch_size]]
                for start in range(0, len(order) - batch_size + 1, batch_size)]
    batches: list[list[tuple[list[int], list[int]]]] = [[]]
    for i in order:  # ascending length: the newest pair is the longest, so it sets the padded length
        if batches[-1] and (len(batches[-1]) + 1) * len(examples[i][1]) > max_tokens:
            batches.append([])
        batches[-1].append(examples[i])
    return batches if batches[0] else []


class TranslationCollator:
    """Batches of (source ids, target ids) -> input_ids, attention_mask, labels (-100 on padding)."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, items: list, seeds: list[int] | None = None) -> dict[str, torch.Tensor]:
        pairs = [pair for item in items for pair in (item if isinstance(item, list) else [item])]
        if not pairs:
            raise ValueError("empty batch: no sentence pairs to collate")
        S, T = max(len(s) for s, _ in pairs), max(len(t) for _, t in pairs)
        input_ids = torch.full((len(pairs), S), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(pairs), T), IGNORE_INDEX, dtype=torch.long)
        for i, (source, target) in enumerate(pairs):
            input_ids[i, : len(source)] = torch.tensor(source)
            labels[i, : len(target)] = torch.tensor(target)
        return {"input_ids": input_ids, "attention_mask": (input_ids != self.pad_token_id).long(), "labels": labels}


# ---- model, decoding, evaluation ------------------------------------------------------------------

def model_config(options: TranslationOptions, tokenizer: TranslationTokenizer) -> Seq2SeqConfig:
    transformer_size, rnn_size = SIZES[options.size]
    kind = MODELS[options.model]
    size = transformer_size if kind["architecture"] == "transformer" else rnn_size
    return Seq2SeqConfig(**kind, **size, vocab_size=len(tokenizer.source), decoder_vocab_size=len(tokenizer.target),
                         dropout=options.dropout, label_smoothing=options.label_smoothing,
                         normalize_before=options.pre_ln, attention_score=options.attention_score,
                         gru_variant=options.gru_variant,
                         max_position_embeddings=max(256, 2 * options.max_length),
                         pad_token_id=tokenizer.target.pad_token_id, bos_token_id=tokenizer.target.cls_token_id,
                         eos_token_id=tokenizer.target.sep_token_id)


@torch.no_grad()
def translate(model: torch.nn.Module, tokenizer: TranslationTokenizer, texts: Sequence[str], num_beams: int = 4,
              batch_size: int = 32, max_new_tokens: int | None = None, length_penalty: float = 1.0) -> list[str]:
    """Translate texts, batched by source length (little padding), on the device the model is on; results in input
    order."""
    model.eval()
    device = next(model.parameters()).device
    limit = model.config.max_position_embeddings
    sources = tokenizer.encode_source(texts)
    long = [i for i, row in enumerate(sources) if len(row) > limit]
    if long:  # cut to the positions the model has, as encode_source(max_length=) cuts: said, not silent
        warnings.warn(TruncationWarning(
            f"{len(long)} of {len(sources)} texts are longer than the model's {limit} positions (the first is text "
            f"{long[0] + 1}, {len(sources[long[0]])} tokens): each was cut to its first {limit - 1} tokens, and its "
            "translation covers only those"), stacklevel=2)
        sources = [row if len(row) <= limit else row[:limit - 1] + row[-1:] for row in sources]
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[str] = [""] * len(sources)
    collate = TranslationCollator(tokenizer.source.pad_token_id)
    for start in range(0, len(order), batch_size):
        chunk = order[start: start + batch_size]
        batch = to_device(collate([(sources[i], [0]) for i in chunk]), device)
        generated = model.generate(batch["input_ids"], batch["attention_mask"], num_beams=num_beams,
                                   max_new_tokens=max_new_tokens, length_penalty=length_penalty)
        for i, ids in zip(chunk, generated.tolist()):
            out[i] = tokenizer.decode(ids)
    return out


def evaluate_bleu(model: torch.nn.Module, tokenizer: TranslationTokenizer, pairs: Sequence[tuple[str, str]],
                  num_beams: int = 4, length_penalty: float = 1.0) -> tuple[dict[str, Any], list[str]]:
    """Corpus BLEU of the model's translations of the sources against the references, with its parts
    (`metrics.bleu_details`), and the translations."""
    from bertkit.training import metrics

    hypotheses = translate(model, tokenizer, [s for s, _ in pairs], num_beams=num_beams,
                           length_penalty=length_penalty)
    tokenize = "zh" if tokenizer.target_lang == "zh" else "13a"
    return metrics.bleu_details(hypotheses, [t for _, t in pairs], tokenize=tokenize), hypotheses


def tune_length_penalty(model: torch.nn.Module, tokenizer: TranslationTokenizer, dev: Sequence[tuple[str, str]],
                        num_beams: int = 4, candidates: Sequence[float] = LENGTH_PENALTIES,
                        ) -> tuple[float, list[dict[str, float]]]:
    """The length penalty α whose beam search scores the best BLEU on `dev`, and each α's BLEU and length ratio.

    α sets how beam search trades length for probability: log p falls with every token, so with α = 0 short
    hypotheses win, and the larger α the longer the translations. A model whose translations run short of the
    references (length ratio below 1, paid for by BLEU's brevity penalty) may gain from a larger α; chosen
    on held-out dev pairs, not the test pairs it is then scored on.
    """
    if not dev:
        raise InputError("no dev pairs to choose the length penalty on")
    sweep = []
    for alpha in candidates:
        scores, _ = evaluate_bleu(model, tokenizer, dev, num_beams, alpha)
        sweep.append({"length_penalty": alpha, "bleu": scores["bleu"], "length_ratio": scores["length_ratio"]})
    best = max(sweep, key=lambda row: row["bleu"])  # ties go to the smaller α
    return best["length_penalty"], sweep


def save_generation_config(path: str | Path, num_beams: int, length_penalty: float) -> None:
    atomic_write_text(Path(path) / GENERATION_NAME,
                      jsonfiles.dumps({"num_beams": num_beams, "length_penalty": length_penalty}, indent=2) + "\n")


def load_generation_config(path: str | Path) -> dict[str, Any]:
    """The decoding settings saved with a trained model: {"num_beams", "length_penalty"} (defaults if none saved)."""
    file = Path(path) / GENERATION_NAME
    saved = json.loads(file.read_text()) if file.is_file() else {}
    return {"num_beams": saved.get("num_beams", 4), "length_penalty": saved.get("length_penalty", 1.0)}


def dev_loss_fn(batches: list, collator: TranslationCollator):
    """eval_fn for the trainer: mean token cross-entropy (no label smoothing) on the dev batches, on the device the
    model is on."""
    def evaluate(model) -> dict[str, float]:
        device = next(model.parameters()).device
        total, count = 0.0, 0
        for batch in batches:
            inputs = to_device(collator(batch), device)
            logits = model(**{k: v for k, v in inputs.items() if k != "labels"},
                           decoder_input_ids=None, labels=inputs["labels"]).logits
            labels = inputs["labels"]
            keep = labels != IGNORE_INDEX
            total += torch.nn.functional.cross_entropy(logits[keep].float(), labels[keep], reduction="sum").item()
            count += int(keep.sum())
        return {"loss": total / count, "perplexity": math.exp(min(total / count, 50.0))}

    return evaluate


# ---- training ---------------------------------------------------------------------------------------

@holds_out("bertkit translate-train")
def train_translation(options: TranslationOptions) -> dict[str, Any]:
    """Data -> tokenizers -> model -> Trainer -> test BLEU; writes OUT/report.json and returns it. The run holds
    OUT (`bertkit.pipelines.run_directory`: an earlier run or model there is refused unless options.overwrite)."""
    from bertkit.training.trainer import Trainer

    device = options.start(OPTIONS_NAME)  # the device, the threads, OUT with these options in it
    out = Path(options.out)
    splits = load_pairs(options.data, options.source_lang, options.target_lang, options.seed)
    with tempfile.TemporaryDirectory() as work_dir:
        tokenizer = build_tokenizer(splits["train"], options.source_lang, options.target_lang, options.vocab_size,
                                    Path(work_dir))
    train, dropped = encode_pairs(tokenizer, splits["train"], options.max_length)
    dev, _ = encode_pairs(tokenizer, splits["dev"], options.max_length)
    batches = length_batches(train, options.batch_size, options.seed, options.batch_tokens)
    if not batches:
        cut = (f"; {dropped:,} longer than --max-length {options.max_length} were left out" if dropped else "")
        raise InputError(f"the training data has {len(train):,} usable pairs{cut}: fewer than one batch of "
                         f"{options.batch_size} (--batch-size); give a smaller --batch-size"
                         + (" or a larger --max-length" if dropped else "") + ", or more pairs")
    collator = TranslationCollator(tokenizer.source.pad_token_id)
    config = model_config(options, tokenizer)
    torch.manual_seed(options.seed)
    model = build_seq2seq(config)
    # each dataset item is a batch of like-length pairs: the probes are items of like length (probe_batches); no
    # evaluation in the plan: the one dev evaluation comes after the clock's last reading
    lengths = [max(len(pair[0]) for pair in batch) for batch in batches]
    probes = [collator(batches[i]) for [i] in probe_batches(len(batches), 1, lengths)]
    max_steps = options.max_steps or plan_for_budget(seconds_per_step(model, probes, options.bf16, device=device),
                                                     minutes=options.minutes, device=device)
    args = options.training_arguments(max_steps, batch_size=1,  # each dataset item is a batch of like-length pairs
                                      learning_rate=options.lr, weight_decay=0.01, save_total_limit=1,
                                      eval_every=None)  # the dev loss once, at the end
    dev_batches = length_batches(dev, options.batch_size, options.seed, options.batch_tokens) or [dev]
    trainer = Trainer(model, args, batches, collator, eval_fn=dev_loss_fn(dev_batches, collator),
                      tokenizer=tokenizer)
    state = trainer.train()

    length_penalty, sweep = options.length_penalty, None
    if options.tune_length_penalty:
        length_penalty, sweep = tune_length_penalty(model, tokenizer, splits["dev"][:TUNING_PAIRS], options.num_beams)
    save_generation_config(out, options.num_beams, length_penalty)
    test = splits["test"][: options.max_test_sentences]
    if options.max_test_sentences and options.max_test_sentences > len(test):
        warnings.warn(f"--max-test {options.max_test_sentences} is more than the {len(test)} test pairs: BLEU is "
                      f"scored on all {len(test)}", stacklevel=2)
    started = time.perf_counter()
    scores, hypotheses = evaluate_bleu(model, tokenizer, test, options.num_beams, length_penalty)
    final = state.log_history[-1] if state.log_history else {}
    report = {
        "bleu": scores["bleu"], "model": options.model, "train_seconds": state.seconds, "data": options.data,
        "pair": options.pair, "size": options.size, "parameters": model.num_parameters(), "steps": state.step,
        "stop_reason": state.stop_reason, "train_pairs": len(train), "train_pairs_too_long": dropped,
        "batch_size": options.batch_size if options.batch_tokens is None else None,
        "batch_tokens": options.batch_tokens, "pairs_per_batch": sum(map(len, batches)) / len(batches),
        "epochs": state.step / len(batches), "dev_loss": final.get("eval_loss"),
        "bleu_precisions": scores["precisions"], "brevity_penalty": scores["brevity_penalty"],
        "length_ratio": scores["length_ratio"],
        "test_sentences": len(test), "num_beams": options.num_beams, "length_penalty": length_penalty,
        "length_penalty_dev": sweep, "decode_seconds": time.perf_counter() - started,
        "vocab_sizes": {"source": len(tokenizer.source), "target": len(tokenizer.target)},
        "samples": [{"source": s, "reference": t, "translation": h} for (s, t), h in zip(test[:8], hypotheses)],
    }
    atomic_write_text(out / REPORT_NAME, jsonfiles.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return report


def load_translator(path: str | Path) -> tuple[torch.nn.Module, TranslationTokenizer]:
    """A trained translation directory -> (model, tokenizer)."""
    return load_seq2seq(path), TranslationTokenizer.from_pretrained(path)
