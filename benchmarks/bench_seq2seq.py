"""The Transformer against the RNN encoder–decoders it replaced: same pairs, same tokenizers, same time budget.

Each model is trained by the same pipeline as `bertkit translate-train` (one after another, so they do not
compete for the cores), then translates the same held-out sentences with the same beam size. Prints a
table of BLEU, length ratio (translation / reference length, below 1 costs the brevity penalty), the beam
search length penalty α (`--tune-length-penalty`: each model's, chosen on dev), training time, steps, epochs
and parameter counts, and writes it to OUT/comparison.json.

Each model trains for `--minutes` of wall clock at most. Before any training, steps of all models are
timed side by side, interleaved (so load from other processes hits them alike), and each model's
learning-rate schedule is planned for the steps that fit `--minutes` at its measured speed. When training
runs slower than timed, the clock stops it before the planned steps, and the schedule follows the clock
(`TrainingArguments.time_aware_schedule`), so every model still warms up and decays within its minutes.
`--budget wall` skips the shared timing: each model plans its own steps, as `translate-train` does.

    python benchmarks/bench_seq2seq.py --data bible --pair zh-en --minutes 20 --out runs/seq2seq
    python benchmarks/bench_seq2seq.py --data hsk --minutes 3 --models transformer gru --out runs/hsk
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import tempfile
from pathlib import Path

import torch

from bertkit.models.seq2seq.transformer import build_seq2seq
from bertkit.pipelines import translation
from bertkit.pipelines.translation import MODELS, TranslationOptions, train_translation
from bertkit.training.budget import timed_step
from bertkit.training.schedule import build_optimizer


def table(reports: list[dict]) -> str:
    """A plain-text table, one row per model."""
    lines = [f"{'model':<16}{'BLEU':>7}{'length':>8}{'α':>5}{'train s':>9}{'steps':>7}{'epochs':>8}{'params':>12}"
             f"{'dev loss':>10}"]
    for r in reports:
        lines.append(f"{r['model']:<16}{r['bleu']:>7.2f}{r['length_ratio']:>8.3f}{r['length_penalty']:>5.1f}"
                     f"{r['train_seconds']:>9.0f}"
                     f"{r['steps']:>7}{r['epochs']:>8.2f}{r['parameters']:>12,}{r['dev_loss']:>10.3f}")
    return "\n".join(lines)


def plan_steps(options: list[TranslationOptions], seconds: float, rounds: int = 3, per_round: int = 9,
               seed: int = 0) -> dict[str, dict]:
    """Seconds per training step of each model, timed interleaved, and the steps that fit in `seconds` (5% kept
    for evaluation and logging).

    Each model is timed on its own batches (its batch size or token budget), drawn at random from the
    length-sorted list and each timed once, as training meets them. A step on a batch shape the process has
    just run is about 20% faster than one on a new shape (mini Transformer, bf16, 800-token batches), so timing
    a few batches over and over would promise more steps than the Trainer then runs. Round 0 only warms up.
    """
    first = options[0]
    splits = translation.load_pairs(first.data, first.source_lang, first.target_lang, first.seed)
    with tempfile.TemporaryDirectory() as work_dir:
        tokenizer = translation.build_tokenizer(splits["train"], first.source_lang, first.target_lang,
                                                first.vocab_size, Path(work_dir))
    train, _ = translation.encode_pairs(tokenizer, splits["train"], first.max_length)
    collator = translation.TranslationCollator(tokenizer.source.pad_token_id)
    draws = (rounds + 1) * per_round
    probes = {}
    for option in options:
        batches = translation.length_batches(train, option.batch_size, option.seed, option.batch_tokens)
        picks = random.Random(seed).sample(range(len(batches)), min(draws, len(batches)))
        probes[option.model] = [collator(batches[i]) for i in picks]
    models = {}
    for option in options:
        model = build_seq2seq(translation.model_config(option, tokenizer)).train()
        models[option.model] = (model, build_optimizer(model, 1e-6, 0.01), option.bf16)  # the Trainer's AdamW
    times: dict[str, list[float]] = {name: [] for name in models}
    for b in range(max(map(len, probes.values()))):
        for name, (model, optimizer, bf16) in models.items():
            if b < len(probes[name]):
                seconds_per_step = timed_step(model, optimizer, probes[name][b], bf16)
                if b >= per_round:                   # round 0 warms caches up
                    times[name].append(seconds_per_step)
    means = {name: statistics.mean(t) for name, t in times.items()}
    return {name: {"seconds_per_step": m, "steps": max(1, int(0.95 * seconds / m))} for name, m in means.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="bible", help="bible | hsk | FILE.tsv")
    parser.add_argument("--pair", default="zh-en")
    parser.add_argument("--models", nargs="+", default=["transformer", "gru-attention", "gru"], choices=list(MODELS))
    parser.add_argument("--minutes", type=float, default=10.0, help="training budget of EACH model")
    parser.add_argument("--budget", default="compute", choices=["compute", "wall"],
                        help="compute: one interleaved timing plans every model's steps; wall: each plans its own")
    parser.add_argument("--size", default="small", help="model size of every model (tiny | mini | small | base)")
    parser.add_argument("--transformer-size", help="the Transformer's size instead of --size")
    parser.add_argument("--rnn-size", help="the RNNs' size instead of --size")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batch-tokens", type=int, help="target tokens per step instead of --batch-size pairs")
    parser.add_argument("--transformer-batch-tokens", type=int, help="the Transformer's instead of --batch-tokens")
    parser.add_argument("--rnn-batch-tokens", type=int, help="the RNNs' instead of --batch-tokens")
    parser.add_argument("--max-test", type=int, help="BLEU on the first N test pairs only")
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--tune-length-penalty", action="store_true",
                        help="each model's beam-search length penalty chosen on dev (see translate-train)")
    parser.add_argument("--transformer-lr", type=float, help="learning rate of the Transformer (pipeline default)")
    parser.add_argument("--rnn-lr", type=float, help="learning rate of the RNNs (pipeline default)")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--pre-ln", action="store_true", help="pre-LN Transformer blocks")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--threads", type=int, help="torch threads (fewer than cores helps on a busy machine)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--overwrite", action="store_true", help="replace the runs of an earlier benchmark in --out")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    out = Path(args.out)
    transformer = {model: MODELS[model]["architecture"] == "transformer" for model in args.models}
    sizes = {model: (args.transformer_size if transformer[model] else args.rnn_size) or args.size
             for model in args.models}
    options = [TranslationOptions(
        data=args.data, pair=args.pair, out=str(out / model), model=model, size=sizes[model], minutes=args.minutes,
        batch_size=args.batch_size,
        batch_tokens=(args.transformer_batch_tokens if transformer[model] else args.rnn_batch_tokens)
        or args.batch_tokens,
        dropout=args.dropout, pre_ln=args.pre_ln,
        num_beams=args.beams, tune_length_penalty=args.tune_length_penalty,
        learning_rate=args.transformer_lr if transformer[model] else args.rnn_lr,
        max_test_sentences=args.max_test, bf16=args.bf16, seed=args.seed, progress=False, overwrite=args.overwrite)
        for model in args.models]
    plan = None
    if args.budget == "compute":
        plan = plan_steps(options, args.minutes * 60)
        for name, row in plan.items():
            print(f"{name:<16}{row['seconds_per_step']:.3f} s/step -> {row['steps']} steps", flush=True)
        # the plan sizes each schedule; the clock (`minutes`) still ends every run at the same budget
        options = [dataclasses.replace(o, max_steps=plan[o.model]["steps"]) for o in options]
    reports = []
    for option in options:
        print(f"== {option.model}: {args.minutes} minutes ({args.budget}) on {args.data} {args.pair}", flush=True)
        reports.append(train_translation(option))
        print(table(reports[-1:]), flush=True)
    print(f"\n{args.data} {args.pair}, {args.minutes} minutes each ({args.budget} budget), beam {args.beams}, "
          f"{reports[0]['test_sentences']} test pairs\n")
    print(table(reports))
    summary = {"data": args.data, "pair": args.pair, "minutes": args.minutes, "budget": args.budget, "plan": plan,
               "sizes": sizes, "bf16": args.bf16, "dropout": args.dropout, "pre_ln": args.pre_ln,
               "threads": torch.get_num_threads(),
               "learning_rates": {o.model: o.lr for o in options},
               "rows": [{k: r[k] for k in ("model", "bleu", "bleu_precisions", "length_ratio", "train_seconds", "steps",
                                            "epochs", "parameters", "dev_loss", "test_sentences", "length_penalty")}
                        for r in reports]}
    (out / "comparison.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
