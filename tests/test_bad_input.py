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

from bertkit.cli import _warnings_to_stderr, main
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForSequenceClassification
from bertkit.models.checkpoint import CheckpointError
from bertkit.pipelines import option_fields, options
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
    from bertkit.models.reference import NumpyBert

    expected = "1 tensor holds NaN or infinite values: bert.encoder.layer.1.output.dense.weight (1 NaN, 1 infinite)"
    with pytest.raises(CheckpointError, match=re.escape(expected)):
        BertForSequenceClassification.from_pretrained(nan_classifier)
    with pytest.raises(CheckpointError, match="encoder.layer.1.output.dense.weight"):
        NumpyBert.from_pretrained(nan_classifier)
    err = refused(capsys, "predict", "--model", nan_classifier, "很好")
    assert "NaN or infinite" in err and "positive" not in err


def test_outputs_that_are_not_finite_are_an_error_not_a_prediction(ws):
    from bertkit.inference import NonFiniteOutputError, encode, predict
    from bertkit.pictures.attention_view import sentence_attentions

    tokenizer = BertTokenizer.from_pretrained(ws / "classifier")
    model = BertForSequenceClassification.from_pretrained(ws / "classifier")
    assert predict(model, tokenizer, ["很好"])[0]["label"] in ("negative", "positive")
    with torch.no_grad():  # damaged after loading (the load check cannot see it)
        model.bert.embeddings.word_embeddings.weight[VOCAB.index("好")] = math.inf
    with pytest.raises(NonFiniteOutputError, match="output for text 1 is not finite"):
        predict(model, tokenizer, ["北京", "很好"])
    with pytest.raises(NonFiniteOutputError, match="text 0"):
        encode(model.bert, tokenizer, ["很好"])
    with pytest.raises(NonFiniteOutputError, match="output for text 1 is not finite"):  # a batch's array: its row
        encode(model.bert, tokenizer, ["北京", "很好"])
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
    from bertkit.models.reference import NumpyBert

    ref = NumpyBert.from_pretrained(ws / "classifier")
    ids = np.array([[2, 6, 7, 3]])
    with pytest.raises(ValueError, match=r"attention_mask must have the shape of input_ids \(1, 4\), got \(1, 3\)"):
        ref(ids, np.ones((1, 3)))
    with pytest.raises(ValueError, match=r"token_type_ids must be in \[0, 2\)"):
        ref(ids, None, np.full((1, 4), 5))
    assert ref(ids, np.ones((1, 4)))[0].shape == (1, 4, 32)


def test_a_model_of_another_family_is_not_read_as_bert(tmp_path, capsys):
    (tmp_path / "gpt").mkdir()
    (tmp_path / "gpt" / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 32, "n_head": 4}))
    for command in ("encode", "predict", "export"):  # (attention takes every family)
        argv = ("--model", tmp_path / "gpt", "x") if command != "export" else ("--model", tmp_path / "gpt", "--onnx",
                                                                                 tmp_path / "onnx")
        err = refused(capsys, command, *argv)
        takes = {"encode": "BERT and ModernBERT", "predict": "BERT, ModernBERT and ViT",
                 "export": "BERT and ModernBERT"}[command]
        assert err.endswith(f"{tmp_path / 'gpt'} holds a GPT-2 model (model_type 'gpt2'); {command} takes {takes} "
                            "models"), err
    (tmp_path / "xl").mkdir()
    (tmp_path / "xl" / "config.json").write_text(json.dumps({"model_type": "xlnet"}))
    assert ("model_type 'xlnet' is not a family bertkit knows: bert (BERT), modernbert (ModernBERT), gpt2 (GPT-2), "
            "vit (ViT)") in refused(
        capsys, "info", tmp_path / "xl")


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
    from bertkit.pictures.explain import TOPICS

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


# ---- 9. nothing a user has is lost ---------------------------------------------------------------

def tree(path: Path) -> dict[str, bytes]:
    """Every file below `path` and its bytes: what must be the same after a refused command."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def pretrain_argv(ws: Path, out: Path, *extra) -> list:
    return ["--corpus", ws / "corpus.txt", "--vocab", ws / "vocab", "--config", ws / "tiny.json", "--max-steps", "2",
            "--max-seq-length", "32", "--no-progress", "--out", out, *extra]


def test_overwrite_never_deletes_the_model_a_finetune_run_starts_from(ws, tmp_path, capsys):
    run_dir = tmp_path / "out"
    assert run(capsys, "finetune", *finetune_argv(ws, tmp_path, "--max-steps", "2"))[0] == 0
    before = tree(run_dir)
    argv = finetune_argv(ws, tmp_path, "--max-steps", "2", "--overwrite")
    argv[argv.index("--model") + 1] = run_dir / "best"
    err = refused(capsys, "finetune", *argv)
    assert f"--model {run_dir / 'best'} is an input of this run, and --overwrite would delete it" in err
    assert tree(run_dir) == before
    argv[argv.index("--out") + 1] = tmp_path / "elsewhere"  # the same model into another directory: trains
    assert run(capsys, "finetune", *argv)[0] == 0


def test_overwrite_never_deletes_the_vocabulary_or_config_a_pretraining_run_reads(ws, tmp_path, capsys):
    # a run bertkit wrote, so that --overwrite could clear it: its vocabulary and config read by the next run
    assert run(capsys, "pretrain", *pretrain_argv(ws, tmp_path / "v"))[0] == 0
    before = tree(tmp_path / "v")
    argv = pretrain_argv(ws, tmp_path / "v", "--overwrite")
    argv[argv.index("--vocab") + 1] = tmp_path / "v"
    assert "--vocab" in refused(capsys, "pretrain", *argv)
    argv[argv.index("--vocab") + 1] = ws / "vocab"
    argv[argv.index("--config") + 1] = tmp_path / "v" / "config.json"
    assert f"--config {tmp_path / 'v' / 'config.json'} is an input of this run" in refused(capsys, "pretrain", *argv)
    assert tree(tmp_path / "v") == before
    # and a vocabulary built from a file inside the directory it would replace
    err = refused(capsys, "vocab", "--corpus", tmp_path / "v" / "vocab.txt", "--out", tmp_path / "v", "--overwrite")
    assert "--corpus" in err and "is an input of this run" in err
    assert tree(tmp_path / "v") == before


def test_overwrite_still_replaces_an_earlier_runs_outputs(ws, tmp_path, capsys):
    assert run(capsys, "pretrain", *pretrain_argv(ws, tmp_path / "p"))[0] == 0
    (tmp_path / "p" / "notes.txt").write_text("mine")
    assert run(capsys, "pretrain", *pretrain_argv(ws, tmp_path / "p", "--overwrite"))[0] == 0
    assert (tmp_path / "p" / "notes.txt").read_text() == "mine"


def test_encode_never_replaces_a_file_unasked(ws, tmp_path, capsys):
    vectors, notes = tmp_path / "vec.npy", tmp_path / "notes.txt"
    np.save(vectors, np.zeros(3))
    notes.write_text("hello")
    before = tree(tmp_path)
    model = ws / "classifier"
    err = refused(capsys, "encode", "--model", model, "张三", "--out", vectors)
    assert err == f"bertkit encode: error: --out {vectors} already exists; give --overwrite to replace it, or choose " \
                  "another name"
    assert refused(capsys, "encode", "--model", model, "张三", "--out", notes).endswith(
        f"--out {notes}: give a file name ending in .npy")
    (tmp_path / "in.npy").write_text("张三\n北京\n", encoding="utf-8")
    err = refused(capsys, "encode", "--model", model, "--input", tmp_path / "in.npy", "--out", tmp_path / "in.npy",
                  "--overwrite")
    assert "is also --input, an input of this command" in err
    assert tree(tmp_path) == {**before, "in.npy": "张三\n北京\n".encode()}
    assert run(capsys, "encode", "--model", model, "张三", "--out", vectors, "--overwrite")[0] == 0
    assert np.load(vectors).shape == (1, 32)


def test_attention_and_explain_never_replace_a_file_unasked(ws, tmp_path, capsys):
    page, picture = tmp_path / "page.html", tmp_path / "heads.png"
    page.write_text("<html>mine</html>")
    picture.write_bytes(b"mine")
    for flag, path in (("--out", page), ("--picture", picture)):
        argv = ["--model", ws / "classifier", "张三", "--out", tmp_path / "new.html", flag, path]
        assert f"{flag} {path} already exists; give --overwrite" in refused(capsys, "attention", *argv)
        assert not (tmp_path / "new.html").exists()
    assert page.read_text() == "<html>mine</html>" and picture.read_bytes() == b"mine"
    assert run(capsys, "attention", "--model", ws / "classifier", "张三", "--out", page, "--overwrite")[0] == 0
    assert "mine" not in page.read_text()
    pictures = tmp_path / "pictures"
    pictures.mkdir()
    (pictures / "layernorm_vs_batchnorm.png").write_bytes(b"mine")
    err = refused(capsys, "explain", "layernorm", "--out", pictures)
    assert "already holds layernorm_vs_batchnorm.png; give --overwrite" in err
    assert tree(pictures) == {"layernorm_vs_batchnorm.png": b"mine"}  # and no staging folder left behind
    assert run(capsys, "explain", "layernorm", "--out", pictures, "--overwrite")[0] == 0
    assert (pictures / "layernorm_vs_batchnorm.png").read_bytes().startswith(b"\x89PNG")


# ---- 10. any bytes on the command line -----------------------------------------------------------

GBK_BEIJING = "北京".encode("gbk")  # b'\xb1\xb1\xbe\xa9': not UTF-8


def as_argument(raw: bytes) -> str:
    """The str Python makes of an argument with these bytes (undecodable bytes become lone surrogates)."""
    return os.fsdecode(raw)


@pytest.mark.parametrize("command, argv", [
    ("predict", ["--model", "{model}", "{text}"]),
    ("predict", ["--model", "{model}", "张三", "--pair", "{text}"]),
    ("encode", ["--model", "{model}", "{text}"]),
    ("attention", ["--model", "{model}", "{text}", "--out", "{tmp}/a.html"]),
    ("generate", ["--model", "{model}", "{text}"]),
    ("translate", ["--model", "{model}", "{text}"]),
], ids=lambda x: x if isinstance(x, str) else None)
@pytest.mark.parametrize("raw", [GBK_BEIJING, "北京".encode()[:-1]], ids=["gbk", "cut-utf8"])
def test_text_that_is_not_utf8_is_named_not_a_traceback(ws, tmp_path, capsys, command, argv, raw):
    values = {"model": str(ws / "classifier"), "text": as_argument(raw), "tmp": str(tmp_path)}
    err = refused(capsys, command, *[a.format(**values) for a in argv])
    assert "is not valid utf-8 text: bytes" in err and "give --encoding gbk" in err


def test_encoding_gbk_reads_gbk_text_from_the_command_line_and_files(ws, tmp_path, capsys):
    code, out, _ = run(capsys, "predict", "--model", ws / "classifier", "--encoding", "gbk", as_argument(GBK_BEIJING))
    assert code == 0 and out.rstrip().endswith("北京")
    (tmp_path / "gbk.txt").write_bytes("北京\n张三在工作\n".encode("gbk"))
    err = refused(capsys, "predict", "--model", ws / "classifier", "--input", tmp_path / "gbk.txt")
    assert err.endswith(f"{tmp_path / 'gbk.txt'} is not utf-8 text: 2 of 2 lines do not decode (the first is line 1); "
                        "GBK or GB18030 text? give --encoding gbk")
    code, out, _ = run(capsys, "predict", "--model", ws / "classifier", "--input", tmp_path / "gbk.txt",
                       "--encoding", "gbk")
    assert code == 0 and "张三在工作" in out
    with pytest.raises(SystemExit):
        main(["predict", "--model", str(ws / "classifier"), "--encoding", "klingon", "x"])
    assert "argument --encoding: unknown encoding 'klingon'" in capsys.readouterr().err


def test_standard_input_that_is_not_utf8_is_named(ws, monkeypatch, capsys):
    import io

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("好\n".encode() + GBK_BEIJING + b"\n")))
    err = refused(capsys, "generate", "--model", ws / "classifier")
    assert "line 2 of standard input is not valid utf-8 text" in err


def test_blank_lines_of_standard_input_are_skipped_and_said(monkeypatch):
    """translate, summarize and generate write one output a text: a blank input line gets none, so it is said, with
    its number (a file's blank lines are said the same way)."""
    import io

    from bertkit.cli.texts import stdin_lines

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("一\n\n二\r\n  \n三\n".encode())))
    with pytest.warns(UserWarning, match="standard input: skipped 2 blank lines \\(lines 2, 4\\), kept 3: one "
                                         "output for each kept line, in order"):
        assert stdin_lines() == ["一", "二", "三"]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("一\n二\n".encode())))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the line break that ends the last line makes no blank line
        assert stdin_lines() == ["一", "二"]


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_text_on_the_command_line_is_refused(ws, capsys, text):
    for command in ("predict", "encode", "attention"):
        err = refused(capsys, command, "--model", ws / "classifier", text)
        assert err.endswith(f"the text is {'empty' if not text else 'only white space'}: it has no tokens, so "
                            "nothing made for it could mean anything")


def test_empty_texts_in_the_python_api_are_counted_in_a_warning(ws):
    from bertkit.inference import EmptyTextWarning, encode

    tokenizer = BertTokenizer.from_pretrained(ws / "classifier")
    model = BertForSequenceClassification.from_pretrained(ws / "classifier").bert
    with pytest.warns(EmptyTextWarning, match=r"2 of 3 texts are empty or only white space \(the first is "
                                              r"texts\[1\]\)"):
        vectors = encode(model, tokenizer, ["张三", "", " \t"])
    np.testing.assert_array_equal(vectors[1], vectors[2])  # both are [CLS] [SEP] alone
    with pytest.raises(ValueError, match="texts\\[0\\] is not valid text: it holds undecoded bytes"):
        encode(model, tokenizer, [as_argument(GBK_BEIJING)])


def test_a_huge_image_size_is_refused_with_what_it_would_take(tmp_path, capsys):
    err = refused(capsys, "vision-train", "--data", tmp_path, "--image-size", "100000", "--out", tmp_path / "v",
                  "--max-steps", "1")
    assert "--image-size 100000: 7-pixel patches cut one image into 204,061,225 patch tokens, more than the " \
           "4,096" in err
    assert "the image 30.0 GB in RGB" in err
    with pytest.raises(ValueError, match="memory, more than half of this machine's"):
        from bertkit.data.images import check_memory

        check_memory(10**15, "a thousand huge images", "give a smaller --image-size")


# ---- 11. numbers that would mislead --------------------------------------------------------------

def test_pretraining_with_a_vocabulary_that_does_not_cover_the_corpus_is_refused(ws, tmp_path, capsys):
    BertTokenizer({t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefg"])}
                  ).save_pretrained(tmp_path / "english")
    argv = pretrain_argv(ws, tmp_path / "p")
    argv[argv.index("--vocab") + 1] = tmp_path / "english"
    err = refused(capsys, "pretrain", *argv)
    assert re.search(r"error: 100\.0% of the training corpus's [\d,]+ tokens are \[UNK\]", err), err
    assert not (tmp_path / "p").exists()
    assert run(capsys, "pretrain", *pretrain_argv(ws, tmp_path / "ok"))[0] == 0
    report = json.loads((tmp_path / "ok" / "data_report.json").read_text())
    assert report["measured"]["unknown_rate"] == 0.0 and report["measured"]["tokens"] > 100


def test_a_few_unknown_tokens_are_a_warning_with_the_rate():
    from bertkit.data.quality import DataQualityWarning, DataReport

    with pytest.warns(DataQualityWarning, match=r"8\.0% of the text's 1,000 tokens are \[UNK\] \(80\)"):
        DataReport("the text").unknown_tokens(80, 1000).check()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DataReport("the text").unknown_tokens(40, 1000).check()  # 4%: said nowhere


def test_a_tokenizer_that_does_not_fit_the_models_embeddings_is_named(ws, tmp_path, capsys):
    import shutil

    shutil.copytree(ws / "classifier", tmp_path / "small")  # embeddings for 30 tokens, a tokenizer of 8
    BertTokenizer({t: i for i, t in enumerate(VOCAB[:8])}).save_pretrained(tmp_path / "small")
    code, _, err = run(capsys, "predict", "--model", tmp_path / "small", "张三")
    assert code == 0
    unused = len(VOCAB) - 8
    assert f"warning: {tmp_path / 'small'}: the tokenizer has 8 tokens, the model's embeddings {len(VOCAB)} rows: " \
           f"{unused} of them ({unused / len(VOCAB):.0%}) are never used; is this the model's own tokenizer?" in err
    shutil.copytree(ws / "classifier", tmp_path / "big")
    BertTokenizer({t: i for i, t in enumerate(VOCAB + [f"x{i}" for i in range(20)])}).save_pretrained(tmp_path / "big")
    assert f"the tokenizer has {len(VOCAB) + 20} tokens, the model's embeddings {len(VOCAB)} rows: ids from " \
           f"{len(VOCAB)} on have no vector" in refused(capsys, "encode", "--model", tmp_path / "big", "张三")


def test_finetuning_on_one_class_is_refused(ws, tmp_path, capsys):
    (tmp_path / "one.tsv").write_text("".join(f"{t}\tpos\n" for t in ("张三", "北京", "很好", "工作") * 5),
                                      encoding="utf-8")
    argv = finetune_argv(ws, tmp_path, "--max-steps", "1")
    argv[argv.index("--train") + 1] = tmp_path / "one.tsv"
    err = refused(capsys, "finetune", *argv)
    assert "the training data has one class ('pos', all 20 examples): a classifier learns nothing from it" in err


def test_a_label_tab_text_file_is_named_not_trained_as_a_class_per_headline(ws, tmp_path, capsys):
    rows = [f"{'ab'[i % 2]}\t{VOCAB[6 + i % 20]}{VOCAB[6 + i // 20]}在北京" for i in range(40)]  # 40 headlines
    (tmp_path / "thucnews-layout.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    argv = finetune_argv(ws, tmp_path, "--max-steps", "1")
    argv[argv.index("--train") + 1] = tmp_path / "thucnews-layout.tsv"
    err = refused(capsys, "finetune", *argv)
    assert "the label column of the training data holds 40 different values in 40 examples" in err
    assert "the first column has 2 different values: if the file is label<TAB>text" in err


def test_a_dev_set_of_one_class_is_a_warning(ws, tmp_path, capsys):
    (tmp_path / "dev.tsv").write_text("张三\ta\n北京\ta\n", encoding="utf-8")
    argv = finetune_argv(ws, tmp_path, "--max-steps", "1")
    argv[argv.index("--dev") + 1] = tmp_path / "dev.tsv"
    code, _, err = run(capsys, "finetune", *argv)
    assert code == 0
    assert "warning: the dev data has one class ('a', all 2 examples): accuracy on it measures only" in err


def test_vocab_of_special_tokens_only_is_refused_and_a_larger_one_is_said(ws, tmp_path, capsys):
    err = refused(capsys, "vocab", "--corpus", ws / "corpus.txt", "--min-count", "100000", "--out", tmp_path / "v")
    assert "no character of the text occurs at least 100,000 times" in err and "only the 5 special tokens" in err
    assert not (tmp_path / "v").exists()
    (tmp_path / "en.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 20)
    code, _, err = run(capsys, "vocab", "--corpus", tmp_path / "en.txt", "--kind", "wordpiece", "--size", "10",
                       "--out", tmp_path / "w")
    size = len((tmp_path / "w" / "vocab.txt").read_text().splitlines())
    assert code == 0 and size > 10
    assert f"warning: asked for 10 tokens, the vocabulary has {size}: WordPiece starts from every character" in err


# ---- 12. messages that send the user the right way -----------------------------------------------

def test_a_binary_file_as_a_corpus_is_named_as_not_text(ws, tmp_path, capsys):
    (tmp_path / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    argv = pretrain_argv(ws, tmp_path / "p")
    argv[argv.index("--corpus") + 1] = tmp_path / "picture.png"
    assert refused(capsys, "pretrain", *argv).endswith(f"{tmp_path / 'picture.png'} is not a text file: it holds NUL "
                                                        "bytes (binary data, or UTF-16 text: then give its encoding, "
                                                        "e.g. --encoding utf-16)")


def test_a_corpus_of_one_document_says_how_many_it_has(ws, tmp_path, capsys):
    (tmp_path / "one.txt").write_text("张三在北京工作。\n很好。\n", encoding="utf-8")
    argv = pretrain_argv(ws, tmp_path / "p", "--eval-fraction", "0")
    argv[argv.index("--corpus") + 1] = tmp_path / "one.txt"
    assert "next-sentence prediction needs at least 2 documents to train on, and there are 1" in refused(
        capsys, "pretrain", *argv)


def test_a_diverging_finetune_run_exits_1_naming_the_learning_rate(ws, tmp_path, capsys):
    argv = finetune_argv(ws, tmp_path, "--max-steps", "6", "--learning-rate", "1e6", "--batch-size", "8")
    code, _, err = run(capsys, "finetune", *argv)
    assert code == 1 and "Traceback" not in err
    assert err.startswith("bertkit finetune: error: training stopped at step "), err
    assert "so the run diverged" in err and "Lower the learning rate" in err and "bf16" not in err
    code, _, err = run(capsys, "finetune", *argv, "--overwrite")
    assert code == 1, err  # --overwrite starts the run again, as the message says


def test_conll_tags_that_are_not_tags_name_file_and_line(tmp_path):
    from bertkit.data.readers import read_conll

    path = tmp_path / "bad.conll"
    path.write_text("张 B-PER\n三 I-PER\n\n北 B-\n京 LOC\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}, line 4: 'B-' is not an entity tag \(2 such "):
        read_conll(path)


def test_resume_of_a_file_or_a_missing_directory_says_so(ws, tmp_path, capsys):
    assert refused(capsys, "pretrain", "--resume", ws / "corpus.txt").endswith(
        f"{ws / 'corpus.txt'} is a file; --resume takes the directory of a pretraining run (its --out)")
    assert refused(capsys, "pretrain", "--resume", tmp_path / "nope").endswith(
        f"{tmp_path / 'nope'} does not exist; --resume takes the directory of a pretraining run (its --out)")


def test_predicting_with_an_encoder_points_to_encode_not_to_python(ws, tmp_path, capsys):
    BertForSequenceClassification.from_pretrained(ws / "classifier").bert.save_pretrained(tmp_path / "encoder")
    BertTokenizer.from_pretrained(ws / "classifier").save_pretrained(tmp_path / "encoder")
    err = refused(capsys, "predict", "--model", tmp_path / "encoder", "张三")
    assert "(bertkit encode)" in err and "()" not in err


# ---- 13. a second sample, tried as a new user would -----------------------------------------------

def test_an_output_where_no_file_can_be_written_names_the_file_asked_for(ws, tmp_path, capsys):
    assert run(capsys, "encode", "--model", ws / "classifier", "张三", "--out", tmp_path / "new" / "v.npy")[0] == 0
    err = refused(capsys, "encode", "--model", ws / "classifier", "张三", "--out", "/proc/v.npy")
    assert err.endswith("/proc/v.npy: cannot write a file there (No such file or directory)") and ".tmp" not in err


def test_an_unclosed_csv_quote_is_named_not_read_as_a_label(ws, tmp_path, capsys):
    (tmp_path / "broken.csv").write_text('张三,"好\n北京,差\n', encoding="utf-8")
    argv = finetune_argv(ws, tmp_path, "--max-steps", "1")
    argv[argv.index("--train") + 1] = tmp_path / "broken.csv"
    code, _, err = run(capsys, "finetune", *argv)
    assert code == 2 and "label runs over several lines (an unclosed quote?) (line 1)" in err


def test_a_label_budget_smaller_than_the_classes_is_refused(ws, tmp_path, capsys):
    argv = finetune_argv(ws, tmp_path, "--max-steps", "1", "--max-train-examples", "1")
    assert "--max-train-examples 1 is fewer than the training data's 2 classes" in refused(capsys, "finetune", *argv)
