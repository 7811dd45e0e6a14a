"""`bertkit finetune --task qa`, `predict --question/--context`, `evaluate` on SQuAD-format files, `data show`, and
what bad QA input gets (docs/bad-input.md)."""

import json
import os
import random
import string

import pytest
import torch

from bertkit.cli import main
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForSequenceClassification
from bertkit.pipelines.options import FinetuneOptions
from bertkit.pipelines.qa import finetune_qa
from bertkit.tokenizer import BertTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = [f"w{i}" for i in range(40)]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *string.ascii_lowercase, *WORDS, "where", "is", "?", "."]


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, command, *argv) -> str:
    code, _, err = run(capsys, command, *argv)
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert lines[-1].startswith(f"bertkit {command}: error: "), err
    return lines[-1]


def toy_squad(n: int, seed: int) -> dict:
    """"where is wK ?" on a context of 30 words holding wK once: the answer is that word."""
    rng = random.Random(seed)
    paragraphs = []
    for q in range(n):
        words = rng.sample(WORDS, 30)
        answer = words[rng.randrange(30)]
        context = " ".join(words) + " ."
        paragraphs.append({"context": context, "qas": [{"id": f"{seed}-{q}", "question": f"where is {answer} ?",
                                                        "answers": [{"text": answer,
                                                                     "answer_start": context.index(answer + " ")}]}]})
    return {"data": [{"title": "toy", "paragraphs": paragraphs}]}


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("qa")
    for split, n, seed in (("train", 48, 0), ("dev", 12, 1), ("test", 12, 2)):
        (root / f"{split}.json").write_text(json.dumps(toy_squad(n, seed)), encoding="utf-8")
    torch.manual_seed(0)
    config = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=48, max_position_embeddings=64)
    from bertkit.models.bert.modeling import BertModel

    BertModel(BertConfig(**config)).save_pretrained(root / "encoder")
    BertTokenizer({t: i for i, t in enumerate(VOCAB)}).save_pretrained(root / "encoder")
    BertForSequenceClassification(BertConfig(**config)).save_pretrained(root / "classifier")
    BertTokenizer({t: i for i, t in enumerate(VOCAB)}).save_pretrained(root / "classifier")
    return root


@pytest.fixture(scope="module")
def reader(ws, tmp_path_factory):
    """A reader fine-tuned on the toy set through the command line, with windows of 24 tokens (a context of 31
    words needs three)."""
    out = tmp_path_factory.mktemp("run") / "qa"
    code = main([str(a) for a in ("finetune", "--task", "qa", "--model", ws / "encoder", "--train", ws / "train.json",
                                  "--dev", ws / "dev.json", "--test", ws / "test.json", "--max-length", 24,
                                  "--doc-stride", 6, "--max-answer-length", 4, "--max-steps", 6, "--batch-size", 8,
                                  "--learning-rate", 1e-3, "--eval-every", 3, "--no-progress", "--out", out)])
    assert code == 0
    return out


def test_finetune_writes_the_best_reader_its_settings_scores_and_predictions(ws, reader):
    results = json.loads((reader / "finetune_results.json").read_text())
    assert results["task"] == "qa" and results["train_examples"] == 48
    # 31 context tokens after a 4-token question: windows of 24 - 4 - 3 = 17 tokens sharing 6,
    # [0, 17), [11, 28), [22, 31)
    assert results["train_windows"] == 48 * 3
    assert results["settings"] == {"max_length": 24, "doc_stride": 6, "max_answer_length": 4, "impossible": False}
    assert results["best_step"] in (3, 6) and 0 <= results["dev_f1"] <= 100
    config = json.loads((reader / "best" / "config.json").read_text())
    assert config["architectures"] == ["BertForQuestionAnswering"] and config["qa"] == results["settings"]
    predictions = json.loads((reader / "predictions.json").read_text())
    assert len(predictions) == 12 and all(isinstance(v, str) for v in predictions.values())
    # `evaluate` scores the saved reader as the run scored it on test
    from bertkit.training.qa_metrics import qa_scores

    test = toy_squad(12, 2)
    references = {q["id"]: [a["text"] for a in q["answers"]] for p in test["data"][0]["paragraphs"] for q in p["qas"]}
    assert qa_scores(predictions, references)["f1"] == pytest.approx(results["test_f1"])


def test_evaluate_and_predict_read_questions_as_the_reader_was_trained(ws, reader, capsys):
    results = json.loads((reader / "finetune_results.json").read_text())
    code, out, _ = run(capsys, "evaluate", "--model", reader / "best", "--data", ws / "test.json", "--json")
    scores = json.loads(out)
    assert code == 0 and scores["task"] == "qa" and scores["metric"] == "squad" and scores["examples"] == 12
    assert scores["f1"] == pytest.approx(results["test_f1"]) and scores["exact_match"] == pytest.approx(
        results["test_exact_match"])
    code, out, _ = run(capsys, "evaluate", "--model", reader / "best", "--data", ws / "test.json")
    assert "12 questions (SQuAD v1.1's exact match and F1)" in out and f"F1           {scores['f1']:.2f}" in out

    context = " ".join(WORDS[:30]) + " ."
    code, out, _ = run(capsys, "predict", "--model", reader / "best", "--question", "where is w3 ?", "--question",
                       "where is w20 ?", "--context", context, "--json")
    assert code == 0
    for line in out.splitlines():
        record = json.loads(line)
        assert context[record["start"]:record["end"]] == record["answer"] != ""
        assert 0 < record["score"] <= 1
    code, out, _ = run(capsys, "predict", "--model", reader / "best", "--question", "where is w3 ?", "--context",
                       context)
    answer, score, offsets, *_ = out.split("  ")  # for people: answer, score, start:end, question
    start, end = map(int, offsets.split(":"))
    assert context[start:end] == answer and float(score) > 0


def test_predict_reads_questions_from_json_lines_and_draws_one(ws, reader, tmp_path, capsys):
    lines = [json.dumps({"id": "a", "question": "where is w5 ?", "context": " ".join(WORDS[:12])}), "not json",
             json.dumps({"question": "where is w6 ?", "context": "  "}),
             json.dumps({"question": "w7", "context": "w7"})]
    (tmp_path / "q.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, err = run(capsys, "predict", "--model", reader / "best", "--input", tmp_path / "q.jsonl", "--json")
    assert code == 0
    assert err == (f"bertkit predict: warning: {tmp_path / 'q.jsonl'}: skipped 2 lines, kept 2: not a JSON object "
                   "(line 2); no context (line 3)\n")
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in records] == ["a", "4"] and records[1]["answer"] == "w7"
    picture = tmp_path / "answer.png"
    code, out, _ = run(capsys, "predict", "--model", reader / "best", "--question", "where is w5 ?", "--context",
                       " ".join(WORDS[:12]), "--picture", picture)
    assert code == 0 and picture.stat().st_size > 1000 and f"wrote {picture}" in out
    before = picture.read_bytes()
    err = refused(capsys, "predict", "--model", reader / "best", "--question", "where is w5 ?", "--context", "w5",
                  "--picture", picture)
    assert f"--picture {picture} already exists; give --overwrite" in err and picture.read_bytes() == before


def test_labelling_texts_with_a_reader_is_refused_naming_how_to_ask_it(reader):
    from bertkit.inference import predict
    from bertkit.inference.loading import load_text_model

    model, tokenizer = load_text_model(reader / "best", "predict")
    with pytest.raises(ValueError, match="a question-answering reader answers questions about a context, not texts: "
                                         "give `bertkit predict --question Q --context C`"):
        predict(model, tokenizer, ["w1 w2"])


def test_the_python_api_refuses_the_other_pipeline(ws, tmp_path):
    from bertkit.pipelines.finetune import finetune

    with pytest.raises(ValueError, match="the qa task has its own run, not the labelled tasks' finetune: "
                                         "`bertkit finetune --task qa` runs it"):
        finetune(FinetuneOptions(task="qa", model=str(ws / "encoder"), train=str(ws / "train.json"),
                                 out=str(tmp_path / "x"), max_steps=1, progress=False))
    with pytest.raises(ValueError, match="finetune_qa trains the qa task, not 'classify'"):
        finetune_qa(FinetuneOptions(task="classify", model=str(ws / "encoder"), train=str(ws / "train.json"),
                                    out=str(tmp_path / "y"), max_steps=1, progress=False))


# ---- bad input ---------------------------------------------------------------------------------

def finetune_argv(ws, tmp_path, train, *extra):
    return ["--task", "qa", "--model", ws / "encoder", "--train", train, "--dev", ws / "dev.json", "--max-length",
            "24", "--doc-stride", "6", "--max-steps", "1", "--batch-size", "4", "--no-progress", "--out",
            tmp_path / "out", *extra]


def test_a_max_length_past_the_models_positions_is_refused(ws, tmp_path, capsys):
    err = refused(capsys, "finetune", *finetune_argv(ws, tmp_path, ws / "train.json", "--max-length", "128"))
    assert f"--max-length 128 exceeds the 64 positions of {ws / 'encoder'}" in err


def test_a_file_that_is_not_squad_format_is_refused(ws, reader, tmp_path, capsys):
    (tmp_path / "rows.jsonl").write_text('{"question": "q", "context": "c"}\n{"question": "r", "context": "d"}\n')
    err = refused(capsys, "finetune", *finetune_argv(ws, tmp_path, tmp_path / "rows.jsonl"))
    assert "rows.jsonl is not SQuAD-format JSON: not JSON (Extra data at line 2 column 1) (one JSON object per " \
           "line is JSON Lines" in err
    (tmp_path / "other.json").write_text('{"rows": []}')
    err = refused(capsys, "evaluate", "--model", reader / "best", "--data", tmp_path / "other.json")
    assert 'other.json is not SQuAD-format JSON: no "data" list (keys: rows); expected {"data": [{"title", ' \
           '"paragraphs": [{"context", "qas"' in err
    err = refused(capsys, "evaluate", "--model", reader / "best", "--data", "thucnews")
    assert "thucnews is a classification dataset, but the model is for qa" in err
    assert not (tmp_path / "out").exists()


def test_answer_starts_that_miss_the_answer_are_skipped_and_counted(ws, tmp_path, capsys):
    data = toy_squad(8, 5)
    for paragraph in data["data"][0]["paragraphs"][:3]:
        paragraph["qas"][0]["answers"][0]["answer_start"] += 1
    (tmp_path / "shifted.json").write_text(json.dumps(data))
    code, _, err = run(capsys, "finetune", *finetune_argv(ws, tmp_path, tmp_path / "shifted.json"))
    assert code == 0
    assert "skipped 3 questions, kept 5: an answer_start that does not point at the answer in the context (ids 5-0, " \
           "5-1, 5-2)" in err
    for paragraph in data["data"][0]["paragraphs"]:
        paragraph["qas"][0]["answers"][0]["answer_start"] = 1000
    (tmp_path / "missed.json").write_text(json.dumps(data))
    err = refused(capsys, "finetune", *finetune_argv(ws, tmp_path / "b", tmp_path / "missed.json"))
    assert "missed.json has no usable questions (see the warning)" in err


def test_window_settings_that_cannot_work_name_the_flags(ws, tmp_path, capsys):
    err = refused(capsys, "finetune", *finetune_argv(ws, tmp_path, ws / "train.json", "--doc-stride", "30"))
    assert "--doc-stride 30 must be at least 0 and less than the context tokens a window holds (20 = --max-length 24" \
           in err


@pytest.mark.parametrize("argv, message", [
    (["--question", "", "--context", "w1"], "the question is empty"),
    (["--question", "where", "--context", " "], "the context is only white space"),
    (["--question", "where"], "give --question TEXT and --context TEXT"),
    (["w1 w2"], "a question-answering model reads --question and --context"),
    (["--question", "a", "--question", "b", "--question", "c", "--context", "x", "--context", "y"],
     "2 --context for 3 --question"),
])
def test_questions_and_contexts_on_the_command_line_are_checked(reader, capsys, argv, message):
    assert message in refused(capsys, "predict", "--model", reader / "best", *argv)


def test_questions_and_contexts_are_decoded_as_the_other_command_line_texts(reader, tmp_path, capsys):
    """--question and --context go through cli/texts.py: bytes that are not UTF-8 are named, --encoding reads them;
    a JSON Lines --input is read in --encoding too."""
    context = "w3 北京 w5 w6 ."
    gbk_context, gbk_question = os.fsdecode(context.encode("gbk")), os.fsdecode("where is 北京 ?".encode("gbk"))
    err = refused(capsys, "predict", "--model", reader / "best", "--question", "where is w5 ?", "--context",
                  gbk_context)
    assert "the context is not valid utf-8 text: bytes" in err and "give --encoding gbk" in err
    err = refused(capsys, "predict", "--model", reader / "best", "--question", "w5", "--question", gbk_question,
                  "--context", "w5 w6")
    assert "question 2 is not valid utf-8 text: bytes" in err
    code, out, _ = run(capsys, "predict", "--model", reader / "best", "--encoding", "gbk", "--question",
                       gbk_question, "--context", gbk_context, "--json")
    record = json.loads(out)
    assert code == 0 and record["question"] == "where is 北京 ?"
    assert context[record["start"]:record["end"]] == record["answer"] != ""
    lines = tmp_path / "gbk.jsonl"
    lines.write_bytes((json.dumps({"question": "where is 北京 ?", "context": context}, ensure_ascii=False) + "\n")
                      .encode("gbk"))
    code, out, _ = run(capsys, "predict", "--model", reader / "best", "--input", lines, "--encoding", "gbk", "--json")
    assert code == 0 and json.loads(out)["question"] == "where is 北京 ?"
    assert json.loads(out)["answer"] == record["answer"]


def test_question_flags_on_a_classifier_are_refused(ws, capsys):
    err = refused(capsys, "predict", "--model", ws / "classifier", "--question", "q", "--context", "c")
    assert "--question is for question-answering models" in err


@pytest.mark.network
def test_data_show_counts_the_qa_sets(capsys):
    from conftest import fetch_or_skip

    fetch_or_skip("squad-excerpt")
    code, out, _ = run(capsys, "data", "show", "xquad-zh")
    assert code == 0 and "datasets==2.5.2" in out and "test       153   articles 5  paragraphs 25" in out
    assert "黑豹队的防守丢了多少分？  ->  '308' @10" in out
    code, out, _ = run(capsys, "data", "show", "squad-excerpt")
    assert "train    1,027   articles 2  paragraphs 121  unanswerable 0" in out


@pytest.mark.network
def test_the_evaluation_sets_are_not_training_sets(ws, tmp_path, capsys):
    from conftest import fetch_or_skip

    fetch_or_skip("squad-excerpt")
    argv = finetune_argv(ws, tmp_path, "xquad-zh")
    assert "xquad-zh is an evaluation set (splits: test); train on squad-excerpt or a SQuAD-format file, and give " \
           "--test xquad-zh" in refused(capsys, "finetune", *argv)
    argv = finetune_argv(ws, tmp_path, ws / "train.json")
    argv[argv.index("--dev") + 1] = "xquad-en"
    assert "xquad-en has splits test, not 'dev'" in refused(capsys, "finetune", *argv)


def test_a_reader_trained_with_unanswerable_questions_can_say_so(ws, tmp_path, capsys):
    data = toy_squad(16, 7)
    for paragraph in data["data"][0]["paragraphs"][:5]:  # SQuAD 2.0: no answer, plausible answers kept aside
        qa = paragraph["qas"][0]
        qa["is_impossible"], qa["plausible_answers"], qa["answers"] = True, qa["answers"], []
    (tmp_path / "v2.json").write_text(json.dumps(data))
    code, _, _ = run(capsys, "finetune", *finetune_argv(ws, tmp_path, tmp_path / "v2.json"))
    assert code == 0
    config = json.loads((tmp_path / "out" / "best" / "config.json").read_text())
    assert config["qa"]["impossible"] is True
    code, out, _ = run(capsys, "evaluate", "--model", tmp_path / "out" / "best", "--data", tmp_path / "v2.json",
                       "--json")
    scores = json.loads(out)
    assert code == 0 and scores["unanswerable"] == 5 and scores["examples"] == 16
