"""Summarisation, end to end: a pretrained BERT learns to write a target from its source (inews' titles from their
bodies, or a pairs file's targets), scored by character ROUGE beside the LEAD baseline.

Two architectures, each a module of this package: `unilm` (the BERT itself fine-tuned to write, under UniLM's
mask) and `pointer_generator` (a frozen BERT encoder under a Transformer decoder that copies). This module runs
either: the data, LEAD, training the chosen one, its test targets and the report, and reads either back.

LEAD, the first N characters of the source, is the baseline a summariser must beat (news puts its gist first);
N is chosen by ROUGE-L on the dev split, and both are scored on the same test pairs (`training.rouge`).

A trained directory holds the model and its tokenizer(s), generation_config.json (the decoding settings `bertkit
summarize` uses), the trainer's metrics.jsonl and report.json.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit.errors import InputError
from bertkit.pipelines.options import SummarizationOptions
from bertkit.pipelines.run_directory import holds_out
from bertkit.training.rouge import characters, corpus_rouge
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_write_text

REPORT_NAME = "report.json"
OPTIONS_NAME = "summarization_options.json"
GENERATION_NAME = "generation_config.json"
LEAD_LENGTHS = tuple(range(4, 65, 4))   # the N tried for LEAD on dev


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


# ---- writing ------------------------------------------------------------------------------------

def summarize(model, tokenizer, texts: Sequence[str], num_beams: int = 4, batch_size: int = 32,
              max_new_tokens: int | None = None, length_penalty: float = 1.0, max_source_length: int | None = None,
              no_repeat_ngram_size: int = 0) -> list[str]:
    """A title for each text, by either kind of summariser (a UniLM writer or a pointer-generator), on the device
    the model is on; results in input order; a warning names the texts whose title came out empty."""
    from bertkit.models.bert.unilm import BertForUniLM

    if isinstance(model, BertForUniLM):
        from bertkit.pipelines.summarization import unilm as architecture
    else:
        from bertkit.pipelines.summarization import pointer_generator as architecture
    titles, sources, unknown = architecture.write(model, tokenizer, texts, num_beams, batch_size, max_new_tokens,
                                                  length_penalty, max_source_length, no_repeat_ngram_size)
    _warn_empty(titles, sources, unknown)
    return titles


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
        from bertkit.tokenizer import BertTokenizer

        if not family.holds_head(path, "seq2seq"):
            raise ConfigError(f"{path} holds a BERT that has not learnt to write (its config.json names no "
                              "BertForUniLM); train one with `bertkit summarize-train --model` it")
        return family.head("seq2seq").from_pretrained(path), BertTokenizer.from_pretrained(path)
    from bertkit.pipelines.summarization.pointer_generator import SummaryTokenizer

    return family.load(path), SummaryTokenizer.from_pretrained(path)


# ---- training -----------------------------------------------------------------------------------

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
    from bertkit.data.sources import resolve_model
    from bertkit.models.bert.configuration import BertConfig

    started = time.perf_counter()
    device = options.start(OPTIONS_NAME)  # the device, the threads, OUT with these options in it
    out = Path(options.out)
    if options.architecture == "unilm":
        from bertkit.pipelines.summarization.unilm import check_model
        from bertkit.pipelines.summarization.unilm import train_unilm as train
    else:
        from bertkit.pipelines.summarization.pointer_generator import check_encoder as check_model
        from bertkit.pipelines.summarization.pointer_generator import train_pointer_generator as train
    # a --model that names nothing, or lengths it cannot take, are refused before the data is fetched
    check_model(options, BertConfig.from_pretrained(resolve_model(options.model)))
    splits = splits or load_splits(options)
    lead_length, lead_sweep = ((options.lead_length, None) if options.lead_length
                               else choose_lead_length(splits["dev"]))
    model, tokenizer, training = train(options, splits, device, started)
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
