"""One error family (bertkit.errors) and how the command line sorts what escapes a command: what the user can fix
is one line and exit status 2; anything else is a bug in bertkit, said in one line that names a file keeping its
traceback, with exit status 3."""

from __future__ import annotations

import ast
import importlib
import pickle
import tempfile
from pathlib import Path

import pytest

import bertkit
from bertkit import errors
from bertkit.cli import main

SRC = Path(bertkit.__file__).parent


@pytest.fixture
def crash_dir(tmp_path, monkeypatch) -> Path:
    """The temporary directory, where a command keeps the traceback of a bug: this test's own."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ---- the family ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, builtin", [(errors.InputError, ValueError), (errors.ConfigError, ValueError),
                                           (errors.DataError, ValueError), (errors.SourceError, RuntimeError)])
def test_each_kind_is_a_bertkit_error_and_the_builtin_it_replaces(kind, builtin):
    assert issubclass(kind, errors.BertkitError) and issubclass(kind, builtin)
    with pytest.raises(builtin, match="^--batch-size must be at least 1, got 0$"):  # old `except` clauses catch it
        raise kind("--batch-size must be at least 1, got 0")
    with pytest.raises(errors.BertkitError):
        raise kind("x")
    assert not issubclass(errors.BertkitError, (ValueError, RuntimeError, OSError))


# (where it is defined, the kind of the family it is, the builtins it was before and still is)
PACKAGE_ERRORS = [
    ("bertkit.data.pretraining.store:StoreError", errors.DataError, (ValueError,)),
    ("bertkit.data.lines:NotTextError", errors.DataError, (ValueError,)),
    ("bertkit.data.quality:DataQualityError", errors.DataError, (ValueError,)),
    ("bertkit.data.qa:NotSquadError", errors.DataError, (ValueError,)),
    ("bertkit.data.prompts:PromptError", errors.InputError, (ValueError,)),
    ("bertkit.data.pickles:UnsafePickleError", errors.BertkitError, (pickle.UnpicklingError,)),
    ("bertkit.models.checkpoint:CheckpointError", errors.DataError, (ValueError,)),
    ("bertkit.training.checkpointing:TrainingCheckpointError", errors.BertkitError, (FileNotFoundError,)),
    ("bertkit.training.checkpointing:RunFinishedError", errors.InputError, (ValueError,)),
    ("bertkit.inference.batching:InputTooLongError", errors.InputError, (ValueError,)),
    ("bertkit.inference.batching:NonFiniteOutputError", errors.DataError, (ValueError, FloatingPointError)),
    ("bertkit.inference.export:ExportError", errors.InputError, (ValueError,)),
    ("bertkit.pipelines.predict:EvaluationDataError", errors.DataError, (ValueError,)),
    ("bertkit.pipelines.run_directory:OutputDirectoryError", errors.InputError, (ValueError,)),
    ("bertkit.pipelines.run_directory:RunLockedError", errors.InputError, (ValueError,)),
    ("bertkit.pipelines.run_directory:OutputFileError", errors.InputError, (ValueError,)),
]


def _resolve(dotted: str) -> type:
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("dotted, kind, builtins", PACKAGE_ERRORS, ids=[row[0] for row in PACKAGE_ERRORS])
def test_the_packages_error_classes_join_the_family_and_keep_their_builtins(dotted, kind, builtins):
    cls = _resolve(dotted)
    assert issubclass(cls, kind) and issubclass(cls, builtins)
    err = pickle.loads(pickle.dumps(cls("a message for people")))  # a worker process hands errors back pickled
    assert type(err) is cls and str(err) == "a message for people"


def test_the_shared_kinds_are_importable_where_they_were():
    from bertkit.data.sources import SourceError
    from bertkit.models.configuration import ConfigError

    assert SourceError is errors.SourceError and ConfigError is errors.ConfigError


# The `raise ValueError(...)` left in the source: checks of what bertkit itself made (a collate function is never
# handed an empty batch; the trainer and its heads agree on loss terms; the command line names its own commands; no
# two task modules register one name).
# What the user gave is refused with an InputError (or the kind that fits), so the command line says it in one line.
INTERNAL_VALUE_ERRORS = {
    "data/images.py": 1, "data/pretraining/instances.py": 2, "data/task_kinds.py": 1, "models/registry.py": 1,
    "pipelines/finetune.py": 1, "pipelines/lm.py": 1, "pipelines/qa.py": 1,
    "pipelines/summarization/pointer_generator.py": 1, "pipelines/summarization/unilm.py": 1,
    "pipelines/translation.py": 1,
    "training/embedding_model.py": 2, "training/trainer.py": 1,
}


def test_only_internal_checks_raise_a_bare_value_error():
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        raises = [node for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                  if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
                  and isinstance(node.exc.func, ast.Name) and node.exc.func.id == "ValueError"]
        if raises:
            found[path.relative_to(SRC).as_posix()] = len(raises)
    assert found == INTERNAL_VALUE_ERRORS


# ---- the command line ----------------------------------------------------------------------------

def test_an_input_error_from_the_library_is_one_line_and_exit_2(capsys, crash_dir):
    from bertkit.data import sources

    with pytest.raises(errors.InputError):
        sources.get_source("no-such-source")
    code, out, err = run(capsys, "data", "fetch", "no-such-source")
    assert code == 2 and out == ""
    assert err.startswith("bertkit data: error: unknown source 'no-such-source'; known: ") and err.count("\n") == 1
    assert list(crash_dir.iterdir()) == []  # no bug, no traceback kept


@pytest.mark.parametrize("error, said", [
    (errors.DataError("cannot read weights file m/model.safetensors: it is truncated"),
     "cannot read weights file m/model.safetensors: it is truncated"),
    (errors.SourceError("pip could not download x==1.0"), "pip could not download x==1.0"),
    (FileNotFoundError(2, "No such file or directory", "corpus.txt"), "corpus.txt: no such file or directory"),
    (IsADirectoryError(21, "Is a directory", "runs"), "runs: is a directory"),
    (pickle.UnpicklingError("invalid load key, 'x'."), "invalid load key, 'x'."),
], ids=["DataError", "SourceError", "FileNotFoundError", "IsADirectoryError", "UnpicklingError"])
def test_what_the_user_can_fix_is_one_line_and_exit_2(monkeypatch, capsys, crash_dir, error, said):
    from bertkit.data import sources

    def fails(name):
        raise error

    monkeypatch.setattr(sources, "get_source", fails)
    assert run(capsys, "data", "fetch", "m3e-small") == (2, "", f"bertkit data: error: {said}\n")
    assert list(crash_dir.iterdir()) == []


@pytest.mark.parametrize("error", [
    ValueError("shapes (3,) and (4,) not aligned: 4 (dim 0) != 3 (dim 0)"),
    TypeError("unsupported operand type(s) for +: 'int' and 'NoneType'"),
    KeyError("input_ids"),
    IndexError("list index out of range"),
], ids=lambda e: type(e).__name__)
def test_anything_else_is_a_bug_with_its_traceback_in_a_file_and_exit_3(monkeypatch, capsys, crash_dir, error):
    from bertkit.data import sources

    def deep_inside(name):
        raise error

    monkeypatch.setattr(sources, "get_source", deep_inside)
    code, out, err = run(capsys, "data", "fetch", "m3e-small")
    assert code == 3 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    what = f"{type(error).__name__}: {error}"
    assert err.startswith(f"bertkit data: bug: {what} (a bug in bertkit, not in what you gave it; "), err
    (kept,) = crash_dir.glob("bertkit-crash-*.txt")
    assert f"its traceback is in {kept}: please include it when you report the bug)\n" in err
    text = kept.read_text(encoding="utf-8")
    assert "command: bertkit data fetch m3e-small\n" in text
    assert "Traceback (most recent call last):" in text and "in deep_inside" in text and "_cmd_data" in text
    assert text.rstrip().endswith(what)


def test_a_bug_where_no_file_can_be_written_prints_its_traceback(monkeypatch, capsys, tmp_path):
    from bertkit.data import sources

    def deep_inside(name):
        raise TypeError("'NoneType' object is not subscriptable")

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    monkeypatch.setattr(sources, "get_source", deep_inside)
    code, _, err = run(capsys, "data", "fetch", "m3e-small")
    lines = err.splitlines()
    assert code == 3
    assert lines[0] == ("bertkit data: bug: TypeError: 'NoneType' object is not subscriptable (a bug in bertkit, not "
                        "in what you gave it; its traceback follows)")
    assert lines[1] == "Traceback (most recent call last):" and "in deep_inside" in err
    assert lines[-1] == "TypeError: 'NoneType' object is not subscriptable"


def test_a_diverged_run_is_exit_1_and_ctrl_c_is_130(monkeypatch, capsys, crash_dir):
    from bertkit.data import sources
    from bertkit.training.trainer import TrainingError

    def diverges(name):
        raise TrainingError("training stopped at step 3: loss is nan, so the run diverged", 3, None)

    monkeypatch.setattr(sources, "get_source", diverges)
    assert run(capsys, "data", "fetch", "m3e-small") == (
        1, "", "bertkit data: error: training stopped at step 3: loss is nan, so the run diverged\n")

    def interrupted(name):
        raise KeyboardInterrupt

    monkeypatch.setattr(sources, "get_source", interrupted)
    assert run(capsys, "data", "fetch", "m3e-small") == (130, "", "bertkit data: interrupted\n")
    assert list(crash_dir.iterdir()) == []


def test_out_of_memory_is_one_line_naming_the_commands_own_options_and_exit_1(monkeypatch, capsys, crash_dir):
    """The GPU's or the machine's memory running out is not a bug: one line, what torch tried to allocate, and the
    options of that command that ask for less."""
    import torch

    from bertkit.cli import _out_of_memory, build_parser
    from bertkit.inference import loading

    gpu = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                                 "79.19 GiB of which 1.06 GiB is free. Of the allocated memory 75.2 GiB is ...")
    for error, where in ((gpu, "the GPU ran out of memory (CUDA out of memory. Tried to allocate 2.00 GiB)"),
                         (MemoryError(), "this machine ran out of memory")):
        def too_big(*args, error=error, **kwargs):
            raise error

        monkeypatch.setattr(loading, "load_text_model", too_big)
        assert run(capsys, "encode", "--model", "m", "好") == (
            1, "", f"bertkit encode: error: {where}: give a smaller --batch-size, --batch-tokens or --max-length, or "
                   "--dtype bf16\n")
    assert list(crash_dir.iterdir()) == []
    parser = build_parser()
    pretrain = parser.parse_args(["pretrain", "--corpus", "c", "--vocab", "v", "--out", "o", "--bf16"])
    assert _out_of_memory(parser, pretrain, gpu).endswith(
        ": give a smaller --batch-size (with --gradient-accumulation-steps for the same batch a step) or "
        "--max-seq-length")  # --bf16 given: not offered again
    assert _out_of_memory(parser, parser.parse_args(["serve", "m"]), gpu).endswith(": give a smaller "
                                                                                    "--max-batch-tokens")
    assert _out_of_memory(parser, parser.parse_args(["demo"]), gpu).endswith("2.00 GiB)")  # no options to give
    assert _out_of_memory(parser, pretrain, RuntimeError("CUDA error: an illegal memory access")) is None
