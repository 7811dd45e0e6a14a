"""Bad input in texts, labels and JSON fields: labels of mixed JSON types, typed SQuAD fields, JSON nested too deeply,
text of invisible characters only, a text pair sent to a classifier of single texts, QA window advice, and the
vocabulary kind chosen for mixed text. docs/bad-input.md lists what each gets."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForQuestionAnswering, BertForSequenceClassification
from bertkit.tokenizer import BertTokenizer
from test_bad_input import TINY, VOCAB, refused, run  # the one voice of a refusal

pytestmark = pytest.mark.usefixtures("one_thread")

DEEP = "[" * 100_000  # Python's JSON parser recurses once per level: a RecursionError, not a ValueError
EMPTY_TAIL = "it has no visible character, so nothing made for it could mean anything"


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


# ---- 4. text of invisible characters only is empty, everywhere -----------------------------------

INVISIBLE = {
    "zero-width-space": ("\u200b", "U+200B ZERO WIDTH SPACE"),
    "bom": ("\ufeff", "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
    "joiners": ("\u200c\u200d", "U+200C ZERO WIDTH NON-JOINER, U+200D ZERO WIDTH JOINER"),
    "word-joiner": ("\u2060", "U+2060 WORD JOINER"),
    "soft-hyphen": ("\u00ad", "U+00AD SOFT HYPHEN"),
    "hangul-filler": ("\u3164", "U+3164 HANGUL FILLER"),
}


@pytest.mark.parametrize("text, named", INVISIBLE.values(), ids=INVISIBLE)
@pytest.mark.parametrize("command", ["encode", "predict", "attention"])
def test_text_of_invisible_characters_is_refused_on_the_command_line(ws, tmp_path, capsys, command, text, named):
    extra = ["--out", tmp_path / "a.html"] if command == "attention" else []
    err = refused(capsys, command, "--model", ws / "classifier", text, *extra)
    assert err == f"bertkit {command}: error: the text is only invisible characters ({named}): {EMPTY_TAIL}"


def test_invisible_characters_and_white_space_together_are_named(ws, capsys):
    err = refused(capsys, "encode", "--model", ws / "classifier", "\u3000\u200b \ufeff")
    assert err == ("bertkit encode: error: the text is only invisible characters and white space (U+200B ZERO WIDTH "
                   f"SPACE, U+FEFF ZERO WIDTH NO-BREAK SPACE): {EMPTY_TAIL}")
    err = refused(capsys, "predict", "--model", ws / "reader", "--question", "\u200b", "--context", "张三在北京")
    assert err == f"bertkit predict: error: the question is only invisible characters (U+200B ZERO WIDTH SPACE): " \
                  f"{EMPTY_TAIL}"


def test_invisible_texts_in_the_python_api_are_counted_as_empty(ws):
    from bertkit.inference import EmptyTextWarning, encode, predict
    from bertkit.inference.qa import answer_questions

    tokenizer = BertTokenizer.from_pretrained(ws / "classifier")
    model = BertForSequenceClassification.from_pretrained(ws / "classifier")
    with pytest.warns(EmptyTextWarning, match=r"^2 of 3 texts have no visible character \(empty, white space, or "
                                              r"invisible characters such as U\+200B ZERO WIDTH SPACE\) \(the first "
                                              r"is texts\[1\]\): with no tokens"):
        vectors = encode(model.bert, tokenizer, ["张三", "\u200b", "\ufeff\u2060"])
    np.testing.assert_array_equal(vectors[1], vectors[2])  # both are [CLS] [SEP] alone
    with pytest.warns(EmptyTextWarning, match="1 of 1 texts has no visible character"):
        predict(model, tokenizer, ["\u200c"])
    reader = BertForQuestionAnswering.from_pretrained(ws / "reader")
    with pytest.raises(ValueError, match=r"contexts\[0\] is empty: there is nothing to find an answer in"):
        answer_questions(reader, tokenizer, "张三在哪", "\u200b\u200b")


def test_readers_skip_rows_of_invisible_characters_as_blank(ws, tmp_path, capsys):
    from bertkit.data.qa import read_squad
    from bertkit.data.readers import DataWarning, read_classification_file

    (tmp_path / "d.tsv").write_text("张三\ta\n\u200b\n北京\tb\n\ufeff\t\u200b\n", encoding="utf-8")
    with pytest.warns(DataWarning, match=r"skipped 1 row, kept 2: empty row \(line 2\)"):
        assert [e.text for e in read_classification_file(tmp_path / "d.tsv")] == ["张三", "北京"]
    path = jsonl(tmp_path / "d.jsonl", [{"text": "\u200b\u2060", "label": "a"}, {"text": "张三", "label": "a",
                                                                                 "text_pair": "\ufeff"}])
    with pytest.warns(DataWarning, match=r"skipped 1 row, kept 1: text of invisible characters only \(line 1\)"):
        assert [(e.text, e.text_pair) for e in read_classification_file(path)] == [("张三", None)]
    (tmp_path / "texts.txt").write_text("张三\n\u200b\n北京\n", encoding="utf-8")
    code, out, err = run(capsys, "predict", "--model", ws / "classifier", "--input", tmp_path / "texts.txt")
    assert code == 0 and len(out.splitlines()) == 2 and "skipped 1 line, kept 2: blank (line 2)" in err
    (tmp_path / "q.json").write_text(json.dumps(squad([question("a"), question("b", question="\u200b")])))
    with pytest.warns(DataWarning, match=r"skipped 1 question, kept 1: an empty question \(id b\)"):
        assert [e.id for e in read_squad(tmp_path / "q.json")] == ["a"]


def test_the_invisible_table_holds_every_control_and_format_character():
    from bertkit.utils.visible import is_blank

    missed = [f"U+{code:04X}" for code in range(0x110000)
              if unicodedata.category(chr(code)) in ("Cc", "Cf") and not is_blank(chr(code))]
    assert missed == []
    assert not any(is_blank(text) for text in ("a", "\u200b张", "。", "\u0301", "\ue000"))


@contextlib.contextmanager
def serving(model_dir: Path):
    """The server's app on a free loopback port, run by uvicorn in a thread, until the block ends."""
    import uvicorn

    from bertkit.inference.serving import ServedModel, ServerSettings, create_app
    from serve_helpers import CALL_TIMEOUT, request

    app = create_app(lambda: ServedModel.load(model_dir), ServerSettings(max_batch_tokens=64))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + CALL_TIMEOUT
        while not server.started or request(port, "GET", "/health")[0] != 200:
            assert time.monotonic() < deadline, "the server did not become ready"
            time.sleep(0.02)
        yield lambda route, body: request(port, "POST", route, body)
    finally:
        server.should_exit = True
        thread.join(CALL_TIMEOUT)


def test_the_server_refuses_invisible_texts_on_every_route(ws):
    base = BertForSequenceClassification.from_pretrained(ws / "classifier").bert
    save(base, ws / "encoder")
    with serving(ws / "encoder") as post:
        for route, field in (("/embed", "inputs"), ("/tokenize", "inputs"), ("/v1/embeddings", "input")):
            status, answer = post(route, {field: ["张三", "\u200b"]})
            error = answer["error"]["message"] if route == "/v1/embeddings" else answer["error"]
            assert status == 422 and error == (f"{field}[1] is only invisible characters (U+200B ZERO WIDTH SPACE): "
                                               f"{EMPTY_TAIL}"), route
    with serving(ws / "classifier") as post:
        status, answer = post("/predict", {"inputs": "\ufeff"})
        assert status == 422 and answer["error"] == ("inputs is only invisible characters (U+FEFF ZERO WIDTH NO-BREAK "
                                                     f"SPACE): {EMPTY_TAIL}")


# ---- 5. a text pair to a classifier of single texts ----------------------------------------------

def test_the_server_does_not_read_two_texts_as_a_pair_for_a_classifier_of_single_texts(ws):
    with serving(ws / "single") as post:
        status, answer = post("/predict", {"inputs": ["张三", "北京"]})
        assert status == 422 and answer["error"] == (
            'inputs is a list of 2 texts, which is one input, a text and its pair (["text", "pair"]), but this '
            "server's classifier was fine-tuned on single texts, not pairs; to classify 2 texts, send them as a "
            'batch: [["text"], ["text"]]')
        status, answer = post("/predict", {"inputs": [["张三"], ["北京", "很好"]]})
        assert status == 422 and answer["error"].startswith("inputs[1] is a text pair, but this server's classifier "
                                                            "was fine-tuned on single texts")
        status, batch = post("/predict", {"inputs": [["张三"], ["北京"]]})  # the batch the message asks for
        assert status == 200 and len(batch) == 2 and {a["label"] for a in batch[0]} == {"negative", "positive"}
        assert post("/predict", {"inputs": "张三"})[0] == 200
    with serving(ws / "pairs") as post:
        status, answer = post("/predict", {"inputs": "张三"})
        assert status == 422 and answer["error"] == (
            "inputs is a single text, but this server's classifier was fine-tuned on text pairs; send each input as a "
            'text and its pair: ["text", "pair"], or a batch [["text", "pair"], ...]')
        assert post("/predict", {"inputs": ["张三", "北京"]})[0] == 200
    with serving(ws / "classifier") as post:  # a model that does not say: TEI's grammar, as before
        status, answer = post("/predict", {"inputs": ["张三", "北京"]})
        assert status == 200 and len(answer) == 2 and isinstance(answer[0], dict)


def test_finetune_records_what_a_classifier_reads_and_predict_holds_to_it(ws, tmp_path, capsys):
    code, _, err = run(capsys, "finetune", *finetune_argv(ws, tmp_path, ws / "train.tsv"))
    assert code == 0, err
    config = json.loads((tmp_path / "out" / "best" / "config.json").read_text())
    assert config["text_pairs"] is False
    err = refused(capsys, "predict", "--model", tmp_path / "out" / "best", "张三", "--pair", "北京")
    assert err == ('bertkit predict: error: text 0 has a text pair, but this classifier was fine-tuned on single '
                   'texts (its config.json says "text_pairs": false) and never learnt to read a pair; give single '
                   "texts")
    assert run(capsys, "predict", "--model", tmp_path / "out" / "best", "张三")[0] == 0
    err = refused(capsys, "predict", "--model", ws / "pairs", "张三")
    assert err.endswith('text 0 has no text pair, but this classifier was fine-tuned on text pairs (its config.json '
                        'says "text_pairs": true); give each text its pair')


# ---- 6. QA windows: advice names what predict can change -----------------------------------------

def test_predict_with_short_windows_lowers_the_stride_it_chose(ws, tmp_path, capsys):
    code, out, err = run(capsys, "predict", "--model", ws / "reader", "--max-length", "8", "--question", "张三在哪",
                         "--context", "张三在北京工作很好")
    assert code == 0 and "doc_stride" not in err, err
    err = refused(capsys, "predict", "--model", ws / "reader", "--max-length", "8", "--question", "张三在北京工作",
                  "--context", "张三在北京工作很好")
    assert err == ("bertkit predict: error: --max-length 8 leaves no room for the context: question '张三在北京工作' "
                   "takes 7 tokens, and [CLS], [SEP], [SEP] 3 more; raise --max-length or shorten the question")
    (tmp_path / "q.json").write_text(json.dumps(squad([question("a"), question("b", question="张三在北京工作")])))
    err = refused(capsys, "evaluate", "--model", ws / "reader", "--data", tmp_path / "q.json", "--max-length", "8")
    assert err.endswith("error: --max-length 8 leaves no room for the context: question 'b' takes 7 tokens, and "
                        "[CLS], [SEP], [SEP] 3 more; raise --max-length or shorten the question")
    (tmp_path / "q.json").write_text(json.dumps(squad([question("a")])))
    assert run(capsys, "evaluate", "--model", ws / "reader", "--data", tmp_path / "q.json", "--max-length", "8")[0] == 0


# ---- 7. vocab says why it chose WordPiece --------------------------------------------------------

def test_vocab_says_what_it_measured_when_it_asks_for_a_size(tmp_path, capsys):
    cjk = "".join(VOCAB[6:]) * 2  # 47 CJK ideographs and 53 Latin letters a line: 47% CJK
    (tmp_path / "mixed.txt").write_text((cjk[:47] + "abcdefghij" * 5 + "abc\n") * 10, encoding="utf-8")
    err = refused(capsys, "vocab", "--corpus", tmp_path / "mixed.txt", "--out", tmp_path / "v")
    assert err == ("bertkit vocab: error: 47.0% of the text's characters are CJK ideographs, less than the 50% from "
                   "which kind 'auto' builds a vocabulary of characters, so it chose WordPiece, which needs a size: "
                   "give --size N (vocab_size in Python), e.g. 8000, or --kind chars for a vocabulary of characters")
    assert not (tmp_path / "v").exists()
    code, out, _ = run(capsys, "vocab", "--corpus", tmp_path / "mixed.txt", "--out", tmp_path / "v", "--size", "200")
    assert code == 0 and "wrote" in out
