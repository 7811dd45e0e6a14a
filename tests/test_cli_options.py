"""The command line's contract: training flags come from the options dataclasses (one default for the CLI and
the Python API), every flag states its default, every --model takes the same names and refuses the same way."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys

import pytest

from bertkit.cli import build_parser, main
from bertkit.cli.options import options_from_args
from bertkit.data.sources import model_names
from bertkit.pipelines import options

REQUIRED = {  # the least each training command needs, and what it gives the dataclass
    "pretrain": (options.PretrainOptions, ["--corpus", "c.txt", "--vocab", "v", "--out", "o", "--max-steps", "1"],
                 dict(corpus=["c.txt"], vocab="v", out="o", max_steps=1)),
    "finetune": (options.FinetuneOptions, ["--task", "ner", "--model", "m", "--train", "t", "--out", "o"],
                 dict(task="ner", model="m", train="t", out="o")),
    "translate-train": (options.TranslationOptions, ["--data", "hsk", "--out", "o", "--minutes", "2"],
                        dict(data="hsk", out="o", minutes=2.0)),
    "lm-train": (options.LMOptions, ["--out", "o", "--max-steps", "3"], dict(out="o", max_steps=3)),
    "demo": (options.DemoOptions, [], {}),
    "vision-train": (options.VisionTrainOptions, ["--data", "mnist", "--out", "o"], dict(data="mnist", out="o")),
}


def subparsers() -> dict[str, argparse.ArgumentParser]:
    return next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices


@pytest.mark.parametrize("command", list(REQUIRED))
def test_the_cli_and_the_python_api_have_the_same_defaults(command):
    cls, argv, given = REQUIRED[command]
    args = build_parser().parse_args([command, *argv])
    assert options_from_args(cls, args) == cls(**given)
    by_dest = {a.dest: a for a in subparsers()[command]._actions}
    for f in dataclasses.fields(cls):  # one flag per field; an untyped flag leaves the field's own default
        assert f.name in by_dest, f.name
        if f.name not in given:
            assert not hasattr(args, f.name), f.name


def all_parsers(parser: argparse.ArgumentParser, name: str = "bertkit") -> dict[str, argparse.ArgumentParser]:
    """Every parser of the command line by its name: the commands and their actions (`data fetch`)."""
    found = {name: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                found.update(all_parsers(sub, f"{name} {sub_name}".removeprefix("bertkit ")))
    return found


@pytest.mark.parametrize("command", sorted(all_parsers(build_parser())))
def test_every_flag_says_its_default(command):
    parser = all_parsers(build_parser())[command]
    for action in parser._actions:
        if action.option_strings and action.dest != "help" and not isinstance(action, argparse._VersionAction):
            stated = action.required or "(default: " in action.help or "(required, unless" in action.help
            assert stated, (command, action.option_strings)


def test_every_command_and_action_is_checked_for_defaults():
    names = set(all_parsers(build_parser()))
    assert {"data fetch", "data show", "data list", "vocab", "predict", "attention", "generate"} <= names


def test_the_established_flags_keep_their_names_and_meanings():
    cls, argv, given = REQUIRED["pretrain"]
    args = build_parser().parse_args(["pretrain", *argv, "--accumulation", "4", "--no-progress", "--bf16"])
    made = options_from_args(cls, args)
    assert (made.gradient_accumulation_steps, made.progress, made.bf16) == (4, False, True)
    args = build_parser().parse_args(["pretrain", "--resume", "runs/x"])
    assert args.resume == "runs/x"
    cls, argv, _ = REQUIRED["finetune"]
    made = options_from_args(cls, build_parser().parse_args(["finetune", *argv, "--patience", "5",
                                                             "--no-group-by-length"]))
    assert (made.early_stopping_patience, made.group_by_length) == (5, False)
    cls, argv, _ = REQUIRED["translate-train"]
    made = options_from_args(cls, build_parser().parse_args(["translate-train", *argv, "--beams", "2", "--max-test",
                                                             "9", "--threads", "1"]))
    assert (made.num_beams, made.max_test_sentences) == (2, 9)
    for flags, bf16 in (([], None), (["--bf16"], True), (["--no-bf16"], False)):
        made = options_from_args(options.DemoOptions, build_parser().parse_args(["demo", "--config", "mini", *flags]))
        assert (made.pretrain_config, made.bf16) == ("mini", bf16)


@pytest.mark.parametrize("command", ["pretrain", "translate-train", "lm-train"])
def test_one_budget_check_for_every_training_command(command, capsys):
    _, argv, _ = REQUIRED[command]
    budget = {"--max-steps", "--minutes"}
    argv = [a for i, a in enumerate(argv) if a not in budget and (i == 0 or argv[i - 1] not in budget)]
    assert main([command, *argv]) == 2
    assert capsys.readouterr().err == (f"bertkit {command}: error: give max_steps or minutes, or both "
                                       "(--max-steps, --minutes)\n")


def test_missing_required_flags_are_named(capsys):
    assert main(["pretrain", "--max-steps", "1"]) == 2
    assert "give --corpus, --vocab (or --init MODEL), --out (or --resume OUT)" in capsys.readouterr().err


def test_finetune_help_documents_the_file_formats(capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    out = capsys.readouterr().out
    for words in ("TSV", "CSV", "JSONL", "CoNLL", 'text<TAB>label', "text_pair", "BMES"):
        assert words in out, words


def test_pretraining_objectives_are_the_data_builders():
    import dataclasses

    from bertkit.data.pretraining.packing import OBJECTIVES

    objective = {f.name: f for f in dataclasses.fields(options.PretrainOptions)}["objective"]
    assert tuple(objective.metadata["choices"]) == OBJECTIVES == ("mlm+nsp", "mlm+sop", "mlm")
    assert objective.default in OBJECTIVES


def test_options_save_and_load(tmp_path):
    made = options.TranslationOptions(data="hsk", out="o", max_steps=3, pair="en-zh")
    path = made.save(tmp_path / "options.json")
    assert json.loads(path.read_text())["pair"] == "en-zh"
    loaded = options.TranslationOptions.load(path)
    assert loaded == made and (loaded.source_lang, loaded.target_lang) == ("en", "zh")


def test_the_schedules_offered_are_the_ones_the_trainer_implements():
    from bertkit.training import schedule
    from bertkit.training.arguments import SCHEDULES

    assert SCHEDULES is schedule.SCHEDULES  # one tuple, in training/arguments.py: it needs no torch
    assert options.PretrainOptions.__dataclass_fields__["lr_schedule"].metadata["choices"] == schedule.SCHEDULES


def test_building_the_parser_imports_no_torch():
    code = "import sys; from bertkit.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


# ---- --model -------------------------------------------------------------------------------------

MODEL_COMMANDS = [
    ["predict", "--model", "nope", "text"], ["evaluate", "--model", "nope", "--data", "inews"],
    ["encode", "--model", "nope", "text"], ["attention", "--model", "nope", "text"],
    ["explain", "attention", "--model", "nope"], ["info", "nope"], ["translate", "--model", "nope", "text"],
    ["generate", "--model", "nope", "text"], ["serve", "nope"],
    ["finetune", "--task", "classify", "--model", "nope", "--train", "inews", "--out", "unused"],
]


@pytest.mark.parametrize("argv", MODEL_COMMANDS, ids=lambda argv: argv[0] + (argv[1] if argv[0] == "explain" else ""))
def test_every_model_option_refuses_an_unknown_name_alike(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing written, and no directory called "nope" to find
    assert main(argv) == 2
    assert capsys.readouterr().err == (f"bertkit {argv[0]}: error: model 'nope' does not exist: no such directory, "
                                       f"and not a model name ({', '.join(model_names())})\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.network
def test_attention_takes_a_model_name(tmp_path, capsys):
    from conftest import model_dir_or_skip

    model_dir_or_skip("m3e-small")
    assert main(["attention", "--model", "m3e-small", "北京", "--out", str(tmp_path / "a.html")]) == 0
    assert "[CLS] 北 京 [SEP]" in capsys.readouterr().out and (tmp_path / "a.html").stat().st_size > 1000


@pytest.mark.network
@pytest.mark.slow
def test_explain_takes_a_model_name(tmp_path, capsys):
    from conftest import model_dir_or_skip

    model_dir_or_skip("m3e-small")
    assert main(["explain", "attention", "--model", "m3e-small", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "attention.html").is_file() and "attention_layer3.png" in capsys.readouterr().out


# ---- --device: the one device rule ---------------------------------------------------------------

DEVICE_COMMANDS = {  # every command that trains or runs a model, with the least it needs besides --device
    "pretrain": ["--corpus", "c.txt", "--vocab", "v", "--out", "o", "--max-steps", "1"],
    "finetune": ["--task", "classify", "--model", "nope", "--train", "inews", "--out", "o", "--max-steps", "1"],
    "translate-train": ["--data", "hsk", "--out", "o", "--max-steps", "1"],
    "summarize-train": ["--out", "o", "--max-steps", "1"],
    "lm-train": ["--out", "o", "--max-steps", "1"],
    "vision-train": ["--data", "mnist", "--out", "o", "--max-steps", "1"],
    "predict": ["--model", "nope", "text"],
    "evaluate": ["--model", "nope", "--data", "inews"],
    "encode": ["--model", "nope", "text"],
    "serve": ["nope"],
    "attention": ["--model", "nope", "text"],
    "explain": ["attention", "--model", "nope"],
    "translate": ["--model", "nope", "text"],
    "summarize": ["--model", "nope", "text"],
    "generate": ["--model", "nope", "text"],
    "mine-negatives": ["--model", "nope", "--data", "inews-pairs", "--out", "o.tsv"],
    "demo": ["--out", "o"],
}


@pytest.fixture
def no_gpu(monkeypatch):
    """This machine as one without a CUDA GPU, whatever it has."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize("command", sorted(DEVICE_COMMANDS))
def test_every_command_that_runs_a_model_takes_device(command, capsys):
    from bertkit.utils.devices import DEVICE_HELP

    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--device DEVICE" in out and f"{DEVICE_HELP}" in out
    action = next(a for a in subparsers()[command]._actions if a.dest == "device")
    assert action.default in ("auto", argparse.SUPPRESS)  # SUPPRESS: a training option, whose dataclass says auto
    if action.default == argparse.SUPPRESS:
        assert "(default: auto)" in action.help


def test_export_stays_on_the_cpu(capsys):
    assert "device" not in {a.dest for a in subparsers()["export"]._actions}  # ONNX export traces on the CPU


@pytest.mark.parametrize("command", sorted(DEVICE_COMMANDS))
def test_device_cuda_without_a_gpu_is_one_line_before_any_work(command, no_gpu, capsys, tmp_path, monkeypatch):
    import torch

    monkeypatch.chdir(tmp_path)
    assert main([command, *DEVICE_COMMANDS[command], "--device", "cuda"]) == 2
    assert capsys.readouterr().err == (
        f"bertkit {command}: error: --device cuda: this machine has no CUDA GPU that torch {torch.__version__} can "
        "use (torch.cuda.is_available() is False); give --device cpu, or auto\n")
    assert list(tmp_path.iterdir()) == []  # refused before anything was fetched, read or written


@pytest.mark.parametrize("command", ["lm-train", "predict", "encode", "generate", "serve"])
def test_an_unknown_device_is_refused(command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([command, *DEVICE_COMMANDS[command], "--device", "gpu0"]) == 2
    assert capsys.readouterr().err == (f"bertkit {command}: error: --device must be auto, cpu, cuda or cuda:N (N a "
                                       "GPU number), got 'gpu0'\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["predict", "evaluate", "encode", "serve"])
def test_int8_on_a_gpu_is_refused_in_one_line(command, capsys, tmp_path, monkeypatch):
    import torch

    from bertkit.utils import devices

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(devices, "resolve_device", lambda spec: torch.device("cuda", 0))  # as on a GPU machine
    assert main([command, *DEVICE_COMMANDS[command], "--dtype", "int8", "--device", "cuda"]) == 2
    assert capsys.readouterr().err == (
        f"bertkit {command}: error: --dtype int8 runs on the CPU only; this command runs on cuda:0 (--device cuda): "
        "give --device cpu for int8, or --dtype bf16 or fp32 on the GPU\n")


def test_each_finetune_task_is_one_record_the_command_runs_and_reports(capsys, monkeypatch, tmp_path):
    from bertkit.cli import main
    from bertkit.data.task_kinds import TASKS
    from bertkit.pipelines.options import FinetuneOptions

    # --task offers the records, in this order
    assert FinetuneOptions.__dataclass_fields__["task"].metadata["choices"] == tuple(TASKS)
    assert tuple(TASKS) == ("classify", "pairs", "ner", "qa", "embedding")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.json").write_text("{}")
    ran = []
    results = {"steps": 3, "train_seconds": 1.0, "stop_reason": "max_steps", "dev_accuracy": 0.5, "test_f1": 81.25,
               "best_model": "o/best", "labels": ["a", "b"]}
    monkeypatch.setattr("bertkit.pipelines.qa.finetune_qa", lambda options: ran.append(options.task) or results)
    command = ["finetune", "--task", "qa", "--model", "m", "--train", "t.json", "--out", "o", "--max-steps", "3"]
    assert main(command) == 0
    assert ran == ["qa"]
    assert capsys.readouterr().out.splitlines() == [
        "fine-tuned 3 steps in 1 s (max_steps); dev_accuracy 0.50, test_f1 81.25", "best model in o/best"]
    assert TASKS["ner"].report(results)[1] == "best model (labels a, b) in o/best"
