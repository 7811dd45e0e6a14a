"""fp32 training steps as a CPU without native bf16 runs them: the main job's two kinds of step, each as it trains
today (eager) against what might make it faster, alternating in one process, and the ratio.

- `tiny`: the demo's pretraining step of its tiny BERT (the crammed recipe, masked LM on the training headlines,
  batches of 32 of like lengths, the demo's character vocabulary), on seven batches from short to long;
- `m3e`: a fine-tuning step of m3e-small on 16 THUCNews headlines (a classifier on [CLS]), four batch lengths;
- `tapt`: the demo's continued-pretraining step of m3e-small (masked LM on the training headlines, 30% masked,
  batches of 32) while its encoder is held: `dropped` computes the encoder's gradients and drops them (the trainer
  before held steps skipped the backward), `held` lets autograd skip them (the trainer now, outside DDP).

Variants: `eager` (the trainer's step), `compile` (torch.compile, the Inductor CPU backend, dynamic shapes; its
compilation time is printed apart, since the main job would pay it out of its budget), `threads=N` (eager with N
threads); for `tapt`, `dropped` and `held`. bf16 is off throughout. Run it as the slower machine would (one thread,
no bf16):

    ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_fp32_step.py
    .venv/bin/python benchmarks/bench_fp32_step.py --variants eager compile threads=1 --rounds 5
    .venv/bin/python benchmarks/bench_fp32_step.py --models tapt --variants dropped held
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

import torch


def tiny_pretraining(vocab_dir: Path):
    """The demo's tiny BERT pretraining run: its model and seven timing batches, short to long."""
    from bertkit.pipelines.demo import DEMO_TASKS, PRETRAIN
    from bertkit.pipelines.options import recipe_options
    from bertkit.pipelines.pretrain import prepare
    from bertkit.training.budget import timing_batches

    options = recipe_options("crammed", corpus=[DEMO_TASKS["thucnews"].corpus], vocab=str(vocab_dir),
                             out=str(vocab_dir.parent / "run"), config="tiny", max_steps=1, bf16=False,
                             progress=False, **PRETRAIN)
    run = prepare(options)
    return run.model, timing_batches(run.data.train_dataset, run.data.collator, run.options.batch_size,
                                     run.options.group_by_length)[0]


def m3e_finetuning():
    """m3e-small with a fresh 10-class classifier, and batches of 16 headlines at four lengths."""
    from bertkit.data.sources import model_dir
    from bertkit.data.tasks import thucnews_headlines
    from bertkit.models.bert.heads import BertForSequenceClassification
    from bertkit.tokenizer import BertTokenizer

    directory = model_dir("m3e-small")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fresh classifier, config keys bertkit does not use
        model = BertForSequenceClassification.from_pretrained(directory, id2label={i: str(i) for i in range(10)})
    tokenizer = BertTokenizer.from_pretrained(directory)
    titles = sorted((title for _, title in thucnews_headlines()[:2000]), key=len)
    batches = []
    for q in (0.2, 0.4, 0.6, 0.8):
        chunk = titles[int(q * len(titles)):int(q * len(titles)) + 16]
        batch = dict(tokenizer(chunk, padding=True, truncation=True, max_length=64, return_tensors="pt"))
        batch["labels"] = torch.arange(16) % 10
        batches.append(batch)
    return model, batches


def tapt_pretraining(vocab_dir: Path):
    """The demo's continued pretraining of m3e-small: its model (a fresh masked-LM head) and timing batches."""
    from bertkit.pipelines.demo import tapt_options
    from bertkit.pipelines.options import DemoOptions
    from bertkit.pipelines.pretrain import prepare
    from bertkit.training.budget import timing_batches

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fresh head, config keys bertkit does not use
        run = prepare(replace(tapt_options(DemoOptions(bf16=False, progress=False), vocab_dir.parent / "tapt"),
                              bf16=False))
    return run.model, timing_batches(run.data.train_dataset, run.data.collator, run.options.batch_size,
                                     run.options.group_by_length)[0]


def stepper(model, variant: str):
    from bertkit.training.schedule import build_optimizer

    model = copy.deepcopy(model).train()
    optimizer = build_optimizer(model, 1e-5, 0.01)
    forward = torch.compile(model, dynamic=True) if variant == "compile" else model
    encoder = [p for name, p in model.named_parameters() if name.startswith("bert.")]

    def step(batch):
        if variant == "held":
            for p in encoder:
                p.requires_grad_(False)
        loss = forward(**batch).loss
        loss.backward()
        if variant in ("held", "dropped"):
            for p in encoder:
                p.grad = None
                p.requires_grad_(True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "m3e"], choices=["tiny", "m3e", "tapt"])
    parser.add_argument("--variants", nargs="+", default=["eager", "compile"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--passes", type=int, default=3, help="passes over the batches per variant per round")
    args = parser.parse_args()
    from bertkit.inference.machine import Machine

    default_threads = torch.get_num_threads()
    print(f"machine: {Machine.here().describe()}")
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.models:
            if name == "tiny":
                from bertkit.pipelines.demo import build_demo_vocab

                model, batches = tiny_pretraining(build_demo_vocab(Path(scratch) / "vocab"))
            elif name == "tapt":
                model, batches = tapt_pretraining(Path(scratch) / "vocab")
            else:
                model, batches = m3e_finetuning()
            steps, times = {}, {v: [] for v in args.variants}
            for variant in args.variants:
                start = time.perf_counter()
                steps[variant] = stepper(model, variant)
                for batch in batches:  # warm up: every shape once (compiles, for `compile`)
                    steps[variant](batch)
                print(f"{name} {variant}: set-up and a first pass {time.perf_counter() - start:.1f} s", flush=True)
            for _ in range(args.rounds):
                for variant in args.variants:
                    threads = int(variant.split("=")[1]) if variant.startswith("threads=") else default_threads
                    torch.set_num_threads(threads)
                    start = time.perf_counter()
                    for _ in range(args.passes):
                        for batch in batches:
                            steps[variant](batch)
                    times[variant].append((time.perf_counter() - start) / (args.passes * len(batches)))
                    torch.set_num_threads(default_threads)
            base = statistics.median(times[args.variants[0]])
            for variant in args.variants:
                median = statistics.median(times[variant])
                print(f"{name} {variant:<10} {1 / median:7.2f} steps/s  ({1000 * median:.1f} ms a step, "
                      f"min {1000 * min(times[variant]):.1f}, max {1000 * max(times[variant]):.1f})  "
                      f"{base / median:.2f}x {args.variants[0]}", flush=True)


if __name__ == "__main__":
    main()
