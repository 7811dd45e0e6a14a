"""Run directories: a run is self-contained (a copy resumes where it is), holds a lock on its directory, and no
command writes over a run, a model or a file the user has; saved files follow the umask.

Every refusal is exit status 2 with one line `bertkit COMMAND: error: ...`, and the user's files are
byte-identical afterwards."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli import main
from bertkit.pipelines import options
from bertkit.pipelines.run_directory import (
    LOCK_NAME,
    MANIFEST_NAME,
    RunLock,
    RunLockedError,
    clear_run,
    run_directory,
)

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "。", *"的一是在不了有和人这中大为上个国我以要他时来用们生到作"]
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=64, vocab_size=len(VOCAB))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """A corpus of 30 documents, a vocabulary, a tiny config and a small classification set."""
    import random

    root = tmp_path_factory.mktemp("inputs")
    rng = random.Random(0)
    chars = VOCAB[6:]
    docs = ["\n".join("".join(rng.choice(chars) for _ in range(rng.randint(5, 12))) + "。" for _ in range(5))
            for _ in range(30)]
    (root / "corpus.txt").write_text("\n\n".join(docs), encoding="utf-8")
    (root / "vocab").mkdir()
    (root / "vocab" / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    (root / "tiny.json").write_text(json.dumps(TINY))
    rows = ["".join(rng.choice(chars) for _ in range(rng.randint(4, 10))) + f"\t{'ab'[i % 2]}" for i in range(40)]
    (root / "train.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (root / "dev.tsv").write_text("\n".join(rows[:10]) + "\n", encoding="utf-8")
    return root


def pretrain_argv(inputs: Path, out: Path, *extra: str) -> list[str]:
    return ["pretrain", "--corpus", str(inputs / "corpus.txt"), "--vocab", str(inputs / "vocab"), "--config",
            str(inputs / "tiny.json"), "--max-seq-length", "32", "--batch-size", "8", "--dupe-factor", "1",
            "--no-progress", "--log-every", "1", "--out", str(out), *extra]


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, command: str, *argv) -> str:
    """Run a command that must be refused: exit 2, one line in the command's voice; returns that line."""
    code, _, err = run(capsys, command, *argv)
    assert code == 2, err
    assert err.startswith(f"bertkit {command}: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def snapshot(root: Path) -> dict[str, str]:
    """Every file below `root` (hidden ones too) by relative path, with a hash of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(inputs, tmp_path_factory) -> Path:
    """A pretraining run of 4 steps with checkpoints at 2 and 4, started with relative paths from another cwd."""
    root = tmp_path_factory.mktemp("runs")
    cwd = os.getcwd()
    os.chdir(inputs)
    try:  # corpus.txt, vocab, tiny.json: relative to the working directory, as a user types them
        assert main(pretrain_argv(Path(""), root / "short", "--max-steps", "4", "--save-every", "2")) == 0
    finally:
        os.chdir(cwd)
    return root / "short"


# ---- 1. a run directory is self-contained --------------------------------------------------------

def test_a_run_records_its_paths_relative_to_itself_or_absolute(finished_run, inputs):
    saved = json.loads((finished_run / "pretrain_options.json").read_text())
    assert saved["out"] == "."
    assert saved["corpus"] == [str((inputs / "corpus.txt").resolve())]
    assert saved["vocab"] == str((inputs / "vocab").resolve())
    assert saved["config"] == str((inputs / "tiny.json").resolve())


def test_a_copied_run_resumes_in_its_copy_and_leaves_the_original_alone(finished_run, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(finished_run, copy)
    # the copy was taken while the run was killed after its step-2 checkpoint
    shutil.rmtree(copy / "checkpoint-4")
    (copy / "train_results.json").unlink()
    before = snapshot(finished_run)
    code, out, err = run(capsys, "pretrain", "--resume", copy, "--max-steps", "4", "--no-progress")
    assert code == 0, err
    assert f"in {copy}" in out and "pretrained 4 steps" in out
    assert snapshot(finished_run) == before  # nothing written into the original
    assert (copy / "checkpoint-4").is_dir() and (copy / "train_results.json").is_file()
    # and the resumed copy ends where the uninterrupted run ended
    a, b = load_file(finished_run / "model.safetensors"), load_file(copy / "model.safetensors")
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-6, rtol=0, msg=name)
    steps = [json.loads(line)["step"] for line in (copy / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


def test_a_moved_run_whose_inputs_are_gone_names_them(finished_run, inputs, tmp_path, capsys):
    moved_inputs = tmp_path / "inputs"
    shutil.copytree(inputs, moved_inputs)
    run_dir = tmp_path / "moved"
    shutil.copytree(finished_run, run_dir)
    (run_dir / "train_results.json").unlink()
    saved = json.loads((run_dir / "pretrain_options.json").read_text())
    saved["vocab"] = str(moved_inputs / "vocab")
    (run_dir / "pretrain_options.json").write_text(json.dumps(saved))
    shutil.rmtree(moved_inputs / "vocab")
    before = snapshot(run_dir)
    err = refused(capsys, "pretrain", "--resume", run_dir)
    assert f"--vocab {moved_inputs / 'vocab'}" in err and "no longer there" in err
    assert snapshot(run_dir) == before


def test_flags_given_with_resume_that_differ_from_the_run_are_refused(finished_run, tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    (run_dir / "train_results.json").unlink()
    before = snapshot(run_dir)
    err = refused(capsys, "pretrain", "--resume", run_dir, "--max-steps", "9", "--learning-rate", "0.1")
    assert "--max-steps 9 (the run's: 4)" in err and "--learning-rate 0.1 (the run's: 0.0005)" in err
    err = refused(capsys, "pretrain", "--resume", run_dir, "--out", tmp_path / "elsewhere")
    assert "another directory" in err
    err = refused(capsys, "pretrain", "--resume", run_dir, "--overwrite")
    assert "--overwrite" in err
    assert snapshot(run_dir) == before and not (tmp_path / "elsewhere").exists()


def test_resuming_a_finished_run_says_it_is_finished(finished_run, capsys):
    before = snapshot(finished_run)
    err = refused(capsys, "pretrain", "--resume", finished_run)
    assert "finished run: 4 steps" in err and "start a new run" in err
    assert snapshot(finished_run) == before


def test_options_paths_resolve_against_the_saved_file(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "corpus.txt").write_text("x")
    (tmp_path / "vocab").mkdir()
    made = options.PretrainOptions(corpus=[str(tmp_path / "run" / "corpus.txt"), "zh"], vocab=str(tmp_path / "vocab"),
                                   out=str(tmp_path / "run"), max_steps=2)
    made.save(tmp_path / "run" / "pretrain_options.json")
    saved = json.loads((tmp_path / "run" / "pretrain_options.json").read_text())
    assert (saved["out"], saved["corpus"], saved["config"]) == (".", ["corpus.txt", "zh"], "mini")
    shutil.move(tmp_path / "run", tmp_path / "moved")
    loaded = options.PretrainOptions.load(tmp_path / "moved" / "pretrain_options.json")
    assert loaded.out == str(tmp_path / "moved") and loaded.corpus == [str(tmp_path / "moved" / "corpus.txt"), "zh"]
    assert loaded.missing_paths() == []
    shutil.rmtree(tmp_path / "vocab")
    assert loaded.missing_paths() == [f"--vocab {tmp_path / 'vocab'}"]


# ---- 2. a run locks its directory ----------------------------------------------------------------

HOLD = ("import sys, time\nfrom bertkit.pipelines.run_directory import RunLock\n"
        "RunLock(sys.argv[1], 'bertkit pretrain').acquire()\nprint('locked', flush=True)\ntime.sleep(120)\n")


def hold_lock(directory: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(directory)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_run_on_a_directory_in_use_is_refused_naming_the_holder(inputs, tmp_path, capsys):
    out = tmp_path / "busy"
    out.mkdir()
    holder = hold_lock(out)
    try:
        before = snapshot(out)
        err = refused(capsys, "pretrain", *pretrain_argv(inputs, out, "--max-steps", "2")[1:])
        assert f"pid {holder.pid} on {socket.gethostname()}" in err and "bertkit pretrain" in err
        assert "started 20" in err and "in use by another run" in err
        assert snapshot(out) == before
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path):
    holder = hold_lock(tmp_path)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    stale = json.loads((tmp_path / LOCK_NAME).read_text())
    assert stale["pid"] == holder.pid  # the file stays; the operating system dropped the lock
    with pytest.warns(UserWarning, match=f"no longer running: bertkit pretrain \\(pid {holder.pid} "):
        lock = RunLock(tmp_path, "bertkit finetune").acquire()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    with pytest.raises(RunLockedError, match=f"bertkit finetune \\(pid {os.getpid()}"):
        RunLock(tmp_path, "bertkit pretrain").acquire()  # a second open file: refused, even in one process
    lock.release()
    assert not (tmp_path / LOCK_NAME).exists()


FORK_AND_HOLD = ("import multiprocessing, sys, time\nfrom bertkit.pipelines.run_directory import RunLock\n"
                 "RunLock(sys.argv[1], 'bertkit pretrain').acquire()\n"
                 "child = multiprocessing.get_context('fork').Process(target=time.sleep, args=(120,))\n"
                 "child.start()\nprint(child.pid, flush=True)\ntime.sleep(120)\n")


def test_a_process_forked_by_a_run_does_not_hold_its_lock(tmp_path):
    """A data loader's worker outlives a run killed with SIGKILL by a few seconds: meanwhile the run can be resumed."""
    holder = subprocess.Popen([sys.executable, "-c", FORK_AND_HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    child = int(holder.stdout.readline())
    try:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        os.kill(child, 0)  # the forked child still runs
        # the child lets go in its fork handler, which a busy machine may not have scheduled yet: wait for it
        lock, deadline = str(tmp_path / LOCK_NAME), time.time() + 30
        while time.time() < deadline and any(os.path.realpath(f"/proc/{child}/fd/{fd}") == lock
                                             for fd in os.listdir(f"/proc/{child}/fd")):
            time.sleep(0.05)
        with pytest.warns(UserWarning, match=f"no longer running: bertkit pretrain \\(pid {holder.pid} "):
            RunLock(tmp_path, "bertkit pretrain").acquire().release()
    finally:
        os.kill(child, signal.SIGKILL)


def test_only_the_main_process_of_a_torchrun_job_checks_and_locks(tmp_path):
    (tmp_path / "config.json").write_text("{}")  # a model: refused for the main process, not looked at by others
    (tmp_path / "model.safetensors").write_bytes(b"")
    with run_directory(tmp_path, "bertkit pretrain", main=False):
        assert not (tmp_path / LOCK_NAME).exists() and not (tmp_path / MANIFEST_NAME).exists()
    with pytest.raises(ValueError, match="holds files that bertkit did not write"):
        with run_directory(tmp_path, "bertkit pretrain"):
            pass


# ---- 3. nothing is written over a run, a model or a file -----------------------------------------

def writing_commands(inputs: Path, out: Path) -> dict[str, list[str]]:
    return {
        "pretrain": pretrain_argv(inputs, out, "--max-steps", "2")[1:],
        "finetune": ["--task", "classify", "--model", str(out.parent / "model"), "--train", str(inputs / "train.tsv"),
                     "--dev", str(inputs / "dev.tsv"), "--max-steps", "1", "--out", str(out)],
        "vocab": ["--corpus", str(inputs / "corpus.txt"), "--out", str(out)],
        "lm-train": ["--corpus", str(inputs / "corpus.txt"), "--max-steps", "1", "--size", "tiny", "--out", str(out)],
        "translate-train": ["--data", str(inputs / "train.tsv"), "--max-steps", "1", "--out", str(out)],
        "demo": ["--minutes", "1", "--out", str(out)],
    }


@pytest.fixture
def a_model(tmp_path) -> Path:
    from bertkit.models.bert.configuration import BertConfig
    from bertkit.models.bert.modeling import BertModel
    from bertkit.tokenizer import BertTokenizer

    path = tmp_path / "model"
    BertModel(BertConfig(**TINY)).save_pretrained(path)
    BertTokenizer({token: i for i, token in enumerate(VOCAB)}).save_pretrained(path)
    return path


@pytest.fixture
def bertkit_model(inputs, tmp_path) -> Path:
    """A model a bertkit command wrote (a pretraining run of one step): its manifest names bertkit's entries."""
    path = tmp_path / "model"
    assert main(pretrain_argv(inputs, path, "--max-steps", "1")) == 0
    return path


@pytest.mark.parametrize("command", ["pretrain", "finetune", "vocab", "lm-train", "translate-train", "demo"])
def test_a_finished_model_is_not_overwritten(command, inputs, bertkit_model, capsys):
    out = bertkit_model
    argv = writing_commands(inputs, out)[command]
    before = snapshot(out)
    err = refused(capsys, command, *argv)
    assert f"--out {out} already holds a bertkit run or model (" in err and "config.json" in err
    assert "--overwrite" in err
    assert snapshot(out) == before


@pytest.mark.parametrize("command", ["pretrain", "finetune", "vocab", "lm-train", "translate-train", "demo"])
def test_a_model_from_elsewhere_is_never_replaced(command, inputs, a_model, capsys):
    """A model directory bertkit did not write (transformers', a copied m3e-small, one saved through the Python
    API: no manifest), with or without --overwrite: refused, nothing in it changes, and the message does not offer
    --overwrite."""
    argv = writing_commands(inputs, a_model)[command]
    before = snapshot(a_model)
    for extra in ((), ("--overwrite",)):
        err = refused(capsys, command, *argv, *extra)
        assert f"--out {a_model} holds files that bertkit did not write (config.json, model.safetensors" in err
        assert "--overwrite" not in err
        assert snapshot(a_model) == before


@pytest.mark.parametrize("command", ["pretrain", "finetune", "vocab", "lm-train", "translate-train", "demo"])
def test_an_out_that_is_a_file_is_refused(command, inputs, a_model, tmp_path, capsys):
    out = tmp_path / "notes.txt"
    out.write_text("mine")
    err = refused(capsys, command, *writing_commands(inputs, out)[command])
    assert f"--out {out} is a file, not a directory" in err
    assert out.read_text() == "mine"


def test_a_directory_with_checkpoints_is_refused_without_a_traceback(finished_run, inputs, capsys):
    before = snapshot(finished_run)
    err = refused(capsys, "pretrain", *pretrain_argv(inputs, finished_run, "--max-steps", "2")[1:])
    assert "checkpoint-2, checkpoint-4" in err
    assert snapshot(finished_run) == before


def test_overwrite_replaces_what_bertkit_wrote_and_keeps_the_users_files(inputs, bertkit_model, capsys):
    (bertkit_model / "notes.txt").write_text("my notes")
    (bertkit_model / "data").mkdir()
    (bertkit_model / "data" / "mine.tsv").write_text("a\tb\n")
    code, out, err = run(capsys, "vocab", "--corpus", inputs / "corpus.txt", "--out", bertkit_model, "--overwrite")
    assert code == 0, err
    assert sorted(p.name for p in bertkit_model.iterdir()) == [MANIFEST_NAME, "data", "notes.txt",
                                                               "special_tokens_map.json", "tokenizer_config.json",
                                                               "vocab.txt"]
    assert json.loads((bertkit_model / MANIFEST_NAME).read_text())["entries"] == ["special_tokens_map.json",
                                                                                  "tokenizer_config.json", "vocab.txt"]
    assert (bertkit_model / "notes.txt").read_text() == "my notes"
    assert (bertkit_model / "data" / "mine.tsv").read_text() == "a\tb\n"


def test_a_manifest_cannot_make_a_users_file_bertkits(inputs, bertkit_model, capsys):
    """Only the names bertkit writes can be deleted, whatever the manifest says: one edited to name the user's
    notes.txt (or copied beside it) does not get it deleted by --overwrite."""
    (bertkit_model / "notes.txt").write_text("my notes")
    manifest = json.loads((bertkit_model / MANIFEST_NAME).read_text())
    manifest["entries"] = sorted([*manifest["entries"], "notes.txt"])
    (bertkit_model / MANIFEST_NAME).write_text(json.dumps(manifest))
    code, out, err = run(capsys, "vocab", "--corpus", inputs / "corpus.txt", "--out", bertkit_model, "--overwrite")
    assert code == 0, err
    assert (bertkit_model / "notes.txt").read_text() == "my notes"
    assert "config.json" not in {p.name for p in bertkit_model.iterdir()}  # the run's own entries did go


def test_clear_run_deletes_only_bertkit_entries(tmp_path):
    for name in ("config.json", "metrics.jsonl", "pretrain_options.json", "report.md", "notes.md", "vocab.txt"):
        (tmp_path / name).write_text("x")
    for name in ("checkpoint-4", "best", "source_tokenizer", "my-data", "pretrain"):
        (tmp_path / name).mkdir()
    assert clear_run(tmp_path, also=("pretrain",)) == ["best", "checkpoint-4", "config.json", "metrics.jsonl",
                                                       "pretrain", "pretrain_options.json", "report.md",
                                                       "source_tokenizer", "vocab.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my-data", "notes.md"]


def test_every_writing_command_has_overwrite():
    from test_cli_options import subparsers

    for command in ("pretrain", "finetune", "vocab", "translate-train", "lm-train", "demo"):
        flags = {flag for action in subparsers()[command]._actions for flag in action.option_strings}
        assert "--overwrite" in flags, command


# ---- saved files follow the umask ----------------------------------------------------------------

def test_every_file_a_run_writes_follows_the_umask(inputs, tmp_path):
    out = tmp_path / "runs"
    out.mkdir(mode=0o750)
    runs = [pretrain_argv(inputs, out / "pre", "--max-steps", "2", "--save-every", "1"),
            ["finetune", "--task", "classify", "--model", str(out / "pre"), "--train", str(inputs / "train.tsv"),
             "--dev", str(inputs / "dev.tsv"), "--max-steps", "2", "--batch-size", "8", "--max-length", "32",
             "--no-progress", "--out", str(out / "ft")],
            ["vocab", "--corpus", str(inputs / "corpus.txt"), "--out", str(out / "vocab")]]
    script = ("import json, os, sys\nos.umask(0o027)\nfrom bertkit.cli import main\n"
              "for argv in json.loads(sys.argv[1]):\n    assert main(argv) == 0, argv\n")
    done = subprocess.run([sys.executable, "-c", script, json.dumps(runs)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    written = sorted(out.rglob("*"))
    assert len(written) > 40
    wrong = [f"{oct(p.stat().st_mode & 0o777)} {p.relative_to(out)}" for p in written
             if p.stat().st_mode & 0o777 != (0o750 if p.is_dir() else 0o640)]
    assert not wrong, wrong
    names = {p.name for p in written}
    for name in ("metrics.jsonl", "optimizer.pt", "model.safetensors", "vocab.txt", "finetune_results.json",
                 "pretrain_options.json", "checkpoint-2", "best"):
        assert name in names, name
