"""`bertkit pretrain`, `bertkit finetune` and `bertkit demo` (the main job).

Their flags are generated from the options dataclasses (`bertkit.pipelines.options`) by `bertkit.cli.options`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bertkit.cli.common import add_command
from bertkit.cli.options import add_options, given_options, missing_flags, options_from_args
from bertkit.data.task_kinds import FILE_FORMATS, get_task
from bertkit.errors import InputError
from bertkit.pipelines.options import DemoOptions, FinetuneOptions, PretrainOptions, recipe_values
from bertkit.pipelines.presets import PRETRAIN_RECIPE_NAMES

# ---- pretrain ------------------------------------------------------------------------------------

def _add_pretrain(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "pretrain", _cmd_pretrain)
    p.add_argument("--resume", metavar="OUT", help="continue the run in OUT (wherever it now is) from its newest "
                                                   "checkpoint, with the options it was started with (default: a "
                                                   "new run)")
    p.add_argument("--recipe", choices=PRETRAIN_RECIPE_NAMES,
                   help="the values the other options start from: bert (BERT's own, the defaults shown below) or "
                        "crammed (fastest to a good model on a CPU; docs/pretraining-recipe.md); a flag typed "
                        "beside it wins (default: bert)")
    add_options(p, PretrainOptions, required="required, unless --resume")


def _cmd_pretrain(args: argparse.Namespace) -> int:
    """pretrain BERT (masked LM + NSP/SOP, RoBERTa/ALBERT variants) on a corpus

    Pretrain BERT on text files or named corpora. Runs under torchrun as data parallel; `--resume OUT`
    continues a killed run exactly.
    """
    from bertkit.pipelines.pretrain import pretrain, resume_pretraining
    from bertkit.training.checkpointing import RESULTS_NAME
    from bertkit.training.distributed import process_rank
    from bertkit.utils import jsonfiles

    if args.resume:
        if args.recipe:
            raise InputError("--recipe starts a new run; --resume continues one with the options it was started with")
        state = resume_pretraining(args.resume, given_options(PretrainOptions, args))
        out = args.resume
    else:
        missing = missing_flags(PretrainOptions, args)
        if getattr(args, "vocab", None) is None and getattr(args, "init", None) is None:
            missing.insert(min(1, len(missing)), "--vocab (or --init MODEL)")
        if missing:
            raise InputError(f"give {', '.join(missing)} (or --resume OUT)")
        # a run that continues an --init model keeps its size: the recipe's gives way
        recipe = recipe_values(args.recipe or "bert", init=getattr(args, "init", None),
                               device=getattr(args, "device", None) or "auto")
        options = options_from_args(PretrainOptions, args, base=recipe)
        state = pretrain(options, say=lambda line: print(line, flush=True) if process_rank() == 0 else None)
        out = options.out
    if process_rank() == 0:
        last = state.log_history[-1] if state.log_history else {}
        evals = held_out_figures(last)
        loss = f"last loss {state.losses[-1]:.4f}" if state.losses else "no steps were left to train"
        planned = jsonfiles.loads((Path(out) / RESULTS_NAME).read_text()).get("total_steps", state.step)
        steps = f"{state.step} steps" if planned == state.step else f"{state.step} of {planned} planned steps"
        print(f"pretrained {steps} in {state.seconds:.0f} s ({state.stop_reason}); {loss}"
              + (f"; {evals}" if evals else ""))
        print(f"model, tokenizer and metrics.jsonl in {out}")
    return 0


def held_out_figures(last: dict) -> str:
    """The last evaluation's figures, each accuracy with its support: "mlm_accuracy 0.4120 (480 predictions)"."""
    from bertkit.data.pretraining.run_data import MIN_PAIRS

    support = {"mlm_accuracy": ("mlm_predictions", "predictions"), "nsp_accuracy": ("nsp_pairs", "pairs")}
    counts = {count for count, _ in support.values()}
    parts = []
    for key, value in last.items():
        name = key.removeprefix("eval_")
        if name == key or name in counts:
            continue
        count, what = support.get(name, ("", ""))
        shown = f" ({int(last['eval_' + count]):,} {what})" if f"eval_{count}" in last else ""
        parts.append(f"{name} {value:.4f}{shown}")
    if "eval_nsp_pairs" in last and "eval_nsp_accuracy" not in last:
        parts.append(f"nsp_accuracy not reported ({int(last['eval_nsp_pairs'])} held-out pairs, fewer than "
                     f"{MIN_PAIRS}: hold out more documents)")
    return ", ".join(parts)


# ---- finetune ------------------------------------------------------------------------------------

def _add_finetune(sub: argparse._SubParsersAction) -> None:
    add_options(add_command(sub, "finetune", _cmd_finetune, epilog="files:\n" + FILE_FORMATS,
                            formatter_class=argparse.RawDescriptionHelpFormatter), FinetuneOptions)


def _cmd_finetune(args: argparse.Namespace) -> int:
    """fine-tune BERT for classification, sentence pairs, NER, extractive question answering or sentence vectors

    Fine-tune a model directory or model name on a named dataset or your files;
    keeps the best dev checkpoint in OUT/best and scores it on test. --task embedding trains sentence vectors
    (pairs: InfoNCE with in-batch negatives; scored pairs: CoSENT; plain text: SimCSE; docs/embeddings.md).
    """
    options = options_from_args(FinetuneOptions, args)
    task = get_task(options.task)  # the task's record (bertkit.tasks): its run and its report
    for line in task.report(task.train(options)):
        print(line)
    return 0


# ---- demo ----------------------------------------------------------------------------------------

def _add_demo(sub: argparse._SubParsersAction) -> None:
    add_options(add_command(sub, "demo", _cmd_demo), DemoOptions)


def _cmd_demo(args: argparse.Namespace) -> int:
    """the main job: pretrain a small BERT, fine-tune at several label budgets, compare (make run)

    Fetch the built-in Chinese data, time each kind of work on this machine and plan the job to fit --minutes,
    pretrain a small BERT on the task's unlabelled text and continue pretraining m3e-small on it, then fine-tune
    both, the tiny BERT's random-init twin and a cloze prompt on 50 to all labelled examples, and compare them on
    the same test split.
    """
    from bertkit.pipelines.demo import OUTPUTS, run_demo
    from bertkit.pipelines.demo_report import headline_rests, margin_line, table
    from bertkit.pipelines.run_directory import run_directory
    from bertkit.utils.devices import resolve_device

    options = options_from_args(DemoOptions, args)
    resolve_device(options.device)  # a GPU this machine lacks is refused before anything is fetched or written
    with run_directory(options.out, "bertkit demo", overwrite=options.overwrite, also=OUTPUTS):
        report = run_demo(options, say=lambda line: print(line, flush=True))
    print()
    print(table(report["rows"], report.get("zero_shot"), report["not_run"]))
    print(f"\npretraining vs random initialisation, points of test accuracy: {margin_line(report['rows'])}")
    print(f"report: {Path(options.out) / 'report.md'} (also report.json, label_curve.png, checkpoints) "
          f"- {report['total_seconds'] / 60:.1f} minutes")
    unanswered = headline_rests(report)
    if unanswered is not None:  # the rows the job's question rests on: without them it did not do its job
        print(f"bertkit demo: the job's question has no answer on this machine in {options.minutes:g} minutes: "
              f"{unanswered}; give it more --minutes, or run it when the machine is less busy", file=sys.stderr)
        return 1
    return 0
