"""Bad input in texts, labels and JSON fields: labels of mixed JSON types, typed SQuAD fields, JSON nested too deeply,
text of invisible characters only, a text pair sent to a classifier of single texts, QA window advice, and the
vocabulary kind chosen for mixed text. docs/bad-input.md lists what each gets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bertkit.cli import main
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForQuestionAnswering, BertForSequenceClassification
from bertkit.tokenizer import BertTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "。", *"张三在北京工作很好差的一是不了有人这中大为上个国我"]
TINY = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=32)
DEEP = "[" * 100_000  # Python's JSON parser recurses once per level: a RecursionError, not a ValueError
EMPTY_TAIL = "it has no visible character, so nothing made for it could mean anything"


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, command: str, *argv) -> str:
    """A refused command: exit 2, one line in the command's voice (after any warnings); returns that line."""
    code, _, err = run(capsys, command, *argv)
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert lines and lines[-1].startswith(f"bertkit {command}: error: "), err
    assert all(line.startswith(f"bertkit {command}: warning: ") for line in lines[:-1]), err
    return lines[-1]


def save(model, path: Path) -> Path:
    model.save_pretrained(path)
    BertTokenizer({t: i for i, t in enumerate(VOCAB)}).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """Classifiers (fine-tuned on single texts, on pairs, and one that does not say), a reader, training rows."""
    root = tmp_path_factory.mktemp("texts")
    torch.manual_seed(0)
    labels = {0: "negative", 1: "positive"}
    save(BertForSequenceClassification(BertConfig(**TINY, id2label=labels)), root / "classifier")
    for name, pairs in (("single", False), ("pairs", True)):  # what `bertkit finetune` writes for each
        save(BertForSequenceClassification(BertConfig(**TINY, id2label=labels)), root / name)
        config = json.loads((root / name / "config.json").read_text())
        (root / name / "config.json").write_text(json.dumps({**config, "text_pairs": pairs}))
    qa = {"max_length": 32, "doc_stride": 8, "max_answer_length": 4, "impossible": False}
    save(BertForQuestionAnswering(BertConfig(**TINY, qa=qa)), root / "reader")
    rows = [f"{VOCAB[6 + i % 20]}{VOCAB[7 + i % 19]}在北京\t{'ab'[i % 2]}" for i in range(24)]
    (root / "train.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


def finetune_argv(ws: Path, tmp_path: Path, train: Path, *extra) -> list:
    return ["--task", "classify", "--model", ws / "classifier", "--train", train, "--dev", train, "--max-length",
            "16", "--max-steps", "1", "--no-progress", "--out", tmp_path / "out", *extra]


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


# ---- 1. labels of JSON Lines: numbers that are equal are one class; types that differ are refused ------------

def test_json_labels_that_are_equal_numbers_are_one_class(tmp_path):
    from bertkit.data.readers import read_classification_file

    path = jsonl(tmp_path / "d.jsonl", [{"text": "张三", "label": 1}, {"text": "北京", "label": 1.0},
                                        {"text": "很好", "label": 0.0}, {"text": "工作", "label": "0"}])
    assert [e.label for e in read_classification_file(path)] == ["1", "1", "0", "0"]


@pytest.mark.parametrize("labels, shown", [
    (["pos", 1], '"pos" (a string, line 1) and 1 (a number, line 2)'),
    ([1, "1.0"], '1 (a number, line 1) and "1.0" (a string, line 2)'),
    ([True, 1], "true (a boolean, line 1) and 1 (a number, line 2)"),
    ([0, True], "0 (a number, line 1) and true (a boolean, line 2)"),
], ids=["name-number", "number-text", "boolean-number", "number-boolean"])
def test_labels_of_mixed_json_types_are_refused_naming_both(ws, tmp_path, capsys, labels, shown):
    rows = [{"text": "张三北京", "label": label} for label in labels] + [{"text": "很好", "label": labels[0]}]
    path = jsonl(tmp_path / "mixed.jsonl", rows)
    err = refused(capsys, "finetune", *finetune_argv(ws, tmp_path, path))
    assert err == (f"bertkit finetune: error: {path}: the labels mix JSON types, {shown}: whether they are one class "
                   "or two is a guess; give every label as the same JSON type")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("label, spelled", [(0.5, "0.5"), (float("nan"), "NaN")])
def test_a_fraction_as_a_label_is_refused(ws, tmp_path, capsys, label, spelled):
    path = tmp_path / "scores.jsonl"
    jsonl(path, [{"text": "张三", "label": 1}, {"text": "北京", "label": label}])
    err = refused(capsys, "finetune", *finetune_argv(ws, tmp_path, path))
    assert err == (f"bertkit finetune: error: {path}, line 2: the label {spelled} is not a whole number: a "
                   "classifier's labels are class names or whole numbers (0, 1, 2, ...), not scores; give each "
                   "example its class")


# ---- 2. typed fields of SQuAD-format files -------------------------------------------------------

def squad(qas: list[dict], context: str = "张三在北京工作") -> dict:
    return {"data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}


def question(qid: str, **fields) -> dict:
    return {"id": qid, "question": "张三在哪", "answers": [{"text": "北京", "answer_start": 3}], **fields}


def test_is_impossible_written_as_text_or_a_number_means_what_it_says(tmp_path):
    from bertkit.data.qa import read_squad

    qas = [question("a", is_impossible="false"), question("b", is_impossible="TRUE", answers=[]),
           question("c", is_impossible=0), question("d", is_impossible=1, answers=[]),
           question("e", is_impossible=None), question("f", is_impossible=" False ")]
    (tmp_path / "t.json").write_text(json.dumps(squad(qas)), encoding="utf-8")
    for need_offsets in (True, False):
        examples = read_squad(tmp_path / "t.json", need_offsets=need_offsets)
        assert [(e.id, e.is_impossible) for e in examples] == [("a", False), ("b", True), ("c", False),
                                                               ("d", True), ("e", False), ("f", False)]
        assert examples[0].answers[0].text == "北京"  # "false" no longer drops the answer


@pytest.mark.parametrize("value, shown", [("no", "'no'"), (2, "2"), ([], "[]")])
def test_is_impossible_of_another_value_is_refused_naming_the_question(ws, tmp_path, capsys, value, shown):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(squad([question("a"), question("q7", is_impossible=value)])), encoding="utf-8")
    err = refused(capsys, "evaluate", "--model", ws / "reader", "--data", path)
    assert err == (f"bertkit evaluate: error: {path}: question q7: is_impossible is {shown}, not true or false (a "
                   'boolean, "true"/"false" or 0/1); fix the file')


def test_answer_starts_and_questions_of_other_types_are_read_or_named(tmp_path):
    from bertkit.data.qa import read_squad
    from bertkit.data.readers import DataWarning

    qas = [question("text", answers=[{"text": "北京", "answer_start": "3"}]),
           question("float", answers=[{"text": "北京", "answer_start": 3.0}]),
           question("fraction", answers=[{"text": "北京", "answer_start": 3.5}]),
           question("negative", answers=[{"text": "张三", "answer_start": -7}]),  # context[-7:-5] is 张三 by chance
           question("number", question=42)]
    (tmp_path / "t.json").write_text(json.dumps(squad(qas)), encoding="utf-8")
    with pytest.warns(DataWarning) as caught:
        examples = read_squad(tmp_path / "t.json")
    assert [(e.id, e.answers[0].start) for e in examples] == [("text", 3), ("float", 3)]
    message = str(caught[0].message)
    assert "an answer_start that is not a whole number (id fraction)" in message
    assert "an answer_start that does not point at the answer in the context (id negative)" in message
    assert "a question that is not a string (id number)" in message


# ---- 3. JSON nested too deeply -------------------------------------------------------------------

def test_a_deeply_nested_qa_file_is_one_line_naming_the_file(ws, tmp_path, capsys):
    (tmp_path / "deep.json").write_text(DEEP)
    err = refused(capsys, "evaluate", "--model", ws / "reader", "--data", tmp_path / "deep.json")
    assert err == (f"bertkit evaluate: error: {tmp_path / 'deep.json'} is not SQuAD-format JSON: not JSON (arrays or "
                   "objects nested 100,000 deep, too deep to read at line 1 column 100000); expected "
                   '{"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question", "answers": '
                   '[{"text", "answer_start"}]}]}]}]}')
    argv = ["--task", "qa", "--model", ws / "reader", "--train", tmp_path / "deep.json", "--out", tmp_path / "o"]
    assert "deep.json is not SQuAD-format JSON: not JSON (arrays or objects nested 100,000 deep" in refused(
        capsys, "finetune", *argv)


def test_deeply_nested_json_lines_and_config_files_are_named(ws, tmp_path, capsys):
    from bertkit.data.readers import DataWarning, read_classification_file

    (tmp_path / "d.jsonl").write_text(DEEP + "\n" + json.dumps({"text": "张三", "label": "a"}) + "\n")
    with pytest.warns(DataWarning, match=r"d.jsonl: skipped 1 row, kept 1: invalid JSON \(line 1\)"):
        assert [e.text for e in read_classification_file(tmp_path / "d.jsonl")] == ["张三"]
    asked = json.dumps({"question": "张三在哪", "context": "张三在北京"})
    (tmp_path / "q.jsonl").write_text(DEEP + "\n" + asked + "\n", encoding="utf-8")
    code, out, err = run(capsys, "predict", "--model", ws / "reader", "--input", tmp_path / "q.jsonl")
    assert code == 0 and "q.jsonl: skipped 1 line, kept 1: not a JSON object (line 1)" in err
    save(BertForSequenceClassification.from_pretrained(ws / "classifier"), tmp_path / "model")
    (tmp_path / "model" / "config.json").write_text(DEEP)
    err = refused(capsys, "predict", "--model", tmp_path / "model", "张三")
    assert err == (f"bertkit predict: error: {tmp_path / 'model' / 'config.json'} is not valid JSON: arrays or "
                   "objects nested 100,000 deep, too deep to read: line 1 column 100000 (char 99999)")
    (tmp_path / "tok").mkdir()
    BertTokenizer({t: i for i, t in enumerate(VOCAB)}).save_pretrained(tmp_path / "tok")
    (tmp_path / "tok" / "tokenizer_config.json").write_text(DEEP)
    with pytest.raises(ValueError, match="tokenizer_config.json: not valid JSON \\(arrays or objects nested 100,000"):
        BertTokenizer.from_pretrained(tmp_path / "tok")
