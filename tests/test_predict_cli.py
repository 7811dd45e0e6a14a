"""`bertkit predict`, `evaluate` and `encode` on tiny saved models: output equals the library's, and bad input
(empty file, unknown label, too-long text without truncation) gets a clear message and exit status 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.inference import encode, predict, tag_words
from bertkit.inference.loading import load_text_model as load_model
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import (
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertkit.pipelines.predict import read_inputs
from bertkit.tokenizer import BertTokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "张", "三", "在", "北", "京", "工", "作", "好", "很", "差",
         "。", "the", "cat", "sat", "on", "mat", "a", "dog", "good", "bad"]
TINY = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=16, initializer_range=0.3)


pytestmark = pytest.mark.usefixtures("one_thread")


def save(model, path):
    model.save_pretrained(path)
    BertTokenizer({token: i for i, token in enumerate(VOCAB)}).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory):
    torch.manual_seed(0)
    config = BertConfig(**TINY, id2label={0: "negative", 1: "positive"})
    return save(BertForSequenceClassification(config), tmp_path_factory.mktemp("classifier"))


@pytest.fixture(scope="module")
def tagger_dir(tmp_path_factory):
    torch.manual_seed(0)
    config = BertConfig(**TINY, id2label={0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"})
    model = BertForTokenClassification(config)
    with torch.no_grad():  # rig the head so that some tokens come out as entities
        model.classifier.bias.copy_(torch.tensor([0.0, 0.5, 0.3, 0.4, 0.2]))
    return save(model, tmp_path_factory.mktemp("tagger"))


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_predict_json_equals_the_library(classifier_dir, capsys):
    texts = ["the cat sat on the mat", "很好", "a bad dog"]
    code, out, _ = run(capsys, "predict", "--model", classifier_dir, "--json", *texts)
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    model, tokenizer = load_model(classifier_dir)
    expected = predict(model, tokenizer, texts)
    assert [r["text"] for r in records] == texts
    for record, want in zip(records, expected):
        assert record["label"] == want["label"] and record["score"] == pytest.approx(want["score"], abs=1e-6)
        assert sum(record["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
    code, out, _ = run(capsys, "predict", "--model", classifier_dir, "很好")
    label = expected[1]["label"]
    assert code == 0 and out.startswith(f"{label}  {expected[1]['score']:.3f}  (") and "很好" in out


def test_predict_pairs_from_flag_and_tsv(classifier_dir, tmp_path, capsys):
    model, tokenizer = load_model(classifier_dir)
    want = predict(model, tokenizer, ["the cat", "a dog"], ["good", "good"])
    code, out, _ = run(capsys, "predict", "--model", classifier_dir, "--json", "--pair", "good", "the cat", "a dog")
    assert code == 0 and [json.loads(line)["score"] for line in out.splitlines()] == pytest.approx(
        [w["score"] for w in want], abs=1e-6)
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("the cat\tgood\n\na dog\tgood\n", encoding="utf-8")
    with pytest.warns(UserWarning, match="skipped 1 line, kept 2: blank"):
        assert read_inputs(tsv) == (["the cat", "a dog"], ["good", "good"])
    code, out, err = run(capsys, "predict", "--model", classifier_dir, "--json", "--input", tsv)
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r["text_pair"] for r in records] == ["good", "good"]
    assert [r["score"] for r in records] == pytest.approx([w["score"] for w in want], abs=1e-6)
    assert "warning: " in err and "blank (line 2)" in err
    code, _, err = run(capsys, "predict", "--model", classifier_dir, "--pair", "x", "--pair", "y", "a", "b", "c")
    assert code == 2 and "2 --pair for 3 texts" in err


def test_predict_ner_spans(tagger_dir, capsys):
    text = "张三在北京工作。the cat"
    # on the CPU, where the API call below runs, beside a GPU too: JSON keeps the floats exactly
    code, out, _ = run(capsys, "predict", "--model", tagger_dir, "--json", "--device", "cpu", text)
    assert code == 0
    [record] = [json.loads(line) for line in out.splitlines()]
    model, tokenizer = load_model(tagger_dir)
    assert record["entities"] == predict(model, tokenizer, [text])[0]  # JSON keeps floats exactly
    assert record["entities"], "the rigged head should find some entity"
    for span in record["entities"]:
        assert text[span["start"]:span["end"]] == span["text"] and span["entity"] in ("PER", "LOC")
    code, out, _ = run(capsys, "predict", "--model", tagger_dir, text)
    first = record["entities"][0]
    assert code == 0 and f"{first['start']:>4}:{first['end']:<4}" in out


def test_empty_input_file_is_an_error(classifier_dir, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    for command in ("predict", "encode"):
        code, out, err = run(capsys, command, "--model", classifier_dir, "--input", empty)
        assert code == 2 and out == "" and f"input file {empty} has no texts (empty file)" in err
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n", encoding="utf-8")
    code, _, err = run(capsys, "encode", "--model", classifier_dir, "--input", blank)
    assert code == 2 and "has no texts (2 unusable lines)" in err
    code, _, err = run(capsys, "predict", "--model", classifier_dir)
    assert code == 2 and "give one or more texts, or --input FILE" in err


def test_too_long_text_warns_or_fails_without_truncation(classifier_dir, tmp_path, capsys):
    long = " ".join(["cat"] * 30)
    code, out, err = run(capsys, "predict", "--model", classifier_dir, long)
    assert code == 0 and out and "warning: 1 of 1 texts are longer than the model's 16 positions" in err
    code, out, err = run(capsys, "predict", "--model", classifier_dir, "--no-truncation", long)
    assert code == 2 and out == "" and "text 0 has 32 tokens, more than the model's 16 positions" in err
    data = tmp_path / "long.tsv"
    data.write_text(f"a dog\tpositive\n{long}\tnegative\n", encoding="utf-8")
    code, out, err = run(capsys, "evaluate", "--model", classifier_dir, "--data", data, "--no-truncation")
    assert code == 2 and out == "" and "text 1 has 32 tokens" in err


def test_encode_writes_the_vectors(classifier_dir, tmp_path, capsys):
    lines = tmp_path / "lines.txt"
    lines.write_text("the cat sat\n张三在北京\n好\n", encoding="utf-8")
    out_file = tmp_path / "sub" / "vectors.npy"
    code, out, _ = run(capsys, "encode", "--model", classifier_dir, "--input", lines, "--out", out_file,
                       "--pooling", "mean", "--normalize")
    assert code == 0 and f"wrote {out_file}: 3 vectors of 32" in out
    model, tokenizer = load_model(classifier_dir)
    expected = encode(model, tokenizer, ["the cat sat", "张三在北京", "好"], pooling="mean", normalize=True)
    np.testing.assert_allclose(np.load(out_file), expected, atol=1e-6)
    code, out, _ = run(capsys, "encode", "--model", classifier_dir, "好")
    assert code == 0 and "(32 dims, norm" in out and f"{encode(model, tokenizer, '好')[0]:+.4f}" in out


def test_batch_tokens_flag(classifier_dir, tmp_path, capsys):
    """--batch-tokens N|auto|off: the same vectors and labels (on the CPU a batch's size changes no vector beyond
    rounding); a bad value, or one given to a model whose inputs are not texts in batches, is one line."""
    texts = ["the cat sat on the mat", "很好", "a bad dog", "张三", "好"]
    model, tokenizer = load_model(classifier_dir)
    expected = encode(model, tokenizer, texts, pooling="mean")
    for value in ("auto", "off", "8"):
        out_file = tmp_path / f"v{value}.npy"
        code, _, _ = run(capsys, "encode", "--model", classifier_dir, "--pooling", "mean", "--batch-size", "1",
                         "--batch-tokens", value, "--out", out_file, *texts)
        assert code == 0
        np.testing.assert_allclose(np.load(out_file), expected, atol=1e-6)
    code, out, _ = run(capsys, "predict", "--model", classifier_dir, "--json", "--batch-tokens", "16", *texts)
    assert code == 0 and [json.loads(line)["label"] for line in out.splitlines()] == \
        [r["label"] for r in predict(model, tokenizer, texts)]
    for value, says in (("0", "must be at least 1, got 0"), ("lots", "lots")):
        with pytest.raises(SystemExit) as exited:
            main(["encode", "--model", str(classifier_dir), "--batch-tokens", value, "好"])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and "argument --batch-tokens: " in err and says in err
    qa = tmp_path / "qa"
    torch.manual_seed(0)
    save(BertForQuestionAnswering(BertConfig(**TINY)), qa)
    code, _, err = run(capsys, "predict", "--model", qa, "--question", "谁", "--context", "张三在北京",
                       "--batch-tokens", "64")
    assert code == 2 and "a question-answering model runs --batch-size inputs a batch" in err


def test_evaluate_classification_file(classifier_dir, tmp_path, capsys):
    model, tokenizer = load_model(classifier_dir)
    texts = ["the cat sat", "a good dog", "很好", "很差", "bad cat", "the mat"]
    predicted = [p["label"] for p in predict(model, tokenizer, texts)]
    gold = ["positive", "negative", "positive", "negative", "negative", "positive"]
    data = tmp_path / "eval.tsv"
    data.write_text("text\tlabel\n" + "".join(f"{t}\t{g}\n" for t, g in zip(texts, gold)), encoding="utf-8")
    code, out, _ = run(capsys, "evaluate", "--model", classifier_dir, "--data", data, "--json")
    scores = json.loads(out)
    assert code == 0 and scores["examples"] == 6 and scores["task"] == "classification"
    assert scores["accuracy"] == pytest.approx(np.mean([p == g for p, g in zip(predicted, gold)]))
    code, out, _ = run(capsys, "evaluate", "--model", classifier_dir, "--data", data)
    assert code == 0 and f"accuracy   {scores['accuracy']:.4f}" in out and "macro-F1" in out


def test_evaluate_unknown_label_names_it_and_the_models_labels(classifier_dir, tmp_path, capsys):
    data = tmp_path / "eval.tsv"
    data.write_text("the cat\tpositive\na dog\tneutral\n", encoding="utf-8")
    code, out, err = run(capsys, "evaluate", "--model", classifier_dir, "--data", data)
    assert code == 2 and out == ""
    assert "label 'neutral' not among the model's labels (negative, positive)" in err
    empty = tmp_path / "empty.tsv"
    empty.write_text("", encoding="utf-8")
    code, _, err = run(capsys, "evaluate", "--model", classifier_dir, "--data", empty)
    assert code == 2 and "is empty: no examples to evaluate on" in err
    code, _, err = run(capsys, "evaluate", "--model", classifier_dir, "--data", "msra-ner")
    assert code == 2 and "msra-ner is an NER dataset, but the model is for classification" in err
    code, _, err = run(capsys, "evaluate", "--model", classifier_dir, "--data", data, "--split", "dev")
    assert code == 2 and "--split is for the named datasets" in err


def test_evaluate_ner_conll(tagger_dir, tmp_path, capsys):
    sentences = [["张", "三", "在", "北", "京"], ["the", "cat", "sat"], ["好"]]
    gold = [["B-PER", "I-PER", "O", "B-LOC", "I-LOC"], ["O", "B-PER", "O"], ["O"]]
    model, tokenizer = load_model(tagger_dir)
    predicted = tag_words(model, tokenizer, sentences)
    conll = tmp_path / "ner.conll"
    conll.write_text("\n\n".join("\n".join(f"{w} {t}" for w, t in zip(s, g)) for s, g in zip(sentences, gold)) + "\n",
                     encoding="utf-8")
    code, out, _ = run(capsys, "evaluate", "--model", tagger_dir, "--data", conll, "--json")
    scores = json.loads(out)
    from bertkit.training.metrics import entity_scores

    want = entity_scores(gold, predicted)
    assert code == 0 and scores["num_true"] == 3 and scores["examples"] == 3
    assert (scores["precision"], scores["recall"], scores["f1"]) == pytest.approx(
        (want["precision"], want["recall"], want["f1"]))
    # a BMES file is scored against the BIO model as the same entities; an unknown type is an error
    conll.write_text("张 B-PER\n三 E-PER\n在 O\n北 S-LOC\n", encoding="utf-8")
    code, out, _ = run(capsys, "evaluate", "--model", tagger_dir, "--data", conll, "--json")
    assert code == 0 and json.loads(out)["num_true"] == 2
    conll.write_text("张 B-ORG\n三 I-ORG\n", encoding="utf-8")
    code, _, err = run(capsys, "evaluate", "--model", tagger_dir, "--data", conll)
    assert code == 2 and "labels 'B-ORG', 'I-ORG' not among the model's labels (O, B-PER, I-PER, B-LOC, I-LOC)" in err


@pytest.mark.network
@pytest.mark.slow  # every inews dev article and MSRA test sentence through a tiny model
def test_evaluate_named_sources(tmp_path, capsys):
    from bertkit.data.tasks import load_ner
    from bertkit.training.metrics import get_entities
    from conftest import fetch_or_skip, model_dir_or_skip

    m3e = model_dir_or_skip("m3e-small")
    fetch_or_skip("inews")
    fetch_or_skip("msra-ner")
    tokenizer = BertTokenizer.from_pretrained(m3e)
    tiny = dict(TINY, vocab_size=21128, num_hidden_layers=1, max_position_embeddings=512)
    classifier = BertForSequenceClassification(BertConfig(**tiny, id2label={0: "positive", 1: "neutral",
                                                                           2: "negative"}))
    classifier.save_pretrained(tmp_path / "classifier")
    tokenizer.save_pretrained(tmp_path / "classifier")
    code, out, err = run(capsys, "evaluate", "--model", tmp_path / "classifier", "--data", "inews", "--split", "dev",
                         "--max-length", "64", "--json")
    scores = json.loads(out)
    assert code == 0 and scores["examples"] == 999 and scores["split"] == "dev" and 0 <= scores["accuracy"] <= 1
    assert "texts are longer than max_length 64" in err  # inews articles are long: cut, and said so

    tags = ["O"] + [f"{p}-{t}" for t in ("PER", "LOC", "ORG") for p in "BMES"]
    tagger = BertForTokenClassification(BertConfig(**tiny, id2label=dict(enumerate(tags))))
    tagger.save_pretrained(tmp_path / "tagger")
    tokenizer.save_pretrained(tmp_path / "tagger")
    code, out, _ = run(capsys, "evaluate", "--model", tmp_path / "tagger", "--data", "msra-ner", "--json")
    scores = json.loads(out)
    gold = sum(len(get_entities(s.tags)) for s in load_ner("msra-ner", scheme="BMES")["test"])
    assert code == 0 and scores["examples"] == 5000 and scores["num_true"] == gold
