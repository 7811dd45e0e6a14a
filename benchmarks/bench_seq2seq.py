"""The Transformer against the RNN encoder–decoders it replaced: same pairs, same tokenizers, same time budget.

Each model is trained by the same pipeline as `bertkit translate-train` (one after another, so they do not
compete for the cores), then translates the same held-out sentences with the same beam size. Prints a
table of BLEU, training time, steps, epochs and parameter counts, and writes it to OUT/comparison.json.

    python benchmarks/bench_seq2seq.py --data bible --pair zh-en --minutes 10 --out runs/seq2seq
    python benchmarks/bench_seq2seq.py --data hsk --minutes 3 --models transformer gru --out runs/hsk
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from bertkit.pipelines.translation import MODELS, TranslationOptions, train_translation


def table(reports: list[dict]) -> str:
    """A plain-text table, one row per model."""
    lines = [f"{'model':<16}{'BLEU':>7}{'train s':>9}{'steps':>7}{'epochs':>8}{'params':>12}{'dev loss':>10}"]
    for r in reports:
        lines.append(f"{r['model']:<16}{r['bleu']:>7.2f}{r['train_seconds']:>9.0f}{r['steps']:>7}"
                     f"{r['epochs']:>8.2f}{r['parameters']:>12,}{r['dev_loss']:>10.3f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="bible", help="bible | hsk | FILE.tsv")
    parser.add_argument("--pair", default="zh-en")
    parser.add_argument("--models", nargs="+", default=["transformer", "gru-attention", "gru"], choices=list(MODELS))
    parser.add_argument("--minutes", type=float, default=10.0, help="training budget of EACH model")
    parser.add_argument("--size", default="small")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-test", type=int, help="BLEU on the first N test pairs only")
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--pre-ln", action="store_true", help="pre-LN Transformer blocks")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--threads", type=int, help="torch threads (fewer than cores helps on a busy machine)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    out = Path(args.out)
    reports = []
    for model in args.models:
        print(f"== {model}: {args.minutes} minutes on {args.data} {args.pair}", flush=True)
        report = train_translation(TranslationOptions(
            data=args.data, pair=args.pair, out=str(out / model), model=model, size=args.size, minutes=args.minutes,
            batch_size=args.batch_size, dropout=args.dropout, pre_ln=args.pre_ln, num_beams=args.beams,
            max_test_sentences=args.max_test, bf16=args.bf16, seed=args.seed, progress=False))
        reports.append(report)
        print(table([report]), flush=True)
    print(f"\n{args.data} {args.pair}, {args.minutes} minutes each, beam {args.beams}, "
          f"{reports[0]['test_sentences']} test pairs\n")
    print(table(reports))
    summary = {"data": args.data, "pair": args.pair, "minutes": args.minutes, "size": args.size, "bf16": args.bf16,
               "dropout": args.dropout, "pre_ln": args.pre_ln, "threads": torch.get_num_threads(),
               "rows": [{k: r[k] for k in ("model", "bleu", "train_seconds", "steps", "epochs", "parameters",
                                            "dev_loss", "test_sentences")} for r in reports]}
    (out / "comparison.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
