"""`bertkit translate-train`, `translate`, `summarize-train`, `summarize`, `lm-train`, `generate`: the
encoder-decoders, GPT and the recurrent LMs."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from bertkit.cli.common import (
    add_command,
    add_device_option,
    command_device,
    integer,
    number,
)
from bertkit.cli.options import add_options, options_from_args
from bertkit.cli.texts import add_encoding_option, command_line_texts, stdin_lines
from bertkit.errors import InputError
from bertkit.pipelines.options import LMOptions, SummarizationOptions, TranslationOptions

# ---- translate-train, translate, lm-train, generate ----------------------------------------------

def _add_translate_train(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "translate-train", _cmd_translate_train)
    add_options(p, TranslationOptions)


def _cmd_translate_train(args: argparse.Namespace) -> int:
    """train a translation model (Transformer or RNN) and report BLEU

    Build a WordPiece vocabulary per side, train an encoder-decoder on the pairs, and score held-out BLEU
    (sacrebleu) with beam search; writes OUT/report.json.
    """
    from bertkit.pipelines.translation import train_translation

    options = options_from_args(TranslationOptions, args)
    report = train_translation(options)
    print(f"{report['model']} ({report['parameters']:,} parameters): {report['steps']} steps in "
          f"{report['train_seconds']:.0f} s, {report['epochs']:.1f} epochs; dev loss {report['dev_loss']:.3f}")
    precisions = " / ".join(f"{p:.1f}" for p in report["bleu_precisions"])
    if report["length_penalty_dev"]:
        print("dev BLEU by length penalty: " + ", ".join(f"α {row['length_penalty']}: {row['bleu']:.2f}"
                                                         for row in report["length_penalty_dev"]))
    print(f"test BLEU {report['bleu']:.2f} on {report['test_sentences']} {options.data} pairs "
          f"(beam {options.num_beams}, length penalty {report['length_penalty']}): "
          f"n-gram precisions {precisions}, length ratio {report['length_ratio']:.3f}")
    for sample in report["samples"][:3]:
        print(f"  {sample['source']}\n    -> {sample['translation']}\n    ref {sample['reference']}")
    print(f"model, tokenizers and report.json in {options.out}")
    return 0


def _read_texts(args: argparse.Namespace) -> list[str]:
    texts = command_line_texts(args.text, args.encoding) if args.text else stdin_lines(args.encoding)
    if not texts:
        raise InputError("give text arguments, or lines on standard input")
    return texts


def _add_translate(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "translate", _cmd_translate)
    p.add_argument("--model", required=True, metavar="DIR", help="a directory written by `bertkit translate-train`")
    p.add_argument("text", nargs="*", help="sentences to translate (default: lines of standard input)")
    _add_decoding_options(p, "tokens per translation at most (default: twice the source's tokens + 10, within the "
                             "model's positions)")


def _add_decoding_options(p: argparse.ArgumentParser, max_new_tokens: str) -> None:
    """What `translate` and `summarize` share: beam search, each default from the model's generation_config.json."""
    p.add_argument("--beams", type=integer(1), help="beam size, 1 = greedy (default: the model's "
                                                    "generation_config.json, else 4)")
    p.add_argument("--length-penalty", type=number(), help="α of beam search (default: the model's, else 1.0)")
    p.add_argument("--max-new-tokens", type=integer(1), help=max_new_tokens)
    add_device_option(p)
    add_encoding_option(p, "text (arguments or standard input)")


def _beam_settings(args: argparse.Namespace, saved: dict) -> tuple[int, float]:
    """(beams, length penalty): as given, else as the model's generation_config.json saved them."""
    return (args.beams if args.beams is not None else saved["num_beams"],
            args.length_penalty if args.length_penalty is not None else saved["length_penalty"])


def _generator(args: argparse.Namespace, command: str, load: Callable, generation_config: Callable) -> tuple:
    """What `translate` and `summarize` do before they decode: (the texts, the --model directory's model on --device,
    its tokenizer, its generation_config.json, the beams and length penalty to decode with)."""
    from bertkit.data.sources import resolve_model
    from bertkit.models.registry import require

    device = command_device(args)
    texts = _read_texts(args)
    model_dir = resolve_model(args.model)
    require(model_dir, command)
    model, tokenizer = load(model_dir)
    saved = generation_config(model_dir)
    return texts, model.to(device), tokenizer, saved, *_beam_settings(args, saved)


def _cmd_translate(args: argparse.Namespace) -> int:
    """translate text with a model from `bertkit translate-train`"""
    from bertkit.pipelines.translation import load_generation_config, load_translator, translate

    texts, model, tokenizer, _, num_beams, length_penalty = _generator(args, "translate", load_translator,
                                                                        load_generation_config)
    for line in translate(model, tokenizer, texts, num_beams=num_beams,
                          max_new_tokens=args.max_new_tokens, length_penalty=length_penalty):
        print(line)
    return 0


def _add_lm_train(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "lm-train", _cmd_lm_train)
    add_options(p, LMOptions)


def _cmd_lm_train(args: argparse.Namespace) -> int:
    """train a language model (GPT, or an RNN, LSTM or GRU) and compare its perplexity with a unigram model"""
    from bertkit.pipelines.lm import train_lm

    options = options_from_args(LMOptions, args)
    report = train_lm(options)
    name = {"gpt": "GPT", "rnn": "RNN LM", "lstm": "LSTM LM", "gru": "GRU LM"}[options.model]
    print(f"{name} ({report['parameters']:,} parameters): {report['steps']} steps in {report['train_seconds']:.0f} s")
    print(f"held-out perplexity {report['perplexity']:.1f}; unigram model {report['unigram_perplexity']:.1f} "
          f"({report['eval_tokens']:,} tokens)")
    for prompt, text in report["samples"].items():
        print(f"  {prompt} -> {text}")
    print(f"model, tokenizer and report.json in {options.out}")
    return 0


def _add_generate(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "generate", _cmd_generate)
    p.add_argument("--model", required=True, metavar="DIR", help="a directory written by `bertkit lm-train`")
    p.add_argument("text", nargs="*", help="prompts (default: lines of standard input)")
    p.add_argument("--max-new-tokens", type=integer(1), default=60,
                   help="tokens per continuation at most (default: 60)")
    p.add_argument("--greedy", action="store_true", help="most likely token each step instead of sampling "
                                                         "(default: sampling)")
    p.add_argument("--beams", type=integer(1), default=1, help="beam search with this many beams, implies --greedy "
                                                        "(default: 1, no beam search)")
    p.add_argument("--temperature", type=number(above=0), default=0.8, help="sampling temperature (default: 0.8)")
    p.add_argument("--top-k", type=integer(0), default=40,
                   help="sample from the k most likely tokens, 0 for all (default: 40)")
    p.add_argument("--top-p", type=number(above=0, maximum=1), default=0.95,
                   help="... within probability mass p (default: 0.95)")
    p.add_argument("--seed", type=integer(0, 2**32 - 1), default=0, help="sampling seed (default: 0)")
    add_device_option(p)
    add_encoding_option(p, "prompts (arguments or standard input)")


def _cmd_generate(args: argparse.Namespace) -> int:
    """continue text with a model from `bertkit lm-train`"""
    import torch

    from bertkit.data.quality import check_tokenizer_fits
    from bertkit.data.sources import resolve_model
    from bertkit.models.registry import require
    from bertkit.pipelines.lm import generate_text
    from bertkit.tokenizer import BertTokenizer

    device = command_device(args)
    prompts = _read_texts(args)
    model_dir = resolve_model(args.model)
    family = require(model_dir, "generate")  # GPT-2 or a recurrent LM: the language-model class of either
    model = family.head("language-model").from_pretrained(model_dir).to(device)
    tokenizer = BertTokenizer.from_pretrained(model_dir)
    check_tokenizer_fits(len(tokenizer), model.config.vocab_size, str(model_dir))
    sample = not args.greedy and args.beams == 1
    options = dict(do_sample=True, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                   generator=torch.Generator().manual_seed(args.seed)) if sample else dict(num_beams=args.beams)
    for prompt in prompts:
        print(generate_text(model, tokenizer, prompt, args.max_new_tokens, **options))
    return 0


# ---- summarize-train, summarize ------------------------------------------------------------------

def _add_summarize_train(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "summarize-train", _cmd_summarize_train)
    add_options(p, SummarizationOptions)


def _rouge(scores: dict[str, float]) -> str:
    return f"ROUGE-1 {scores['rouge1']:.2f}  ROUGE-2 {scores['rouge2']:.2f}  ROUGE-L {scores['rougeL']:.2f}"


def _cmd_summarize_train(args: argparse.Namespace) -> int:
    """train a BERT to write titles (or your own targets) and score ROUGE against LEAD

    UniLM (default): the pretrained BERT (m3e-small by default) is fine-tuned, every weight of it, to write the
    target after its source under UniLM's mask. pointer-generator: the BERT encodes the source once, frozen, and a
    Transformer decoder that copies from it learns to write. On inews' news articles (a title from its body) or a
    file of source -> target pairs (--data). Held-out targets are scored by character ROUGE-1/2/L (mean per-pair
    F1), beside LEAD, the source's first N characters (N chosen on the dev split); writes OUT/report.json.
    """
    from bertkit.pipelines.summarization import train_summarizer

    options = options_from_args(SummarizationOptions, args)
    report = train_summarizer(options)
    frozen = "" if report["trained_parameters"] == report["parameters"] else \
        f" ({report['trained_parameters']:,} trained)"
    before = (f"encoder states of {report['train_pairs']} pairs in {report['encode_seconds']:.0f} s, then "
              if "encode_seconds" in report else f"{report['train_pairs']} pairs: ")
    dev = f"; dev loss {report['dev_loss']:.3f}" if report["dev_loss"] is not None else ""
    print(f"{report['architecture']}, {report['parameters']:,} parameters{frozen}: {before}{report['steps']} steps "
          f"in {report['train_seconds']:.0f} s, {report['epochs']:.1f} epochs{dev}")
    if report["lead_dev"]:
        best = max(report["lead_dev"], key=lambda row: row["rougeL"])
        print(f"LEAD length chosen on dev: {report['lead_length']} characters (dev ROUGE-L {best['rougeL']:.2f})")
    print(f"test, {report['test_articles']} pairs (beam {report['num_beams']}):")
    print(f"  model {_rouge(report['rouge'])}")
    print(f"  LEAD  {_rouge(report['lead'])}")
    for sample in report["samples"][:3]:
        print(f"  {sample['body'][:60]}…\n    -> {sample['summary']}\n    ref {sample['reference']}")
    print(f"model, tokenizer and report.json in {options.out}")
    return 0


def _add_summarize(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "summarize", _cmd_summarize)
    p.add_argument("--model", required=True, metavar="DIR", help="a directory written by `bertkit summarize-train`")
    p.add_argument("text", nargs="*", help="texts to summarise (default: lines of standard input, one text each)")
    _add_decoding_options(p, "tokens per summary at most (default: the model's target length)")
    p.add_argument("--no-repeat-ngram-size", type=integer(0), metavar="N",
                   help="never write an n-gram of this size twice in one summary, 0 = off (default: the model's)")


def _cmd_summarize(args: argparse.Namespace) -> int:
    """write a title for each text with a model from `bertkit summarize-train`"""
    from bertkit.pipelines.summarization import load_generation_config, load_summarizer, summarize

    texts, model, tokenizer, saved, num_beams, length_penalty = _generator(args, "summarize", load_summarizer,
                                                                            load_generation_config)
    repeats = args.no_repeat_ngram_size if args.no_repeat_ngram_size is not None else saved["no_repeat_ngram_size"]
    for line in summarize(model, tokenizer, texts, num_beams=num_beams,
                          max_new_tokens=args.max_new_tokens or saved["max_new_tokens"], length_penalty=length_penalty,
                          max_source_length=saved["max_source_length"], no_repeat_ngram_size=repeats):
        print(line)
    return 0
