"""Zero-shot cloze prompts: a pretrained masked-LM head scores a template's label words with no training. The scores
equal a hand computation and transformers' BertForMaskedLM on the same weights; `predict --zero-shot` and
`evaluate --zero-shot` end to end; bad input (no [MASK], a word outside the vocabulary, no masked-LM head) is one
line, exit status 2."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from bertkit.cli import main
from bertkit.data.prompts import PromptTemplate
from bertkit.inference import predict
from bertkit.inference.zero_shot import load_zero_shot_model
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForMaskedLM, BertForPromptClassification, BertForSequenceClassification
from bertkit.models.bert.modeling import BertModel
from bertkit.tokenizer import BertTokenizer
from tolerance import assert_close

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("体育财经新闻：的了是在好差赛球股市")
TINY = dict(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24,
            max_position_embeddings=32, initializer_range=0.3)
TEMPLATE = "[MASK][MASK]新闻：{text}"
WORDS = {"sports": "体育", "finance": "财经"}
TEXTS = ["球赛的了", "股市是在好", "差"]

pytestmark = pytest.mark.usefixtures("one_thread")


def save(model, path):
    model.save_pretrained(path)
    BertTokenizer({token: i for i, token in enumerate(VOCAB)}).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory):
    torch.manual_seed(0)
    return save(BertForMaskedLM(BertConfig(**TINY)), tmp_path_factory.mktemp("mlm"))


def masked_lm_log_probs(model, ids):
    """Log-probabilities over the vocabulary at every position, by the full masked-LM model: (B, T, V)."""
    return torch.log_softmax(model(ids).logits.float(), dim=-1).detach()


def test_scores_equal_a_hand_computation_and_a_rigged_head_picks_its_word(mlm_dir, tmp_path):
    model, tokenizer = load_zero_shot_model(mlm_dir, TEMPLATE, WORDS)
    assert isinstance(model, BertForPromptClassification) and model.config.id2label == {0: "sports", 1: "finance"}
    ids = torch.tensor([PromptTemplate(TEMPLATE).encode(tokenizer, [TEXTS[0]], 32)[0][0]])
    log_probs = masked_lm_log_probs(BertForMaskedLM.from_pretrained(mlm_dir), ids)[0]      # (T, V)
    # by hand: a label's score is its word's two characters' log-probabilities, each at its own [MASK] (1 and 2)
    word = {label: tokenizer.convert_tokens_to_ids(list(w)) for label, w in WORDS.items()}
    hand = torch.tensor([float(log_probs[1, w[0]] + log_probs[2, w[1]]) for w in word.values()])
    assert_close(model(ids).logits[0], hand)
    result = predict(model, tokenizer, TEXTS[0])
    assert [result["probabilities"][label] for label in WORDS] == pytest.approx(hand.softmax(-1).tolist(), abs=1e-6)

    # a head whose bias makes 财 and 经 the likeliest characters anywhere: every text reads finance
    rigged = BertForMaskedLM.from_pretrained(mlm_dir)
    with torch.no_grad():
        rigged.cls.predictions.bias[word["finance"]] += 20.0
    model, tokenizer = load_zero_shot_model(save(rigged, tmp_path / "rigged"), TEMPLATE, WORDS)
    assert [r["label"] for r in predict(model, tokenizer, TEXTS)] == ["finance"] * 3
    assert min(r["score"] for r in predict(model, tokenizer, TEXTS)) > 0.999


def test_label_order_and_a_pretraining_checkpoint(mlm_dir, tmp_path):
    """The labels keep the order given; a BertForPreTraining directory (a pretraining run's) is read the same."""
    model, tokenizer = load_zero_shot_model(mlm_dir, TEMPLATE, WORDS)
    swapped, _ = load_zero_shot_model(mlm_dir, TEMPLATE, {"finance": "财经", "sports": "体育"})
    ids = torch.tensor([PromptTemplate(TEMPLATE).encode(tokenizer, TEXTS[:1], 32)[0][0]])
    torch.testing.assert_close(swapped(ids).logits, model(ids).logits.flip(-1), atol=0, rtol=0)
    from bertkit.models.bert.heads import BertForPreTraining

    pretraining = BertForPreTraining(BertConfig(**TINY))
    pretraining.load_state_dict(BertForMaskedLM.from_pretrained(mlm_dir).state_dict(), strict=False)
    from_pretraining, _ = load_zero_shot_model(save(pretraining, tmp_path / "pre"), TEMPLATE, WORDS)
    torch.testing.assert_close(from_pretraining(ids).logits, model(ids).logits, atol=0, rtol=0)


def test_mask_log_probabilities_equal_transformers_on_its_own_checkpoint(tmp_path):
    """A BERT saved by transformers (BertForMaskedLM, with cls.predictions) loads zero-shot; at the [MASK]s the
    log-probabilities over the vocabulary, and the label scores read off them, equal transformers' within 1e-5."""
    transformers.logging.set_verbosity_error()
    torch.manual_seed(1)
    config = transformers.BertConfig(**TINY)
    theirs = transformers.BertForMaskedLM(config).eval()
    path = save(theirs, tmp_path / "hf")
    model, tokenizer = load_zero_shot_model(path, TEMPLATE, WORDS)
    rows, _ = PromptTemplate(TEMPLATE).encode(tokenizer, TEXTS, 32)
    width = max(map(len, rows))
    ids = torch.tensor([row + [0] * (width - len(row)) for row in rows])
    mask = (ids != 0).long()
    with torch.no_grad():
        expected = torch.log_softmax(theirs(input_ids=ids, attention_mask=mask).logits, -1)[:, 1:3]   # (B, K, V)
        hidden = model.bert(ids, mask).last_hidden_state[:, 1:3]
        ours = torch.log_softmax(model.cls.predictions(hidden), -1)
        scores = model(ids, mask).logits
    assert_close(ours, expected)
    words = [tokenizer.convert_tokens_to_ids(list(w)) for w in WORDS.values()]
    assert_close(scores, torch.stack([expected[:, 0, w[0]] + expected[:, 1, w[1]] for w in words], -1))


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


ZERO_SHOT = ("--prompt", TEMPLATE, "--label-words", "sports=体育", "finance=财经", "--zero-shot")


def test_predict_and_evaluate_zero_shot_on_the_command_line(mlm_dir, tmp_path, capsys):
    code, out, _ = run(capsys, "predict", "--model", mlm_dir, "--json", *ZERO_SHOT, *TEXTS)
    assert code == 0
    model, tokenizer = load_zero_shot_model(mlm_dir, TEMPLATE, WORDS)
    expected = predict(model, tokenizer, TEXTS)
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["text"] for r in records] == TEXTS and [r["label"] for r in records] == [e["label"] for e in expected]
    assert [r["probabilities"]["sports"] for r in records] == pytest.approx(
        [e["probabilities"]["sports"] for e in expected], abs=1e-6)
    inputs = tmp_path / "texts.txt"
    inputs.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    code, out, _ = run(capsys, "predict", "--model", mlm_dir, "--input", inputs, *ZERO_SHOT)
    assert code == 0 and out.splitlines()[0].startswith(f"{expected[0]['label']}  {expected[0]['score']:.3f}  (")

    labelled = tmp_path / "labelled.tsv"
    gold = ["sports", "finance", "finance"]
    labelled.write_text("text\tlabel\n" + "".join(f"{t}\t{g}\n" for t, g in zip(TEXTS, gold)), encoding="utf-8")
    code, out, _ = run(capsys, "evaluate", "--model", mlm_dir, "--data", labelled, "--json", *ZERO_SHOT)
    scores = json.loads(out)
    assert code == 0 and scores["chance"] == 0.5 and scores["label_words"] == WORDS
    assert scores["accuracy"] == pytest.approx(sum(e["label"] == g for e, g in zip(expected, gold)) / 3)
    code, out, err = run(capsys, "evaluate", "--model", mlm_dir, "--data", labelled, *ZERO_SHOT)
    assert code == 0 and f"zero-shot through {TEMPLATE}" in out and "chance     0.5000  (1 / 2 labels)" in out
    assert "warning" not in err
    finance = tmp_path / "finance.tsv"  # a label word for a class the data does not have is said
    finance.write_text("text\tlabel\n" + "".join(f"{t}\tfinance\n" for t in TEXTS), encoding="utf-8")
    code, out, err = run(capsys, "evaluate", "--model", mlm_dir, "--data", finance, *ZERO_SHOT)
    assert code == 0
    assert "--label-words names sports, a label the data does not have: the prompt can answer it and is then " \
           "wrong; chance is 1 / 2 labels, over the words given (the data has 1 of them)" in err


@pytest.fixture(scope="module")
def headless_dirs(tmp_path_factory):
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("headless")
    classifier = BertForSequenceClassification(BertConfig(**TINY, id2label={0: "a", 1: "b"}))
    return {"encoder": save(BertModel(BertConfig(**TINY)), root / "encoder"),
            "classifier": save(classifier, root / "classifier")}


@pytest.mark.parametrize("argv, message", [
    (("--prompt", "新闻：{text}", "--label-words", "sports=体育", "finance=财经", "--zero-shot"),
     "at least one [MASK] for the label word"),
    (("--prompt", TEMPLATE, "--label-words", "sports=体操", "finance=财经", "--zero-shot"),
     "label word '体操' has a character the vocabulary lacks"),
    (("--prompt", "[MASK]新闻：{text}", "--label-words", "sports=体育", "finance=财经", "--zero-shot"),
     "label word '体育' is 2 tokens, but the template has 1 [MASK]s"),
    (("--prompt", TEMPLATE, "--label-words", "sports=体育", "--zero-shot"), "give two or more label words, got 1"),
    (("--prompt", TEMPLATE, "--label-words", "sports=体育", "sports=财经", "--zero-shot"),
     "label 'sports' is given twice"),
    (("--prompt", TEMPLATE, "--zero-shot", "--label-words", "sports=体育", "finance=财经"),  # the text taken as one
     "got '差'; give texts before --label-words"),
    (("--prompt", TEMPLATE), "--prompt goes with --zero-shot"),
    (("--zero-shot", "--label-words", "sports=体育", "finance=财经", "--"), "--zero-shot needs --prompt TEMPLATE"),
])
def test_bad_zero_shot_input_is_one_line(mlm_dir, capsys, argv, message):
    code, out, err = run(capsys, "predict", "--model", mlm_dir, *argv, "差")
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("kind", ["encoder", "classifier"])
def test_a_model_without_a_masked_lm_head_is_refused(headless_dirs, capsys, kind):
    code, _, err = run(capsys, "predict", "--model", headless_dirs[kind], *ZERO_SHOT, "差")
    assert code == 2 and "has no masked-LM head" in err and "cls.predictions" in err, err
    assert len(err.strip().splitlines()) == 1
