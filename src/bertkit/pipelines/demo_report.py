"""The main job's report: the table (mean ± std over seeds), the margins, the pictures, report.md.

Everything here reads the report the job assembled (`bertkit.pipelines.demo.run_demo`), so a report can be
written again, or tested, without training anything.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from bertkit.pipelines.demo_plan import ROWS, ZERO_SHOT_ROW


def summary(row: str, labels: int, results: list[dict]) -> dict[str, Any]:
    """One cell of the table: a row's fine-tuning runs at one label budget, over their seeds."""
    accuracies = [r["test_accuracy"] for r in results]
    return {"model": row, "labels": labels or results[0]["train_examples"],
            "test_accuracy": statistics.mean(accuracies),
            "test_accuracy_std": statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0,
            "seeds": len(results), "train_seconds": statistics.mean(r["train_seconds"] for r in results),
            "steps": results[0]["steps"], "test_accuracies": accuracies}


def table(rows: list[dict[str, Any]], zero_shot: dict[str, Any] | None = None,
          not_run: list[dict[str, Any]] = ()) -> str:
    """The comparison as a Markdown table, a row per label budget (also what `bertkit demo` prints); with
    `zero_shot`, a first one at 0 labels where only the prompt answers, untrained, beside chance. A cell in
    `not_run` (`NotRun.to_json()`, its labels None for every budget) reads "not run": the report says why."""
    closed = {(n["row"], n["labels"]) for n in not_run}
    budgets = sorted({r["labels"] for r in rows} | {n for _, n in closed if n is not None})
    cells = {(r["labels"], r["model"]): r for r in rows}

    def cell(n: int, m: str) -> str:
        found = cells.get((n, m))
        if found is None:
            return "not run" if (m, n) in closed or (m, None) in closed else "–"
        return (f"{found['test_accuracy']:.3f} ± {found['test_accuracy_std']:.3f}" if found["seeds"] > 1
                else f"{found['test_accuracy']:.3f}")

    lines = ["| labels | " + " | ".join(ROWS) + " |", "|---|" + "---|" * len(ROWS)]
    if zero_shot is not None:  # a classifier on [CLS] with no labels has no head to answer with: a dash
        shown = f"{zero_shot['test_accuracy']:.3f} zero-shot (chance {zero_shot['chance']:.3f})"
        lines.append("| 0 | " + " | ".join(shown if m == "prompt" else "–" for m in ROWS) + " |")
    elif any(n["row"] == ZERO_SHOT_ROW for n in not_run):
        lines.append("| 0 | " + " | ".join("zero-shot not run" if m == "prompt" else "–" for m in ROWS) + " |")
    for n in budgets:
        lines.append(f"| {n:,} | " + " | ".join(cell(n, m) for m in ROWS) + " |")
    return "\n".join(lines)


def margins(rows: list[dict[str, Any]], better: str = "bertkit-pretrained", worse: str = "random-init") -> dict:
    """Points of mean test accuracy `better` gains over `worse`, at each label budget where both ran."""
    cells = {(r["labels"], r["model"]): r["test_accuracy"] for r in rows}
    return {n: 100 * (cells[n, better] - cells[n, worse]) for n in sorted({r["labels"] for r in rows})
            if (n, better) in cells and (n, worse) in cells}


def margin_line(rows: list[dict[str, Any]], better: str = "bertkit-pretrained", worse: str = "random-init") -> str:
    """The margins of `better` over `worse` and the runs they rest on: "50 labels +29.3, ... (both rows run at 50,
    200 ...)", or that there is none, and which row is missing."""
    gains = margins(rows, better, worse)
    if not gains:
        ran = {r["model"] for r in rows}
        missing = " and ".join(m for m in (better, worse) if m not in ran) or f"{better} and {worse} at one budget"
        return f"not measured: {missing} did not run (see what was not run)"
    said = ", ".join(f"{n:,} labels {g:+.1f}" for n, g in gains.items())
    alone = sorted({r["labels"] for r in rows if r["model"] in (better, worse)} - set(gains))
    if alone:
        said += f" (none at {', '.join(f'{n:,}' for n in alone)} labels, where one of the two did not run)"
    return said


def headline_rests(report: dict[str, Any]) -> str | None:
    """Why the job's question has no answer, or None: the tiny BERT's pretraining fell below its floor (so none of
    its rows ran), or no label budget has both the pretrained row and its random-init twin. A budget left out for
    time while others have both is said in the report, and the job still answers at those."""
    missing = [n for n in report.get("not_run", ()) if n["row"] in ("bertkit-pretrained", "random-init")]
    starved = next((n for n in missing if n["labels"] is None), None)
    if starved is None and (margins(report["rows"]) or not missing):
        return None
    first = starved or missing[0]
    where = "" if first["labels"] is None else f" at {first['labels']:,} labels"
    return f"{first['row']}{where}: {first['why']}"


def write_pictures(out: Path, report: dict[str, Any], title: str) -> None:
    """pretrain_curves.png, label_curve.png (accuracy against labels, mean ± std) and loss_curves.png."""
    from bertkit.pictures import figures

    figures.save_figure(figures.training_curves(out / "pretrain" / "metrics.jsonl", title="pretraining"),
                        out / "pretrain_curves.png")
    budgets = sorted({r["labels"] for r in report["rows"]})
    if not budgets:  # no fine-tuning run: no curve to draw
        return
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
    runs = {row: path for row, path in runs.items() if (path / "metrics.jsonl").is_file()}  # rows not run: none
    if not runs:
        return
    fig = figures.compare_runs(runs, "loss", title=f"fine-tuning with {largest or 'all'} labels: training loss")
    figures.save_figure(fig, out / "loss_curves.png")


def _gains(rows: list[dict[str, Any]], better: str, worse: str) -> str:
    return margin_line(rows, better, worse)


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
    """The plan against what happened: each stage's expected minutes in the first plan, in the last plan made before
    it ran (where a re-plan changed them), and what it took."""
    plan, took, replans = report["plan"], report["stage_seconds"], report.get("replans", [])
    last = {name: seconds for p in replans if not p["after"].startswith("fine-tuning")  # before the stage began
            for name, seconds in p["stages"].items() if name in plan["stages"]}
    head = "| stage | planned | re-planned | took |" if replans else "| stage | planned | took |"
    lines = [head, "|---|---|---|---|" if replans else "|---|---|---|"]
    for name, seconds in plan["stages"].items():
        again = [f"{last[name] / 60:.1f} min" if name in last else "–"] if replans else []
        lines.append("| " + " | ".join([name, f"{seconds / 60:.1f} min", *again, f"{took.get(name, 0.0) / 60:.1f} min"])
                     + " |")
    again = ["–"] if replans else []
    lines.append("| " + " | ".join(["**the whole job**", f"{plan['expected_seconds'] / 60:.1f} min", *again,
                                    f"{report['total_seconds'] / 60:.1f} min"]) + " |")
    return "\n".join(lines)


def replan_lines(report: dict[str, Any]) -> str:
    """Each re-plan: after which stage, at what speed, and what it changed."""
    out = []
    for p in report.get("replans", []):
        m3e = (f"m3e-small's steps at {p['m3e_scale']:.0%}" if p["m3e_scale"] else "m3e-small's rows given up")
        out.append(f"- after {p['after']} ({p['elapsed_seconds'] / 60:.1f} min in): the stage ran at {p['speed']:.2f}x "
                   f"the timed seconds, and the plan as it stood would have ended at "
                   f"{p['projected_seconds'] / 60:.1f} of {p['budget_seconds'] / 60:.1f} minutes; re-planned to "
                   f"{p['expected_seconds'] / 60:.1f}: {len(p['runs'])} fine-tuning runs left, {m3e}.")
    return "\n".join(out) if out else "None: every stage ran within the tolerance of its plan."


def not_run_lines(report: dict[str, Any]) -> str:
    """What was not run, and why: each row's runs below their floor or left out for time."""
    seen, out = set(), []
    order = {row: i for i, row in enumerate((*ROWS, ZERO_SHOT_ROW))}
    for n in sorted(report.get("not_run", []), key=lambda n: order.get(n["row"], len(order))):
        key = (n["row"], n["why"])
        if key in seen:
            continue
        seen.add(key)
        budgets = [m["labels"] for m in report["not_run"] if (m["row"], m["why"]) == key and m["labels"] is not None]
        where = f" at {', '.join(f'{b:,}' for b in budgets)} labels" if budgets else ""
        out.append(f"- **{n['row']}**{where}: {n['why']}.")
    return "\n".join(out)


def report_markdown(report: dict[str, Any], what: str, prompt: str, seeds: int) -> str:
    """report.md: the table, what each row is, the margins, the plan and the pictures."""
    pre, tapt, plan = report["pretraining"], report["tapt"], report["plan"]
    curve = ", ".join(f"{e['step']}: {e['eval_mlm_accuracy']:.3f}" for e in pre["eval"])
    tapt_curve = ", ".join(f"{e['step']}: {e['eval_mlm_accuracy']:.3f}" for e in tapt["eval"])
    corpus = ", ".join(f"{name} x{weight}" if weight > 1 else name for name, weight in pre["corpus"].items())
    scaled = (f" On this machine the plan ran m3e-small's fine-tuning and continued pretraining at "
              f"{plan['m3e_scale']:.0%} of their full steps, and its runs above 200 labels with one seed, so that the "
              "tiny BERT's pretraining kept its share of the budget." if 0 < plan["m3e_scale"] < 1 else "")
    if report.get("replans"):  # the first plan's scale is not what ran: say where to look
        scale = [f"{p['m3e_scale']:.0%}" for p in report["replans"]]
        scaled = (f" The first plan gave m3e-small's runs {plan['m3e_scale']:.0%} of their full steps; as the "
                  f"machine's speed moved, the job re-planned what was left ({', '.join(scale)} after each re-plan "
                  "below).")
    missing = not_run_lines(report)
    missing = (f"""

**Not run** (a row below its floor, the fewest steps at which it means something, is not published as a
result):

{missing}""" if missing else "")
    timing = f" {report['timing_line']}." if report.get("timing_line") else ""
    changes = report.get("thread_changes") or []
    if changes:  # --threads fit at work: when the job took or gave back a thread
        timing += " Threads: " + ", ".join(f"{c['threads']} at {c['minutes']:.1f} min (others {c['others']:.1f} "
                                          "cores)" for c in changes) + "."
    return f"""# bertkit demo: when does pretraining pay?

{what} (`bertkit data show {report['task']}`). Each cell is the test accuracy of a model fine-tuned on that
many labelled training examples (a stratified subset; the smaller subsets of a seed lie inside the larger ones),
the mean ± standard deviation over up to {seeds} seeds where there is more than one. Every run trains the number
of steps the plan gave its budget and is scored after its last step: no run looks at dev labels.

{table(report['rows'], report.get('zero_shot'), report.get('not_run', []))}{missing}

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
{plan['budget_seconds'] / 60:.1f}-minute budget.{scaled}{timing}

{plan_table(report)}

Re-plans (after each stage the job compares what it took with the timings, and plans what is left again where
the plan would end more than a tenth off the budget):

{replan_lines(report)}

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
