"""Training the sentence-embedding model you serve: m3e-small as it is against m3e-small fine-tuned on inews pairs,
and a tiny BERT without and with SimCSE. One table, the CPU named.

1. m3e-small as it is, scored on retrieval (inews: each test title searches all test bodies; MRR@10, nDCG@10,
   recall@10), bitext mining (bible: English / Chinese verses of the held-out books; hsk: Chinese / English
   sentences; F1 and accuracy, both ways) and clustering (thucnews: the 1,000 test headlines into their 10 classes;
   V-measure);
2. m3e-small fine-tuned on inews' training (title, body) pairs with in-batch negatives and one hard negative a
   pair (`bertkit mine-negatives --model m3e-small --data inews-pairs --max-positive-rank 100`: a body m3e-small
   ranks high for the title that is not its own, and pairs whose body it ranks below 100 left out as likely
   mislabelled; then `bertkit finetune --task embedding --train THAT_FILE --minutes M`: the steps that fit M
   minutes, the best dev checkpoint by MRR@10), scored on the same sets; `--no-mine` trains on the pairs alone;
3. the main job's tiny BERT (2 layers x 128, pretrained with the crammed recipe on THUCNews' training headlines:
   `--tiny-bert DIR` takes one already made, e.g. runs/demo/pretrain of `make run`; else it is pretrained here for
   --tiny-minutes), and the same BERT after unsupervised SimCSE on the same unlabelled training headlines
   (`--train thucnews-headlines`, --simcse-minutes), once with dropout's views and once with cropped views
   (`--crop 0.3 0.7`: each view a random span of 30-70% of the headline): clustering of the test headlines, whose
   labels none of them saw.

Every model is scored by `bertkit.pipelines.embedding.evaluate_embedding` (what `bertkit evaluate --task` runs), with
mean pooling and texts cut at --eval-max-length tokens.

    python benchmarks/bench_embedding.py --minutes 20 --out runs/bench-embedding          # the acceptance run
    python benchmarks/bench_embedding.py --minutes 0.3 --max-eval 100 --max-train 256 --dev-pairs 50 \\
        --tiny-minutes 0.3 --simcse-minutes 0.2 --out runs/bench-embedding-smoke --overwrite   # a minute or two
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from bertkit.data.embedding_data import inews_pairs
from bertkit.inference.loading import load_text_model
from bertkit.inference.machine import Machine, native_bfloat16
from bertkit.models.sentence_files import SentenceConfig
from bertkit.pipelines.embedding import evaluate_embedding, finetune_embedding
from bertkit.pipelines.hard_negatives import mine_negatives
from bertkit.pipelines.options import FinetuneOptions, MineOptions

# (task, data, the figures shown)
SUITE = (("retrieval", "inews", ("mrr@10", "ndcg@10", "recall@10")), ("bitext", "bible", ("f1", "accuracy")),
         ("bitext", "hsk", ("f1", "accuracy")), ("clustering", "thucnews", ("v_measure",)))


def write_pairs(rows, path: Path) -> str:
    path.write_text("".join("\t".join(" ".join(text.split()) for text in row.texts) + "\n" for row in rows),
                    encoding="utf-8")
    return str(path)


def score(model_dir: str | Path, suite, max_eval: int | None, max_length: int) -> dict[str, dict[str, Any]]:
    """`evaluate_embedding` of the model in `model_dir` on each (task, data) of `suite`, mean pooling."""
    model, tokenizer = load_text_model(model_dir, "evaluate")
    settings = SentenceConfig("mean", False, max_length)
    out = {}
    for task, data, _ in suite:
        started = time.perf_counter()
        with warnings.catch_warnings():  # inews bodies are cut at max_length: said here once, in the table's title
            warnings.simplefilter("ignore")
            out[f"{task} {data}"] = evaluate_embedding(model, tokenizer, task, data, settings=settings, limit=max_eval)
        out[f"{task} {data}"]["seconds"] = time.perf_counter() - started
    return out


def tiny_bert(args: argparse.Namespace, out: Path) -> Path:
    """The main job's tiny BERT: given (--tiny-bert), or pretrained here as `bertkit demo` pretrains it."""
    if args.tiny_bert:
        return Path(args.tiny_bert)
    from bertkit.pipelines.demo import build_demo_vocab, pretrain_options
    from bertkit.pipelines.options import DemoOptions
    from bertkit.pipelines.pretrain import pretrain

    vocab = build_demo_vocab(out / "tiny-vocab")
    demo = DemoOptions(out=str(out), progress=False)
    # the steps the minutes hold (the one budget rule); the clock stops it at the latest
    pretrain(replace(pretrain_options(demo, vocab, out / "tiny-bert"), max_steps=None, minutes=args.tiny_minutes))
    return out / "tiny-bert"


def table(rows: list[tuple[str, dict[str, dict[str, Any]]]], suite) -> str:
    head = ["model"] + [f"{task} {data} {metric}" for task, data, metrics in suite for metric in metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, scores in rows:
        cells = [name]
        for task, data, metrics in suite:
            found = scores.get(f"{task} {data}")
            cells += [f"{found[m]:.4f}" if found else "-" for m in metrics]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="m3e-small's fine-tuning budget (default: 20)")
    parser.add_argument("--out", default="runs/bench-embedding")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run in --out")
    parser.add_argument("--max-eval", type=int, help="score the first N queries / pairs / texts of each set only "
                                                      "(default: all)")
    parser.add_argument("--max-train", type=int, help="fine-tune on a seeded sample of N training pairs "
                                                       "(default: all 5,298)")
    parser.add_argument("--dev-pairs", type=int, help="pick the best checkpoint on the first N dev pairs "
                                                       "(default: all 993)")
    parser.add_argument("--batch-size", type=int, default=32, help="pairs per step: each anchor's negatives are "
                                                                   "the other 2 x (N - 1) + 1 texts (default: 32)")
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--no-mine", action="store_true", help="train on the pairs alone, without mined hard "
                                                                "negatives")
    parser.add_argument("--max-positive-rank", type=int, default=100, help="mining: leave out pairs whose body "
                                                                           "m3e-small ranks below this (default: 100)")
    parser.add_argument("--max-length", type=int, default=128, help="training tokens per text (default: 128)")
    parser.add_argument("--eval-max-length", type=int, default=128, help="tokens per text when scoring (default: "
                                                                         "128; inews bodies are cut there)")
    parser.add_argument("--tiny-bert", help="the main job's pretrained tiny BERT, e.g. runs/demo/pretrain (default: "
                                            "pretrain one here for --tiny-minutes)")
    parser.add_argument("--tiny-minutes", type=float, default=5.0, help="pretraining the tiny BERT (default: 5)")
    parser.add_argument("--simcse-minutes", type=float, default=3.0, help="SimCSE on the tiny BERT (default: 3)")
    parser.add_argument("--crop", type=float, nargs=2, default=[0.3, 0.7], metavar=("LOW", "HIGH"),
                        help="the cropped-views SimCSE row: the share of a headline each view keeps (default: "
                             "0.3 0.7)")
    parser.add_argument("--skip-tiny", action="store_true", help="leave the tiny BERT's rows out")
    parser.add_argument("--json", help="write every figure to this JSON file (default: OUT/results.json)")
    args = parser.parse_args()

    out = Path(args.out)
    if out.exists() and args.overwrite:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    machine = Machine.here()
    bf16 = native_bfloat16()
    print(f"CPU: {machine.describe()}; torch {torch.__version__}", flush=True)
    results: dict[str, Any] = {"machine": machine.describe(), "minutes": args.minutes, "arguments": vars(args)}
    rows = []

    started = time.perf_counter()
    as_is = score("m3e-small", SUITE, args.max_eval, args.eval_max_length)
    rows.append(("m3e-small as it is", as_is))
    print(f"m3e-small as it is scored in {time.perf_counter() - started:.0f} s", flush=True)

    # fine-tuning: dev (best checkpoint) and test (its own retrieval score, the same set as the suite's) as files
    # when cut to a subset, so that the run's test figures are the table's set
    dev = write_pairs(inews_pairs("dev")[:args.dev_pairs], out / "dev.tsv") if args.dev_pairs else None
    test = write_pairs(inews_pairs("test")[:args.max_eval], out / "test.tsv") if args.max_eval else None
    train = "inews-pairs"
    if not args.no_mine:
        started = time.perf_counter()
        mined = mine_negatives(MineOptions(model="m3e-small", data="inews-pairs", out=str(out / "inews-hard.tsv"),
                                           max_positive_rank=args.max_positive_rank, max_length=args.max_length,
                                           progress=False, overwrite=True))
        results["mined"] = mined
        train = mined["out"]
        dev = dev or write_pairs(inews_pairs("dev"), out / "dev.tsv")  # a file trains without the named splits
        test = test or write_pairs(inews_pairs("test"), out / "test.tsv")
        print(f"mined one hard negative for {mined['written']:,} of {mined['rows']:,} training pairs "
              f"({mined['dropped']:,} left out) in {time.perf_counter() - started:.0f} s", flush=True)
    started = time.perf_counter()
    run = finetune_embedding(FinetuneOptions(
        task="embedding", model="m3e-small", train=train, dev=dev, test=test, out=str(out / "m3e-inews"),
        minutes=args.minutes, batch_size=args.batch_size, learning_rate=args.learning_rate,
        max_length=args.max_length, max_train_examples=args.max_train, bf16=bf16, progress=False,
        overwrite=args.overwrite))
    took = time.perf_counter() - started
    results["finetune"] = run
    print(f"m3e-small fine-tuned on inews pairs: {run['steps']} steps, {run['train_seconds'] / 60:.1f} minutes "
          f"of training ({run['stop_reason']}), {took / 60:.1f} with its dev and test scoring", flush=True)
    rows.append((f"m3e-small + inews pairs{'' if args.no_mine else ' + hard negatives'} ({run['steps']} steps, "
                 f"{args.minutes:g} min)",
                 score(run["best_model"], SUITE, args.max_eval, args.eval_max_length)))

    if not args.skip_tiny:
        clustering = [entry for entry in SUITE if entry[0] == "clustering"]
        tiny = tiny_bert(args, out)
        rows.append(("tiny BERT (the main job's recipe)", score(tiny, clustering, args.max_eval,
                                                                args.eval_max_length)))
        # SimCSE twice, alike but for its views: dropout's copies of the whole headline (Gao et al.), and two random
        # spans of it (--crop, random cropping); 3 epochs of the headlines or the minutes, whichever is less
        for name, crop in (("simcse", None), ("simcse_crop", args.crop)):
            simcse = finetune_embedding(FinetuneOptions(
                task="embedding", model=str(tiny), train="thucnews-headlines", out=str(out / f"tiny-{name}"),
                minutes=args.simcse_minutes, batch_size=64, learning_rate=1e-4, max_length=48, pooling="mean",
                crop=crop, bf16=bf16, progress=False, overwrite=args.overwrite))
            results[name] = simcse
            views = f"views cropped to {crop[0]:g}-{crop[1]:g} of a headline" if crop else "dropout's views"
            rows.append((f"tiny BERT + SimCSE, {views} ({simcse['steps']} steps, {args.simcse_minutes:g} min)",
                         score(simcse["best_model"], clustering, args.max_eval, args.eval_max_length)))

    results["rows"] = {name: scores for name, scores in rows}
    subset = f"the first {args.max_eval} of each set" if args.max_eval else "every test example"
    print(f"\nCPU: {machine.describe()}; {subset}; mean pooling, texts cut at {args.eval_max_length} tokens\n")
    print(table(rows, SUITE))
    path = Path(args.json) if args.json else out / "results.json"
    path.write_text(json.dumps(results, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    print(f"\nevery figure in {path}")


if __name__ == "__main__":
    main()
