"""Fine-tuning: the tutorials' toy task to >= 99%, NER features and scoring, bad input."""

import json
import random

import pytest
import torch
import transformers

from bertkit.cli import main
from bertkit.data.tasks import TokenExample
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForSequenceClassification
from bertkit.models.bert.modeling import BertModel
from bertkit.pipelines.finetune import FinetuneOptions, finetune
from bertkit.tasks.ner import ner_features
from bertkit.tokenizer import BertTokenizer
from tolerance import assert_close

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def toy_label(s: str) -> int:
    """0: some of a/b/c and none of x/y/z; 1: the reverse; 2: otherwise (the tutorials' toy task)."""
    has_abc, has_xyz = any(c in "abc" for c in s), any(c in "xyz" for c in s)
    return 0 if has_abc and not has_xyz else 1 if has_xyz and not has_abc else 2


def toy_rows(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    rows = []
    while len(rows) < n:
        s = "".join(rng.choice(LETTERS) for _ in range(6))
        rows.append(f"{' '.join(s)}\t{toy_label(s)}")
    return rows


@pytest.fixture(scope="module")
def letters_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    for split, n, seed in (("train", 4000, 0), ("dev", 300, 1), ("test", 500, 2)):
        (root / f"{split}.tsv").write_text("text\tlabel\n" + "\n".join(toy_rows(n, seed)) + "\n")
    model = root / "model"
    BertModel(BertConfig(vocab_size=31, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=128, max_position_embeddings=16)).save_pretrained(model)
    (model / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *LETTERS]) + "\n")
    return root


def test_toy_task_reaches_99_percent(letters_model, tmp_path):
    results = finetune(FinetuneOptions(
        task="classify", model=str(letters_model / "model"), random_init=True,
        train=str(letters_model / "train.tsv"), dev=str(letters_model / "dev.tsv"),
        test=str(letters_model / "test.tsv"), out=str(tmp_path / "run"), epochs=4, learning_rate=2e-3,
        batch_size=64, max_length=16, progress=False, early_stopping_patience=2))
    assert results["labels"] == ["0", "1", "2"]
    assert results["test_accuracy"] >= 0.99, results
    saved = json.loads((tmp_path / "run" / "best" / "config.json").read_text())
    assert saved["id2label"] == {"0": "0", "1": "1", "2": "2"}
    # our task checkpoint gives the same logits in transformers
    a = BertForSequenceClassification.from_pretrained(tmp_path / "run" / "best")
    b = transformers.BertForSequenceClassification.from_pretrained(tmp_path / "run" / "best").eval()
    ids = torch.randint(5, 31, (3, 8))
    with torch.no_grad():
        assert_close(a(ids).logits, b(input_ids=ids).logits)


def test_unknown_label_at_evaluation_is_a_clear_error(letters_model, tmp_path):
    bad = tmp_path / "dev.tsv"
    bad.write_text("text\tlabel\na b c d e f\t0\nx y z a b c\tmaybe\n")
    with pytest.raises(ValueError, match="labels the model does not know: maybe"):
        finetune(FinetuneOptions(task="classify", model=str(letters_model / "model"), random_init=True,
                                 train=str(letters_model / "train.tsv"), dev=str(bad), out=str(tmp_path / "x"),
                                 max_steps=1, progress=False))


def test_a_max_length_past_the_models_positions_is_refused(letters_model, tmp_path):
    with pytest.raises(ValueError, match="--max-length 32 exceeds the 16 positions of "):
        finetune(FinetuneOptions(task="classify", model=str(letters_model / "model"), random_init=True,
                                 train=str(letters_model / "train.tsv"), dev=str(letters_model / "dev.tsv"),
                                 out=str(tmp_path / "x"), max_length=32, max_steps=1, progress=False))


def test_empty_training_file_is_a_clear_error(letters_model, tmp_path, capsys):
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    code = main(["finetune", "--task", "classify", "--model", str(letters_model / "model"), "--train", str(empty),
                 "--dev", str(letters_model / "dev.tsv"), "--out", str(tmp_path / "y"), "--no-progress"])
    assert code == 2 and "empty.tsv" in capsys.readouterr().err


def test_ner_features_label_first_subtokens_and_map_back(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "北", "京",
                                                   "是", "play", "##ing", "in"]) + "\n")
    tok = BertTokenizer.from_pretrained(tmp_path)
    label2id = {"O": 0, "B-LOC": 1, "I-LOC": 2}
    examples = [TokenExample(["北", "京", " ", "是", "playing", "in"], ["B-LOC", "I-LOC", "O", "O", "B-LOC", "O"])]
    f = ner_features(examples, tok, label2id, max_length=32)[0]
    assert tok.convert_ids_to_tokens(f["input_ids"]) == ["[CLS]", "北", "京", "是", "play", "##ing", "in", "[SEP]"]
    assert f["labels"] == [-100, 1, 2, 0, 1, -100, 0, -100]
    assert f["word_index"] == [-1, 0, 1, 3, 4, -1, 5, -1] and f["num_words"] == 6
    every = ner_features(examples, tok, label2id, max_length=32, label_all=True)[0]
    assert every["labels"] == [-100, 1, 2, 0, 1, 2, 0, -100]           # B- becomes I- after the first piece
    short = ner_features(examples, tok, label2id, max_length=5)[0]
    assert short["input_ids"] == f["input_ids"][:4] + [f["input_ids"][-1]]  # whole words only, then [SEP]


def test_classification_features_mix_pairs_and_single_texts(tmp_path):
    """inews articles with no body have text_pair None beside titled pairs; each is encoded as what it is."""
    from bertkit.data.tasks import TextExample
    from bertkit.tasks.classify import classification_features

    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "北", "京",
                                                   "是", "好"]) + "\n")
    tok = BertTokenizer.from_pretrained(tmp_path)
    examples = [TextExample("北京", "b", "是好"), TextExample("好", "a"), TextExample("京", "b", "北")]
    features = classification_features(examples, tok, {"a": 0, "b": 1}, max_length=16)
    assert [tok.convert_ids_to_tokens(f["input_ids"]) for f in features] == [
        ["[CLS]", "北", "京", "[SEP]", "是", "好", "[SEP]"], ["[CLS]", "好", "[SEP]"],
        ["[CLS]", "京", "[SEP]", "北", "[SEP]"]]
    assert [f["token_type_ids"] for f in features] == [[0, 0, 0, 0, 1, 1, 1], [0, 0, 0], [0, 0, 0, 1, 1]]
    assert [f["label"] for f in features] == [1, 0, 1]
