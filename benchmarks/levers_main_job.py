"""Which lever moves the main job's margin: pretrain the demo's tiny BERT (`--recipe crammed` with the demo's
objective, its corpus and vocabulary) for a FIXED number of steps, or a fixed number of minutes, with one change,
fine-tune it, and once its random-init twin, on 200 THUCNews labels x 3 seeds as the demo fine-tunes, and print the
margin. With --steps, one thread a run: the result does not depend on how busy the machine is (a lever that makes a
step dearer is then judged by its step time apart). With --minutes, equal time: run it as the slower machine would
(one thread, no bf16), and two side by side only when each has a core of its own.

    python benchmarks/levers_main_job.py --out runs/levers --steps 3000 \
        --variant base --variant mlm15:--mlm-probability=0.15 --variant mix:--general=1,--tapt=8
    ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI THREADS=1 python benchmarks/levers_main_job.py --out runs/levers \
        --minutes 3 --variant base --variant nsp:--objective=mlm+nsp

A variant is NAME:FLAG=VALUE,FLAG=VALUE (flags of `bertkit pretrain`). The corpus mix: --tapt=K weights the
training headlines K times, --general=N adds the general Chinese corpora ("zh") N times (the demo: the headlines
alone, --tapt=1 --general=0); --vocab=DIR pretrains (and fine-tunes) with another vocabulary. Each line is appended
to OUT/levers.log.
"""

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

BERTKIT = str(Path(sys.executable).with_name("bertkit"))
ENV = dict(os.environ, OMP_NUM_THREADS=os.environ.get("THREADS", "1"))


def sh(*argv: object) -> str:
    """Run a bertkit command; its stdout, or exit with its stderr's tail."""
    result = subprocess.run([BERTKIT, *map(str, argv)], env=ENV, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"failed: {' '.join(map(str, argv))}\n{result.stderr[-2000:]}")
    return result.stdout


def vocab(out: Path) -> Path:
    """The demo's character vocabulary, built once in OUT/vocab."""
    if not (out / "vocab" / "vocab.txt").exists():
        from bertkit.pipelines.demo import build_demo_vocab

        build_demo_vocab(out / "vocab")
    return out / "vocab"


def extra_vocab(extra: list[str], default: Path) -> Path:
    """The vocabulary a variant names with --vocab=DIR (taken out of its flags), else the demo's."""
    if "--vocab" not in extra:
        return default
    at = extra.index("--vocab")
    vocab_dir = Path(extra[at + 1])
    del extra[at:at + 2]
    return vocab_dir


def finetune(model: Path | str, out: Path, labels: int, seeds: int, random_init: bool = False,
             row: str = "bertkit-pretrained") -> list[float]:
    """Test accuracies of `seeds` fine-tuning runs on `labels` THUCNews headlines, as the demo fine-tunes `row`."""
    from bertkit.pipelines.demo_plan import ROW_SETTINGS, finetune_steps
    from bertkit.pipelines.options import native_bf16

    settings = ROW_SETTINGS[row]
    steps = finetune_steps(labels, settings.batch_size, 1.0)
    accuracies = []
    for seed in range(seeds):
        run = out / f"{'random' if random_init else 'pretrained'}-{labels}-{seed}"
        if not (run / "finetune_results.json").exists():
            sh("finetune", "--task", "classify", "--model", model, "--train", "thucnews", "--out", run,
               "--max-train-examples", labels, "--max-steps", steps, "--batch-size", settings.batch_size,
               "--learning-rate", settings.learning_rate,
               "--warmup-ratio", 0.1, "--max-length", 64, "--keep-last", "--seed", 42 + seed, "--no-progress",
               *(["--random-init"] if random_init else []), *(["--bf16"] if settings.bf16 and native_bf16() else []),
               "--overwrite")
        accuracies.append(json.loads((run / "finetune_results.json").read_text())["test_accuracy"])
    return accuracies


def final_mlm_accuracy(run: Path) -> float:
    """A pretraining run's last held-out masked-LM accuracy (metrics.jsonl)."""
    evals = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [e["eval_mlm_accuracy"] for e in evals if "eval_mlm_accuracy" in e][-1]


def margin_line(name: str, steps: object, labels: int, mlm: float, ours: tuple[str, list[float]],
                base: tuple[str, list[float]]) -> str:
    """One result line: the two rows' test accuracies over seeds (mean ± stdev) and ours - base in points."""
    (ours_name, a), (base_name, b) = ours, base
    return (f"{name:<14} steps {steps}  labels {labels:>4}  mlm {mlm:.4f}  {ours_name} {statistics.mean(a):.3f} ± "
            f"{statistics.stdev(a):.3f}  {base_name} {statistics.mean(b):.3f} ± {statistics.stdev(b):.3f}  "
            f"margin {100 * (statistics.mean(a) - statistics.mean(b)):+.1f}  {a}")


def record(out: Path, line: str) -> None:
    """Print a result line and append it to OUT/levers.log."""
    print(line, flush=True)
    with open(out / "levers.log", "a") as f:
        f.write(line + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=6300)
    parser.add_argument("--minutes", type=float, default=None,
                        help="instead of --steps: a wall-clock budget per run (equal time, not equal steps; run "
                             "levers side by side only when each has its own core)")
    parser.add_argument("--variant", action="append", default=[], help="name:flag=value,flag=value")
    parser.add_argument("--labels", type=int, nargs="+", default=[200])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from bertkit.pipelines.demo import PRETRAIN

    v = vocab(args.out)
    for spec in args.variant:
        name, _, flags = spec.partition(":")
        extra = [part for flag in flags.split(",") if flag for part in flag.split("=", 1)]
        mix = {"--tapt": 1, "--general": 0}  # the demo's: the training headlines alone
        for flag in mix:
            if flag in extra:
                mix[flag] = int(extra[extra.index(flag) + 1])
                del extra[extra.index(flag):extra.index(flag) + 2]
        corpus = ["zh"] * mix["--general"] + ["thucnews-train"] * mix["--tapt"]
        demo = [part for key, value in PRETRAIN.items() if f"--{key.replace('_', '-')}" not in extra
                for part in (f"--{key.replace('_', '-')}", value)]
        budget = f"{args.minutes:g}min" if args.minutes else str(args.steps)
        run = args.out / f"{name}-{budget}"
        if not (run / "train_results.json").exists():
            sh("pretrain", "--recipe", "crammed", "--corpus", *corpus, "--vocab", extra_vocab(extra, v), "--config",
               "tiny", *(["--minutes", args.minutes] if args.minutes else ["--max-steps", args.steps]),
               "--out", run, "--no-progress", "--overwrite", *demo, *extra)
        mlm = final_mlm_accuracy(run)
        steps = json.loads((run / "train_results.json").read_text())["step"] if args.minutes else args.steps
        for labels in args.labels:
            pre = finetune(run, args.out / f"ft-{name}-{budget}", labels, 3)
            # the random-init twin has the run's architecture: one per distinct config.json
            shape = hashlib.sha256((run / "config.json").read_bytes()).hexdigest()[:8]
            rnd = finetune(run, args.out / f"ft-random-{labels}-{shape}", labels, 3, random_init=True)
            record(args.out, margin_line(name, steps, labels, mlm, ("pretrained", pre), ("random", rnd)))


if __name__ == "__main__":
    main()
