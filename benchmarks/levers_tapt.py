"""Does task-adaptive pretraining pay for m3e-small in the main job, and which lever moves it: continue pretraining
m3e-small (`bertkit pretrain --init m3e-small`) on the unlabelled THUCNews training headlines only, for a FIXED number
of steps with one change, fine-tune the result exactly as the demo fine-tunes m3e-small (3 seeds per budget), and
print the margin over plain m3e-small fine-tuned the same way.

    python benchmarks/levers_tapt.py --out runs/tapt --steps 600 \
        --variant base --variant lr5e-5:--learning-rate=5e-5 --variant mlm30:--mlm-probability=0.3

A variant is NAME:FLAG=VALUE,FLAG=VALUE (flags of `bertkit pretrain`, which override the base flags below), and
--hold=PREFIX+PREFIX holds the parameters under those name prefixes for the whole run (which layers move), e.g.
`--variant top2:--mlm-probability=0.3,--hold=bert.embeddings.+bert.encoder.layer.0.+bert.encoder.layer.1.`.
Steps, not minutes: THREADS=1 (the default) runs every command on one thread, so two variants can run side by side.
Each line is appended to OUT/levers.log.
"""

import argparse
import os
from pathlib import Path

from levers_main_job import final_mlm_accuracy, finetune, margin_line, record, sh

# What every variant starts from: masked LM alone (a headline is a one-sentence document), the demo's fine-tuning
# length, m3e-small's own fine-tuning learning rate.
BASE = {"--objective": "mlm", "--max-seq-length": "64", "--batch-size": "32", "--learning-rate": "1e-4"}


def pretrain_holding(hold: tuple[str, ...], argv: list[str]) -> None:
    """`bertkit pretrain ARGV` in this process, the parameters under the `hold` prefixes held for the whole run
    (TrainingArguments' freeze; the command line holds the encoder only for its first --freeze-encoder-steps)."""
    import torch

    from bertkit.cli import main as bertkit
    from bertkit.pipelines.options import PretrainOptions

    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    arguments = PretrainOptions.training_arguments

    def holding(self, max_steps, **settings):
        return arguments(self, max_steps, **{**settings, "freeze": hold, "freeze_steps": max_steps})

    PretrainOptions.training_arguments = holding
    try:
        if bertkit(["pretrain", *map(str, argv)]):
            raise SystemExit(f"failed: bertkit pretrain {' '.join(map(str, argv))}")
    finally:
        PretrainOptions.training_arguments = arguments


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--variant", action="append", default=[], help="name:flag=value,flag=value")
    parser.add_argument("--labels", type=int, nargs="+", default=[50, 200])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from bertkit.pipelines.options import native_bf16

    for spec in args.variant:
        name, _, flags = spec.partition(":")
        extra = dict(flag.split("=", 1) if "=" in flag else (flag, None) for flag in flags.split(",") if flag)
        hold = tuple(extra.pop("--hold").split("+")) if "--hold" in extra else ()
        settings = {**BASE, **extra}
        run = args.out / f"{name}-{args.steps}"
        if not (run / "train_results.json").exists():
            argv = ["--init", "m3e-small", "--corpus", "thucnews-train", "--max-steps", args.steps, "--out", run,
                    "--no-progress", "--overwrite", *(["--bf16"] if native_bf16() else []),
                    *[part for flag, value in settings.items() for part in (flag, value) if part is not None]]
            if hold:
                pretrain_holding(hold, argv)
            else:
                sh("pretrain", *argv)
        mlm = final_mlm_accuracy(run)
        for labels in args.labels:
            tapt = finetune(run, args.out / f"ft-{name}-{args.steps}", labels, 3, row="m3e-small")
            plain = finetune("m3e-small", args.out / "ft-plain", labels, 3, row="m3e-small")
            record(args.out, margin_line(name, args.steps, labels, mlm, ("tapt", tapt), ("plain", plain)))


if __name__ == "__main__":
    main()
