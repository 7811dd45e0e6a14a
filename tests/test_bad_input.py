"""Bad input, command line and Python API: never a traceback, never a silent wrong result, one voice.

A CLI error is exit status 2 and one line `bertkit COMMAND: error: ...` naming the problem; a warning is one
line `bertkit COMMAND: warning: ...`. docs/bad-input.md lists what each kind of bad input gets."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit import option_fields, options
from bertkit.checkpoint import CheckpointError
from bertkit.cli import _warnings_to_stderr, main
from bertkit.config import BertConfig
from bertkit.models.heads import BertForSequenceClassification
from bertkit.tokenizer import BertTokenizer

README = Path(__file__).resolve().parents[1] / "README.md"
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "。", *"张三在北京工作很好差的一是不了有人这中大为上个国我"]
TINY = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=32)


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


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """A vocabulary, a tiny classifier, a corpus and classification files."""
    import random

    root = tmp_path_factory.mktemp("ws")
    BertTokenizer({t: i for i, t in enumerate(VOCAB)}).save_pretrained(root / "vocab")
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**TINY, id2label={0: "negative", 1: "positive"}))
    model.save_pretrained(root / "classifier")
    BertTokenizer({t: i for i, t in enumerate(VOCAB)}).save_pretrained(root / "classifier")
    rng = random.Random(0)
    chars = VOCAB[6:]
    docs = ["\n".join("".join(rng.choice(chars) for _ in range(8)) + "。" for _ in range(4)) for _ in range(20)]
    (root / "corpus.txt").write_text("\n\n".join(docs), encoding="utf-8")
    rows = ["".join(rng.choice(chars) for _ in range(6)) + f"\t{'ab'[i % 2]}" for i in range(24)]
    (root / "train.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (root / "tiny.json").write_text(json.dumps(TINY))
    return root


def finetune_argv(ws: Path, tmp_path: Path, *extra) -> list:
    return ["--task", "classify", "--model", ws / "classifier", "--train", ws / "train.tsv", "--dev",
            ws / "train.tsv", "--max-length", "16", "--no-progress", "--out", tmp_path / "out", *extra]


# ---- 4. no traceback -----------------------------------------------------------------------------

@pytest.mark.parametrize("extra, named", [
    (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    (["--minutes", "inf"], "--minutes must be a finite number above 0, got inf"),
    (["--max-steps", "-2"], "--max-steps must be at least 1, got -2"),
    (["--epochs", "nan"], "--epochs must be a finite number above 0, got nan"),
])
def test_numbers_that_crashed_are_refused_naming_the_flag(ws, tmp_path, capsys, extra, named):
    assert named in refused(capsys, "finetune", *finetune_argv(ws, tmp_path, *extra))
    assert not (tmp_path / "out").exists()


def test_a_directory_as_training_data_is_named_as_one(ws, tmp_path, capsys):
    argv = finetune_argv(ws, tmp_path, "--max-steps", "1")
    argv[argv.index("--train") + 1] = ws
    assert f"{ws} is a directory; give a file (TSV, CSV or JSONL)" in refused(capsys, "finetune", *argv)
    code, _, err = run(capsys, "predict", "--model", ws / "classifier", "--input", ws)
    assert code == 2 and err == f"bertkit predict: error: input file {ws} is a directory; give a file with one " \
                                "text per line\n"


def test_a_vocabulary_listing_a_token_twice_is_refused_at_load(ws, tmp_path, capsys):
    (tmp_path / "vocab").mkdir()
    (tmp_path / "vocab" / "vocab.txt").write_text("\n".join(VOCAB + ["北", "好"]) + "\n", encoding="utf-8")
    err = refused(capsys, "pretrain", "--corpus", ws / "corpus.txt", "--vocab", tmp_path / "vocab", "--config",
                  ws / "tiny.json", "--max-steps", "2", "--out", tmp_path / "run")
    assert "2 tokens listed more than once: '北' on lines 10, 32; '好' on lines 15, 33" in err
    assert not (tmp_path / "run").exists()


def test_operating_system_errors_are_one_line(ws, tmp_path, capsys):
    err = refused(capsys, "vocab", "--corpus", tmp_path / "nope.txt", "--out", tmp_path / "v")
    assert err == f"bertkit vocab: error: {tmp_path / 'nope.txt'}: no such file or directory"


def test_argument_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["predict", "--model", "m", "--batch-size", "x", "text"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == ("bertkit predict: error: argument --batch-size: must be an integer, got 'x' "
                                       "(see bertkit predict --help)\n")


# ---- 5. no silent wrong result -------------------------------------------------------------------

def out_of_range(f: dataclasses.Field) -> list:
    """Values just outside a numeric field's declared range, and NaN for a float field."""
    meta, values = f.metadata, []
    for key, step in (("minimum", -1), ("above", 0), ("maximum", 1), ("below", 0)):
        if meta.get(key) is not None:
            values.append(meta[key] + step)
    return values + ([math.nan] if "float" in str(f.type) else [])


UNBOUNDED = {"length_penalty"}  # any finite α: a negative one prefers short translations (NaN is still refused)
REQUIRED = {options.PretrainOptions: dict(corpus=["c"], vocab="v", out="o", max_steps=2),
            options.FinetuneOptions: dict(task="classify", model="m", train="t", out="o"),
            options.TranslationOptions: dict(data="d.tsv", out="o", max_steps=2),
            options.LMOptions: dict(out="o", max_steps=2), options.DemoOptions: {},
            options.VisionTrainOptions: dict(data="mnist", out="o", max_steps=2)}


@pytest.mark.parametrize("cls", list(REQUIRED), ids=lambda cls: cls.__name__)
def test_every_numeric_option_is_checked_against_its_range(cls):
    checked = 0
    for f in dataclasses.fields(cls):
        for value in out_of_range(f):
            with pytest.raises(ValueError, match=f"^{re.escape(option_fields.flag_of(f))} must be .*got {value}"):
                cls(**{**REQUIRED[cls], f.name: value})
            checked += 1
    numeric = [f for f in dataclasses.fields(cls) if re.search(r"\b(int|float)\b", str(f.type))
               and f.name not in UNBOUNDED]
    assert numeric and all(option_fields.allowed_range(f) for f in numeric), [f.name for f in numeric]
    assert checked >= len(numeric)


def test_minutes_zero_negative_and_nan_name_the_flag_and_range(capsys):
    for value, stated in (("0", "above 0, got 0.0"), ("-1", "above 0, got -1.0"), ("nan", "a finite number above 0")):
        err = refused(capsys, "lm-train", "--minutes", value, "--out", "unused")
        assert f"--minutes must be {stated}" in err, err


def test_a_huge_sequence_length_is_refused_with_what_it_would_take():
    with pytest.raises(ValueError, match=r"--max-seq-length must be at most 4096, got 100000: the attention scores "
                                         r"of one 100000-token sequence take 40\.0 GB"):
        options.PretrainOptions(**REQUIRED[options.PretrainOptions], max_seq_length=100_000)
    for cls, name in ((options.FinetuneOptions, "max_length"), (options.LMOptions, "block_size"),
                      (options.TranslationOptions, "max_length")):
        with pytest.raises(ValueError, match="must be at most 4096"):
            cls(**REQUIRED[cls], **{name: 5000})


def test_unknown_languages_of_a_named_dataset_are_refused():
    with pytest.raises(ValueError, match="--pair xx-yy: hsk has no xx, yy; its languages are en, zh"):
        options.TranslationOptions(data="hsk", pair="xx-yy", out="o", max_steps=2)
    with pytest.raises(ValueError, match="bible has no xx"):
        options.TranslationOptions(data="bible", pair="en-xx", out="o", max_steps=2)
    assert options.TranslationOptions(data="my.tsv", pair="xx-yy", out="o", max_steps=2).source_lang == "xx"


@pytest.fixture
def nan_classifier(ws, tmp_path) -> Path:
    path = tmp_path / "nan"
    model = BertForSequenceClassification.from_pretrained(ws / "classifier")
    with torch.no_grad():
        model.bert.encoder.layer[1].output.dense.weight[0, :3] = torch.tensor([math.nan, math.inf, 1.0])
    model.save_pretrained(path)
    BertTokenizer.from_pretrained(ws / "classifier").save_pretrained(path)
    return path


def test_weights_that_are_not_finite_are_refused_at_load(nan_classifier, capsys):
    from bertkit.reference import NumpyBert

    expected = "1 tensor holds NaN or infinite values: bert.encoder.layer.1.output.dense.weight (1 NaN, 1 infinite)"
    with pytest.raises(CheckpointError, match=re.escape(expected)):
        BertForSequenceClassification.from_pretrained(nan_classifier)
    with pytest.raises(CheckpointError, match="encoder.layer.1.output.dense.weight"):
        NumpyBert.from_pretrained(nan_classifier)
    err = refused(capsys, "predict", "--model", nan_classifier, "很好")
    assert "NaN or infinite" in err and "positive" not in err


def test_outputs_that_are_not_finite_are_an_error_not_a_prediction(ws):
    from bertkit.attention_view import sentence_attentions
    from bertkit.inference import NonFiniteOutputError, encode, predict

    tokenizer = BertTokenizer.from_pretrained(ws / "classifier")
    model = BertForSequenceClassification.from_pretrained(ws / "classifier")
    assert predict(model, tokenizer, ["很好"])[0]["label"] in ("negative", "positive")
    with torch.no_grad():  # damaged after loading (the load check cannot see it)
        model.bert.embeddings.word_embeddings.weight[VOCAB.index("好")] = math.inf
    with pytest.raises(NonFiniteOutputError, match="output for text 1 is not finite"):
        predict(model, tokenizer, ["北京", "很好"])
    with pytest.raises(NonFiniteOutputError, match="text 0"):
        encode(model.bert, tokenizer, ["很好"])
    with pytest.raises(ValueError, match="attention weights are not finite"):
        sentence_attentions(model.bert, tokenizer, "很好")


@pytest.mark.parametrize("max_length", [0, 1, -4])
def test_truncation_to_nothing_is_an_error(ws, max_length):
    tokenizer = BertTokenizer.from_pretrained(ws / "vocab")
    with pytest.raises(ValueError, match="max_length"):
        tokenizer("张三在北京工作", truncation=True, max_length=max_length)
    with pytest.raises(ValueError, match="max_length 2 leaves no room: the 3 special tokens"):
        tokenizer("张三", "北京", truncation=True, max_length=2)
    assert tokenizer("张三在北京", truncation=True, max_length=3)["input_ids"] == [2, 6, 3]


def test_ids_outside_the_vocabulary_are_named(ws):
    tokenizer = BertTokenizer.from_pretrained(ws / "vocab")
    with pytest.raises(ValueError, match=f"id 999 is not in the vocabulary \\(ids 0..{len(VOCAB) - 1}\\)"):
        tokenizer.decode([2, 6, 999])
    with pytest.raises(ValueError, match="id -100 is not in the vocabulary.*-100"):
        tokenizer.convert_ids_to_tokens([-100])
    with pytest.raises(ValueError, match="id 999"):
        tokenizer.convert_ids_to_tokens(999)
    assert tokenizer.decode([2, 6, 7, 3], skip_special_tokens=True) == "张 三"


def test_jsonl_labels_that_are_lists_or_objects_are_skipped_and_counted(tmp_path):
    from bertkit.data.readers import DataWarning, read_classification_file

    path = tmp_path / "data.jsonl"
    path.write_text('{"text": "a", "label": ["x"]}\n{"text": "b", "label": {"k": 1}}\n{"text": "c", "label": 1}\n'
                    '{"text": ["d"], "label": "y"}\n')
    with pytest.warns(DataWarning, match=r"skipped 3 rows, kept 1: label is a JSON list, not a string or number "
                                         r"\(line 1\); label is a JSON object.*\(line 2\); text is a JSON list"):
        examples = read_classification_file(path)
    assert [(e.text, e.label) for e in examples] == [("c", "1")]


def test_conll_mixing_bio_and_bmes_is_refused_with_line_numbers(tmp_path, capsys):
    from bertkit.data.readers import read_conll

    path = tmp_path / "mixed.conll"
    path.write_text("北 B-LOC\n京 I-LOC\n\n上 B-LOC\n海 M-LOC\n市 E-LOC\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"mixes tagging schemes: I- tags \(BIO or BIOES, first on line 2\) and M- "
                                         r"tags \(BMES, first on line 5\)"):
        read_conll(path)
    path.write_text("北 B-LOC\n京 I-LOC\n市 E-LOC\n\n张 S-PER\n", encoding="utf-8")  # BIOES: fine
    assert len(read_conll(path)) == 2


def test_attention_warns_when_it_cuts_the_text(ws, tmp_path, capsys):
    code, out, err = run(capsys, "attention", "--model", ws / "classifier", "张三在北京工作" * 3, "--max-length", "8",
                         "--out", tmp_path / "a.html")
    assert code == 0
    assert err == ("bertkit attention: warning: the text has 23 tokens, more than max_length 8: it is cut to 8 "
                   "tokens, and the attention shown is that of the cut text\n")
    assert out.startswith("8 tokens:")


def test_vocab_warns_when_it_delivers_fewer_tokens_than_asked(ws, tmp_path, capsys):
    code, out, err = run(capsys, "vocab", "--corpus", ws / "corpus.txt", "--size", "5000", "--out", tmp_path / "v")
    vocab_size = len((tmp_path / "v" / "vocab.txt").read_text().splitlines())
    assert code == 0 and vocab_size < 100
    assert err == f"bertkit vocab: warning: asked for 5,000 tokens, the vocabulary has {vocab_size}: the text has no " \
                  "more distinct characters\n"


# ---- 6. messages that name the right problem ------------------------------------------------------

def test_a_pickle_that_would_run_code_is_refused_as_unsafe(ws, tmp_path, capsys):
    class Payload:
        def __reduce__(self):
            return os.system, ("echo unsafe",)

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text((ws / "classifier" / "config.json").read_text())
    torch.save({"bert.embeddings.word_embeddings.weight": Payload()}, tmp_path / "m" / "pytorch_model.bin")
    err = refused(capsys, "info", tmp_path / "m")
    assert f"refused to load {tmp_path / 'm' / 'pytorch_model.bin'} as unsafe: its pickle would call " in err
    assert "system" in err and "corrupt" not in err


def test_a_file_is_not_a_tokenizer_directory(ws):
    with pytest.raises(ValueError, match=f"{re.escape(str(ws / 'train.tsv'))} is a file, not a tokenizer"):
        BertTokenizer.from_pretrained(ws / "train.tsv")


def test_numpy_bert_checks_the_shapes_of_mask_and_token_types(ws):
    from bertkit.reference import NumpyBert

    ref = NumpyBert.from_pretrained(ws / "classifier")
    ids = np.array([[2, 6, 7, 3]])
    with pytest.raises(ValueError, match=r"attention_mask must have the shape of input_ids \(1, 4\), got \(1, 3\)"):
        ref(ids, np.ones((1, 3)))
    with pytest.raises(ValueError, match=r"token_type_ids must be in \[0, 2\)"):
        ref(ids, None, np.full((1, 4), 5))
    assert ref(ids, np.ones((1, 4)))[0].shape == (1, 4, 32)


def test_a_model_of_another_family_is_not_read_as_bert(tmp_path, capsys):
    (tmp_path / "gpt").mkdir()
    (tmp_path / "gpt" / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 32}))
    assert refused(capsys, "info", tmp_path / "gpt") == ("bertkit info: error: config is for model_type 'gpt2', not "
                                                         "a BERT model ('bert')")


# ---- 7. one voice --------------------------------------------------------------------------------

def test_warnings_and_logged_warnings_are_one_line_in_the_commands_voice(capsys):
    with _warnings_to_stderr("pretrain"):
        warnings.warn("skipped 2 lines:\n  line 3, line 9", UserWarning, stacklevel=1)
        logging.getLogger("bertkit.training.trainer").warning("resuming with %s=%s", "seed", 3)
        logging.getLogger("bertkit.training.trainer").info("not shown")
    assert capsys.readouterr().err == ("bertkit pretrain: warning: skipped 2 lines: line 3, line 9\n"
                                       "bertkit pretrain: warning: resuming with seed=3\n")
    assert logging.getLogger("bertkit").handlers == []


def test_a_pipelines_data_warning_has_no_source_line(ws, tmp_path, capsys):
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps({"text": t, "label": "ab"[i % 2]})
                                                    for i, t in enumerate(["张三", "北京", "很好", "工作"] * 4))
                                          + '\n{"text": "x", "label": ["a"]}\n', encoding="utf-8")
    argv = finetune_argv(ws, tmp_path, "--max-steps", "1", "--batch-size", "4")
    argv[argv.index("--train") + 1] = tmp_path / "train.jsonl"
    code, _, err = run(capsys, "finetune", *argv)
    assert code == 0, err
    assert err == (f"bertkit finetune: warning: {tmp_path / 'train.jsonl'}: skipped 1 row, kept 16: label is a JSON "
                   "list, not a string or number (line 17)\n")


def test_m3e_smalls_config_key_is_known(tmp_path):
    data = json.loads((Path(__file__).parent / "fixtures" / "checkpoints" / "BertModel" / "config.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = BertConfig.from_dict({**data, "uniem_embedding_strategy": "last_mean"})
    config.save_pretrained(tmp_path)  # kept: a save writes the model's own keys back
    assert json.loads((tmp_path / "config.json").read_text())["uniem_embedding_strategy"] == "last_mean"


@pytest.mark.network
def test_the_readme_tour_warns_nothing(tmp_path, monkeypatch):
    from conftest import model_dir_or_skip

    model_dir_or_skip("m3e-small")
    tour = README.read_text(encoding="utf-8").split("```python\n")[1].split("from bertkit import GPT2LMHeadModel")[0]
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(tour, "README tour", "exec"), {})
    assert [str(w.message) for w in caught if issubclass(w.category, UserWarning)] == []
    assert (tmp_path / "my-model" / "config.json").is_file()


# ---- 8. the README and the CLI agree -------------------------------------------------------------

def test_every_explain_topic_the_readme_names_is_a_topic():
    from bertkit.explain import TOPICS

    row = next(line for line in README.read_text(encoding="utf-8").splitlines() if "`bertkit explain TOPIC`" in line)
    named = re.findall(r"`([a-z0-9-]+)`", row.split("|")[2])
    assert len(named) >= 7 and set(named) <= set(TOPICS), set(named) - set(TOPICS)


def test_every_command_the_readme_names_exists():
    from test_cli_options import subparsers

    named = set(re.findall(r"`bertkit ([a-z][a-z-]*)", README.read_text(encoding="utf-8")))
    assert {"info", "pretrain", "finetune", "predict", "attention", "explain", "translate-train"} <= named
    assert named <= set(subparsers()), named - set(subparsers())


def test_the_readme_links_the_bad_input_page():
    assert "(docs/bad-input.md)" in README.read_text(encoding="utf-8")
    assert (README.parent / "docs" / "bad-input.md").is_file()
