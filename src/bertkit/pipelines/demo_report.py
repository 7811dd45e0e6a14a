"""The main job's report: the table (mean ± std over seeds), the margins, the pictures, report.md.

Everything here reads the report the job assembled (`bertkit.pipelines.demo.run_demo`), so a report can be
written again, or tested, without training anything.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from bertkit.pipelines.demo_plan import ROWS


def summary(row: str, labels: int, results: list[dict]) -> dict[str, Any]:
    """One cell of the table: a row's fine-tuning runs at one label budget, over their seeds."""
    accuracies = [r["test_accuracy"] for r in results]
    return {"model": row, "labels": labels or results[0]["train_examples"],
            "test_accuracy": statistics.mean(accuracies),
            "test_accuracy_std": statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0,
            "seeds": len(results), "train_seconds": statistics.mean(r["train_seconds"] for r in results),
            "steps": results[0]["steps"], "test_accuracies": accuracies}


def table(rows: list[dict[str, Any]], zero_shot: dict[str, Any] | None = None) -> str:
    """The comparison as a Markdown table, a row per label budget (also what `bertkit demo` prints); with
    `zero_shot`, a first one at 0 labels where only the prompt answers, untrained, beside chance."""
    budgets = sorted({r["labels"] for r in rows})
    cells = {(r["labels"], r["model"]): r for r in rows}
    lines = ["| labels | " + " | ".join(ROWS) + " |", "|---|" + "---|" * len(ROWS)]
    if zero_shot is not None:  # a classifier on [CLS] with no labels has no head to answer with: a dash
        shown = f"{zero_shot['test_accuracy']:.3f} zero-shot (chance {zero_shot['chance']:.3f})"
        lines.append("| 0 | " + " | ".join(shown if m == "prompt" else "–" for m in ROWS) + " |")
    for n in budgets:
        row = [f"{cells[n, m]['test_accuracy']:.3f} ± {cells[n, m]['test_accuracy_std']:.3f}"
               if cells[n, m]["seeds"] > 1 else f"{cells[n, m]['test_accuracy']:.3f}" for m in ROWS]
        lines.append(f"| {n:,} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def margins(rows: list[dict[str, Any]], better: str = "bertkit-pretrained", worse: str = "random-init") -> dict:
    """Points of mean test accuracy `better` gains over `worse`, per label budget."""
    cells = {(r["labels"], r["model"]): r["test_accuracy"] for r in rows}
    return {n: 100 * (cells[n, better] - cells[n, worse]) for n in sorted({r["labels"] for r in rows})}


def write_pictures(out: Path, report: dict[str, Any], title: str) -> None:
    """pretrain_curves.png, label_curve.png (accuracy against labels, mean ± std) and loss_curves.png."""
    from bertkit.pictures import figures

    figures.save_figure(figures.training_curves(out / "pretrain" / "metrics.jsonl", title="pretraining"),
                        out / "pretrain_curves.png")
    budgets = sorted({r["labels"] for r in report["rows"]})
    by_row = {row: {r["labels"]: r for r in report["rows"] if r["model"] == row} for row in ROWS}
    fig = figures.line_plot(budgets, {row: [by_row[row][n]["test_accuracy"] if n in by_row[row] else None
                                            for n in budgets] for row in ROWS},
                            xlabel="labelled training examples", ylabel="test accuracy", logx=True,
                            errors={row: [by_row[row][n]["test_accuracy_std"] if n in by_row[row] else 0.0
                                          for n in budgets] for row in ROWS},
                            title=f"{title}: when pretraining pays")
    figures.save_figure(fig, out / "label_curve.png")
    largest = report["largest_budget"]
    runs = {row: out / "finetune" / f"{row}-{largest or 'all'}-seed0" for row in ROWS}
    fig = figures.compare_runs(runs, "loss", title=f"fine-tuning with {largest or 'all'} labels: training loss")
    figures.save_figure(fig, out / "loss_curves.png")


def _gains(rows: list[dict[str, Any]], better: str, worse: str) -> str:
    return ", ".join(f"{n:,} labels {g:+.1f}" for n, g in margins(rows, better, worse).items())


def _zero_shot_line(report: dict[str, Any]) -> str:
    zero_shot = report.get("zero_shot")  # a report written before the zero-shot row has none
    if zero_shot is None:
        return ""
    fewest = min((r for r in report["rows"] if r["model"] == "prompt"), key=lambda r: r["labels"], default=None)
    then = (f"; fine-tuned on {fewest['labels']:,} labels, {fewest['test_accuracy']:.3f}" if fewest is not None
            else "")
    return (f"\nThe prompt with no labels and no training: {zero_shot['test_accuracy']:.3f} on the "
            f"{zero_shot['examples']:,} test examples, against chance {zero_shot['chance']:.3f}{then}.")


def plan_table(report: dict[str, Any]) -> str:
    """The plan against what happened: each stage's expected and actual minutes (and steps where it has them)."""
    plan, took = report["plan"], report["stage_seconds"]
    lines = ["| stage | planned | took |", "|---|---|---|"]
    for name, seconds in plan["stages"].items():
        lines.append(f"| {name} | {seconds / 60:.1f} min | {took.get(name, 0.0) / 60:.1f} min |")
    lines.append(f"| **the whole job** | {plan['expected_seconds'] / 60:.1f} min | {report['total_seconds'] / 60:.1f} "
                 "min |")
    return "\n".join(lines)


def report_markdown(report: dict[str, Any], what: str, prompt: str, seeds: int) -> str:
    """report.md: the table, what each row is, the margins, the plan and the pictures."""
    pre, tapt, plan = report["pretraining"], report["tapt"], report["plan"]
    curve = ", ".join(f"{e['step']}: {e['eval_mlm_accuracy']:.3f}" for e in pre["eval"])
    tapt_curve = ", ".join(f"{e['step']}: {e['eval_mlm_accuracy']:.3f}" for e in tapt["eval"])
    corpus = ", ".join(f"{name} x{weight}" if weight > 1 else name for name, weight in pre["corpus"].items())
    scaled = (f" On this machine the plan ran m3e-small's fine-tuning and continued pretraining at "
              f"{plan['m3e_scale']:.0%} of their full steps, and its runs above 200 labels with one seed, so that the "
              "tiny BERT's pretraining kept its share of the budget." if plan["m3e_scale"] < 1 else "")
    return f"""# bertkit demo: when does pretraining pay?

{what} (`bertkit data show {report['task']}`). Each cell is the test accuracy of a model fine-tuned on that
many labelled training examples (a stratified subset; the smaller subsets of a seed lie inside the larger ones),
the mean ± standard deviation over up to {seeds} seeds where there is more than one. Every run trains the number
of steps the plan gave its budget and is scored after its last step: no run looks at dev labels.

{table(report['rows'], report.get('zero_shot'))}

- **bertkit-pretrained**: the {pre['config']} BERT pretrained here ({pre['recipe']} recipe), a classifier on its [CLS]
  vector;
- **random-init**: the same architecture from random weights, the same steps;
- **m3e-small**: a real pretrained Chinese BERT (4 layers, hidden 512), fine-tuned the same way;
- **m3e-small-tapt**: m3e-small after task-adaptive pretraining (masked LM on the unlabelled training texts
  alone, `bertkit pretrain --init m3e-small`), then fine-tuned exactly as m3e-small;
- **prompt**: the pretrained BERT reading the label off its masked-LM head through the cloze template
  `{prompt}`, fine-tuned through that head; at 0 labels, **zero-shot**: the same head and template as pretraining
  left them, no training at all (`bertkit predict --zero-shot`), beside chance (1 / the number of classes).

Pretraining over random initialisation, in points of test accuracy: {_gains(report['rows'], 'bertkit-pretrained',
                                                                             'random-init')}.
The prompt over plain fine-tuning of the same pretrained model: {_gains(report['rows'], 'prompt',
                                                                        'bertkit-pretrained')}.
Task-adaptive pretraining of m3e-small over m3e-small as it is: {_gains(report['rows'], 'm3e-small-tapt',
                                                                        'm3e-small')}.{_zero_shot_line(report)}

![test accuracy against labelled examples](label_curve.png)

## The plan and the machine

Machine: {plan['machine']}. The job timed each kind of its work here first and sized every stage to fit its
{plan['budget_seconds'] / 60:.1f}-minute budget.{scaled}

{plan_table(report)}

Pretraining: {pre['steps']:,} steps in {pre['seconds']:.0f} s (planned {plan['pretrain_steps']:,}) on {corpus};
held-out masked-LM accuracy by step: {curve}.

Task-adaptive pretraining of m3e-small: {tapt['steps']} steps in {tapt['seconds']:.0f} s on the unlabelled
training texts alone (batches of {tapt['batch_size']}, {100 * tapt['mlm_probability']:.0f}% of the tokens masked,
learning rate {tapt['learning_rate']:g}; the encoder held for the first {tapt['frozen_steps']} steps while the
fresh masked-LM head learns); held-out masked-LM accuracy by step: {tapt_curve}.

![pretraining curves](pretrain_curves.png)
![fine-tuning loss](loss_curves.png)

Whole job: {report['total_seconds'] / 60:.1f} minutes.
"""
