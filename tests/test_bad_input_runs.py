"""Bad input to the commands that write runs: the user's files in an output directory, options that name a preset,
corpus, model or dataset where a folder of that name exists, and options whose values a run cannot honour.

A CLI error is exit status 2 and one line `bertkit COMMAND: error: ...` naming the problem; a warning is one
line `bertkit COMMAND: warning: ...`. docs/bad-input.md lists what each kind of bad input gets."""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForSequenceClassification
from bertkit.pipelines.run_directory import MANIFEST_NAME, entries
from bertkit.tokenizer import BertTokenizer
from test_bad_input import TINY, VOCAB, refused, run  # the one voice of a refusal


def tree(path: Path) -> dict[str, bytes]:
    """Every file below `path` and its bytes: what must be the same after a refused command."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """A vocabulary, a tiny classifier, a corpus, classification data and a tiny config."""
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


def pretrain_argv(ws: Path, out: Path, *extra) -> list:
    return ["--corpus", ws / "corpus.txt", "--vocab", ws / "vocab", "--config", ws / "tiny.json", "--max-steps", "2",
            "--max-seq-length", "32", "--batch-size", "8", "--no-progress", "--out", out, *extra]


def finetune_argv(ws: Path, out: Path, *extra) -> list:
    return ["--task", "classify", "--model", ws / "classifier", "--train", ws / "train.tsv", "--dev",
            ws / "train.tsv", "--max-length", "16", "--batch-size", "8", "--no-progress", "--out", out, *extra]


def prepare_argv(ws: Path, out: Path, *extra) -> list:
    return ["--corpus", ws / "corpus.txt", "--vocab", ws / "vocab", "--no-progress", "--out", out, *extra]


def users_directory(path: Path, *names: str) -> dict[str, bytes]:
    """A directory of the user's own files, some of the names bertkit writes; returns its tree."""
    path.mkdir()
    for name in names:
        (path / name).write_text(f"the user's own {name}\n")
    return tree(path)


def manifest(path: Path) -> list[str]:
    return json.loads((path / MANIFEST_NAME).read_text())["entries"]


# ---- 1. no file of the user's is touched: --overwrite replaces only what bertkit recorded writing ---------

NOT_BERTKITS = "holds files that bertkit did not write"


def test_prepare_never_deletes_the_users_config_and_metrics(ws, tmp_path, capsys):
    out = tmp_path / "exp"
    before = users_directory(out, "config.json", "metrics.jsonl", "notes.txt")
    for extra in ((), ("--overwrite",)):
        err = refused(capsys, "prepare", *prepare_argv(ws, out, *extra))
        assert f"--out {out} holds files that bertkit did not write (config.json, metrics.jsonl): they are not " \
               "bertkit's, and a run there could write over them; choose a new or empty directory" in err
        assert "--overwrite" not in err and "bertkit run or model" not in err
        assert tree(out) == before


def test_prepare_records_what_it_wrote_and_overwrite_deletes_only_that(ws, tmp_path, capsys):
    out = tmp_path / "store"
    assert run(capsys, "prepare", *prepare_argv(ws, out))[0] == 0
    assert manifest(out) == ["store.documents", "store.ids", "store.json", "store.sentences"]
    (out / "notes.txt").write_text("mine")
    assert "already holds a bertkit run or model (store.json); give --overwrite" in refused(
        capsys, "prepare", *prepare_argv(ws, out))
    (out / "config.json").write_text("mine")  # a file of a name bertkit writes, but the user's
    before = tree(out)
    err = refused(capsys, "prepare", *prepare_argv(ws, out, "--overwrite"))
    assert "bertkit did not write (config.json)" in err and "--overwrite" not in err
    assert tree(out) == before
    (out / "config.json").unlink()
    assert run(capsys, "prepare", *prepare_argv(ws, out, "--overwrite"))[0] == 0
    assert (out / "notes.txt").read_text() == "mine" and (out / "store.json").is_file()
    assert manifest(out) == ["store.documents", "store.ids", "store.json", "store.sentences"]


def test_pretrain_overwrite_keeps_the_users_files_and_refuses_theirs_of_bertkits_names(ws, tmp_path, capsys):
    out = tmp_path / "run"
    assert run(capsys, "pretrain", *pretrain_argv(ws, out))[0] == 0
    assert {"pretrain_options.json", "metrics.jsonl", "model.safetensors", "train_results.json"} <= set(manifest(out))
    (out / "analysis.ipynb").write_text("mine")
    assert run(capsys, "pretrain", *pretrain_argv(ws, out, "--overwrite"))[0] == 0
    assert (out / "analysis.ipynb").read_text() == "mine" and "analysis.ipynb" not in manifest(out)
    mine = users_directory(tmp_path / "mine", "report.json", "tokenizer.json")
    err = refused(capsys, "pretrain", *pretrain_argv(ws, tmp_path / "mine", "--overwrite"))
    assert f"{NOT_BERTKITS} (report.json, tokenizer.json)" in err and "--overwrite" not in err
    assert tree(tmp_path / "mine") == mine


def test_finetune_refuses_a_directory_of_the_users_model_files(ws, tmp_path, capsys):
    out = tmp_path / "exp"
    before = users_directory(out, "config.json", "vocab.txt")
    for extra in ((), ("--overwrite",)):
        err = refused(capsys, "finetune", *finetune_argv(ws, out, "--max-steps", "1", *extra))
        assert f"{NOT_BERTKITS} (config.json, vocab.txt)" in err and "--overwrite" not in err
    assert tree(out) == before


def test_vocab_overwrite_replaces_its_own_vocabulary_but_not_the_users(ws, tmp_path, capsys):
    out = tmp_path / "v"
    assert run(capsys, "vocab", "--corpus", ws / "corpus.txt", "--out", out)[0] == 0
    assert manifest(out) == ["special_tokens_map.json", "tokenizer_config.json", "vocab.txt"]
    assert "already holds a bertkit run or model" in refused(capsys, "vocab", "--corpus", ws / "corpus.txt",
                                                              "--out", out)
    assert run(capsys, "vocab", "--corpus", ws / "corpus.txt", "--out", out, "--overwrite")[0] == 0
    mine = users_directory(tmp_path / "mine", "vocab.txt")  # a vocabulary the user wrote by hand
    err = refused(capsys, "vocab", "--corpus", ws / "corpus.txt", "--out", tmp_path / "mine", "--overwrite")
    assert f"{NOT_BERTKITS} (vocab.txt)" in err
    assert tree(tmp_path / "mine") == mine


def test_a_run_of_an_earlier_bertkit_is_replaced_keeping_the_rest(ws, tmp_path, capsys):
    """No manifest, but what only a run leaves (options, results, weights): its entries of bertkit's names are
    its own; the user's other files stay."""
    out = tmp_path / "old"
    assert run(capsys, "pretrain", *pretrain_argv(ws, out))[0] == 0
    (out / MANIFEST_NAME).unlink()
    (out / "notes.txt").write_text("mine")
    assert "already holds a bertkit run or model" in refused(capsys, "pretrain", *pretrain_argv(ws, out))
    assert run(capsys, "pretrain", *pretrain_argv(ws, out, "--overwrite"))[0] == 0
    assert (out / "notes.txt").read_text() == "mine" and "notes.txt" not in manifest(out)


KILLED = ("import sys, time\nfrom pathlib import Path\nfrom bertkit.pipelines.run_directory import run_directory\n"
          "with run_directory(sys.argv[1], 'bertkit pretrain'):\n"
          "    out = Path(sys.argv[1])\n    (out / 'checkpoint-2').mkdir()\n"
          "    (out / 'metrics.jsonl').write_text('{}')\n"
          "    print('wrote', flush=True)\n    time.sleep(120)\n")


def test_what_a_killed_run_wrote_is_its_own_and_what_came_after_is_not(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("there before the run")
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "wrote"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert json.loads((out / MANIFEST_NAME).read_text())["open"]  # killed before it could close it
    (out / "later.txt").write_text("the user's, after the run was killed")
    found = entries(out)
    assert found.ours == {"checkpoint-2", "metrics.jsonl"} and found.foreign == set()
    assert found.others == {"notes.txt", "later.txt"}


def test_a_lone_config_and_metrics_are_not_taken_for_a_run(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "metrics.jsonl").write_text("")
    (tmp_path / "notes.txt").write_text("")
    found = entries(tmp_path)
    assert (found.ours, found.foreign, found.others) == (set(), {"config.json", "metrics.jsonl"}, {"notes.txt"})
    shutil.rmtree(tmp_path)


# ---- 2. a run records what its options meant: a name stays a name, and resumes as one ------------------

def resumable(run_dir: Path) -> Path:
    """The run as if killed after its step-2 checkpoint."""
    shutil.rmtree(run_dir / "checkpoint-4")
    (run_dir / "train_results.json").unlink()
    return run_dir


def test_a_preset_beside_a_folder_of_its_name_is_saved_as_the_preset_and_resumes(ws, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("tiny").mkdir()  # a folder of the user's that happens to be called tiny
    argv = pretrain_argv(ws, Path("run"), "--max-steps", "4", "--save-every", "2")
    argv[argv.index("--config") + 1] = "tiny"
    code, _, err = run(capsys, "pretrain", *argv)
    assert code == 0, err
    assert err == ("bertkit pretrain: warning: --config tiny is the preset tiny; the folder tiny in the working "
                   "directory is not read (to read it, give its path: ./tiny)\n")
    assert json.loads(Path("run/pretrain_options.json").read_text())["config"] == "tiny"
    shutil.copytree("run", "copy")
    code, out, err = run(capsys, "pretrain", "--resume", resumable(Path("run")), "--no-progress")
    assert code == 0 and "pretrained 4 steps" in out, err
    Path("tiny").rmdir()
    code, out, err = run(capsys, "pretrain", "--resume", resumable(Path("copy")), "--no-progress")
    assert code == 0 and "pretrained 4 steps" in out and err == "", err


def test_resuming_a_run_that_read_a_named_corpus_beside_a_folder_of_its_name_is_refused(ws, tmp_path, capsys,
                                                                                     monkeypatch):
    argv = pretrain_argv(ws, tmp_path / "run", "--max-steps", "4", "--save-every", "2")
    assert run(capsys, "pretrain", *argv)[0] == 0
    run_dir = resumable(tmp_path / "run")
    saved = json.loads((run_dir / "pretrain_options.json").read_text())
    (run_dir / "pretrain_options.json").write_text(json.dumps({**saved, "corpus": ["zh"]}))  # as if it read zh
    monkeypatch.chdir(tmp_path)
    Path("zh").mkdir()
    before = tree(run_dir)
    assert refused(capsys, "pretrain", "--resume", run_dir).endswith(
        f"the run in {run_dir} read the corpus zh, but here --corpus zh would read the folder zh in the working "
        "directory instead; resume it from another directory, or rename the folder")
    assert tree(run_dir) == before


def test_names_beside_paths_of_the_same_name_say_which_is_read(ws, tmp_path, monkeypatch):
    from bertkit.pipelines.options import FinetuneOptions, PretrainOptions

    monkeypatch.chdir(tmp_path)
    for name in ("zh", "m3e-small", "thucnews"):
        Path(name).mkdir()
    with pytest.warns(UserWarning) as said:
        pretraining = PretrainOptions(corpus=["zh"], init="m3e-small", out="run", max_steps=2)
        tuning = FinetuneOptions(task="classify", model="m3e-small", train="thucnews", out="ft", max_steps=2)
    assert [str(w.message) for w in said] == [
        "--corpus zh reads the folder zh in the working directory, not the corpus zh (to use the corpus, rename or "
        "move the folder, or run from another directory)",
        "--init m3e-small reads the folder m3e-small in the working directory, not the model m3e-small (to use the "
        "model, rename or move the folder, or run from another directory)",
        "--model m3e-small reads the folder m3e-small in the working directory, not the model m3e-small (to use the "
        "model, rename or move the folder, or run from another directory)",
        "--train thucnews is the dataset thucnews; the folder thucnews in the working directory is not read (to read "
        "it, give its path: ./thucnews)"]
    # what is read is what is saved: the folders as paths, the dataset as its name
    pretraining.save(tmp_path / "run" / "pretrain_options.json")
    saved = json.loads((tmp_path / "run" / "pretrain_options.json").read_text())
    assert saved["corpus"] == [str(tmp_path / "zh")] and saved["init"] == str(tmp_path / "m3e-small")
    assert ("--train", "thucnews") not in tuning.inputs() and ("--model", "m3e-small") in tuning.inputs()
    tuning.save(tmp_path / "ft" / "options.json")
    assert json.loads((tmp_path / "ft" / "options.json").read_text())["train"] == "thucnews"


def test_a_path_inside_the_run_that_reads_like_a_name_round_trips_as_a_path(tmp_path):
    from bertkit.pipelines.options import PretrainOptions

    (tmp_path / "run" / "zh").mkdir(parents=True)
    (tmp_path / "vocab").mkdir()
    made = PretrainOptions(corpus=[str(tmp_path / "run" / "zh"), "inews"], vocab=str(tmp_path / "vocab"),
                           out=str(tmp_path / "run"), max_steps=2)
    made.save(tmp_path / "run" / "pretrain_options.json")
    assert json.loads((tmp_path / "run" / "pretrain_options.json").read_text())["corpus"] == ["./zh", "inews"]
    shutil.move(tmp_path / "run", tmp_path / "moved")
    loaded = PretrainOptions.load(tmp_path / "moved" / "pretrain_options.json")
    assert loaded.corpus == [str(tmp_path / "moved" / "zh"), "inews"]


# ---- 3. an encoder held for the whole run is refused -----------------------------------------------------

def test_freezing_the_encoder_for_all_the_steps_is_refused(ws, tmp_path, capsys):
    argv = ["--corpus", ws / "corpus.txt", "--init", ws / "classifier", "--freeze-encoder-steps", "10", "--max-steps",
            "2", "--no-progress", "--out", tmp_path / "run"]
    assert refused(capsys, "pretrain", *argv).endswith(
        "--freeze-encoder-steps 10 is not less than --max-steps 2: the encoder would be held for the whole run and "
        "never train; give fewer --freeze-encoder-steps, or more --max-steps")
    argv[argv.index("10")] = "2"
    assert "--freeze-encoder-steps 2 is not less than --max-steps 2" in refused(capsys, "pretrain", *argv)
    assert not (tmp_path / "run").exists()


def test_freezing_the_encoder_for_all_the_steps_minutes_fit_is_refused_when_they_are_planned(ws, tmp_path):
    """With --minutes alone, pretraining times the run and remakes its options with the steps that fit: then."""
    import dataclasses

    from bertkit.pipelines.options import PretrainOptions

    made = PretrainOptions(corpus=[str(ws / "corpus.txt")], init=str(ws / "classifier"), freeze_encoder_steps=10,
                           minutes=0.5, out=str(tmp_path / "run"))
    with pytest.raises(ValueError, match=r"^--freeze-encoder-steps 10 is not less than the 8 steps the run trains at "
                                         r"most \(--max-steps, or what --minutes 0\.5 fits\): the encoder would be "
                                         r"held for the whole run and never train; give fewer --freeze-encoder-steps, "
                                         r"or more --max-steps or --minutes$"):
        dataclasses.replace(made, max_steps=8)  # as pipelines.pretrain does with the steps it planned
    assert dataclasses.replace(made, max_steps=11).max_steps == 11


def test_the_trainer_says_when_held_parameters_never_train(tmp_path, caplog):
    from bertkit.training.arguments import TrainingArguments
    from bertkit.training.trainer import Trainer

    model = BertForSequenceClassification(BertConfig(**TINY, id2label={0: "a", 1: "b"}))
    data = [{"input_ids": [2, 6 + i % 20, 3], "labels": i % 2} for i in range(8)]
    collate = lambda rows, seeds=None: {"input_ids": torch.tensor([r["input_ids"] for r in rows]),  # noqa: E731
                                        "labels": torch.tensor([r["labels"] for r in rows])}
    args = dict(output_dir=str(tmp_path), batch_size=4, device="cpu", progress=False, freeze=("bert.",))
    with caplog.at_level("WARNING", logger="bertkit"):
        Trainer(model, TrainingArguments(**args, max_steps=2, freeze_steps=2), data, collate)
        Trainer(model, TrainingArguments(**args, max_steps=3, freeze_steps=2), data, collate)
    assert [r.getMessage() for r in caplog.records] == [
        "freeze_steps 2 is not less than the run's 2 steps: the parameters it holds (bert.) are never trained"]


# ---- 4. a held-out share that cannot be honoured is refused ---------------------------------------------

def test_a_held_out_share_above_a_half_is_refused_saying_why(ws, tmp_path, capsys):
    from bertkit.pipelines.options import PretrainOptions

    argv = pretrain_argv(ws, tmp_path / "run", "--eval-fraction", "0.9")
    assert refused(capsys, "pretrain", *argv).endswith(
        "--eval-fraction 0.9 would hold out more than half of the documents: the held-out share is at most 0.5, so "
        "that at least as many documents are left to train on as are held out; give 0.5 or less")
    assert not (tmp_path / "run").exists()
    assert PretrainOptions(corpus=["zh"], vocab="v", out="o", max_steps=1, eval_fraction=0.5).eval_fraction == 0.5


# ---- 5. values that other options leave unused are said, values that cannot be honoured refused --------

UNUSED = [
    ("PretrainOptions", dict(masking="dynamic", dupe_factor=3),
     "--dupe-factor 3 is not used: it counts the differently masked copies of static masking; dynamic masking "
     "masks every instance afresh each epoch"),
    ("PretrainOptions", dict(eval_fraction=0.0, eval_every=5),
     "--eval-every 5 is not used: --eval-fraction 0 holds out no documents, so nothing is evaluated"),
    ("FinetuneOptions", dict(select_best=False, early_stopping_patience=5),
     "--patience 5 is not used: --keep-last keeps the last model, so no dev set is scored during the run (it only "
     "chooses the best checkpoint and stops the run early)"),
    ("FinetuneOptions", dict(select_best=False, dev="dev.tsv"), "--dev dev.tsv is not used: --keep-last keeps"),
    ("FinetuneOptions", dict(epochs=10.0), "--epochs 10 is not used: --max-steps 2 sets the run's length"),
    ("VisionTrainOptions", dict(epochs=1.0), "--epochs 1 is not used: --max-steps 2 sets the run's length"),
    ("TranslationOptions", dict(batch_tokens=400, batch_size=16),
     "--batch-size 16 is not used: --batch-tokens 400 sizes the batches instead"),
    ("TranslationOptions", dict(tune_length_penalty=True, length_penalty=1.4),
     "--length-penalty 1.4 is not used: --tune-length-penalty chooses it by BLEU on dev"),
    ("TranslationOptions", dict(num_beams=1, length_penalty=1.4),
     "--length-penalty 1.4 is not used: --beams 1 translates greedily, and a length penalty ranks the finished "
     "translations of a beam search"),
    ("LMOptions", dict(vocab="v", vocab_size=500),
     "--vocab-size 500 is not used: --vocab v is the vocabulary, and --vocab-size sizes one built from the corpus"),
    ("TranslationOptions", dict(attention_score="dot"), "--attention-score dot is not used: --model transformer has no "
                                                        "RNN attention"),
    ("TranslationOptions", dict(model="lstm-attention", gru_variant="tutorial"),
     "--gru-variant tutorial is not used: --model lstm-attention has no GRU"),
    ("LMOptions", dict(model="lstm", gru_variant="tutorial"),
     "--gru-variant tutorial is not used: --model lstm has no GRU"),
    ("LMOptions", dict(untie_embeddings=True),
     "--untie-embeddings is not used: --model gpt ties its output to its input embeddings"),
]
REQUIRED = {"PretrainOptions": dict(corpus=["zh"], vocab="v", out="o", max_steps=2),
            "FinetuneOptions": dict(task="classify", model="m", train="t.tsv", out="o", max_steps=2),
            "VisionTrainOptions": dict(data="mnist", out="o", max_steps=2),
            "TranslationOptions": dict(data="bible", out="o", max_steps=2),
            "LMOptions": dict(out="o", max_steps=2)}


@pytest.mark.parametrize("cls, given, said", UNUSED)
def test_a_value_other_options_leave_unused_is_said(cls, given, said, tmp_path, monkeypatch):
    from bertkit.pipelines import options

    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning) as warned:
        getattr(options, cls)(**REQUIRED[cls], **given)
    assert len(warned) == 1 and str(warned[0].message).startswith(said), str(warned[0].message)


@pytest.mark.parametrize("cls, given", [("PretrainOptions", dict(masking="dynamic")),  # the default 5: not typed
                                        ("PretrainOptions", dict(masking="dynamic", dupe_factor=1)),
                                        ("FinetuneOptions", dict(select_best=False)),
                                        ("TranslationOptions", dict(num_beams=1))])
def test_defaults_that_go_unused_are_not_said(cls, given, tmp_path, monkeypatch):
    import warnings

    from bertkit.pipelines import options

    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        getattr(options, cls)(**REQUIRED[cls], **given)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        options.recipe_options("crammed", **REQUIRED["PretrainOptions"])


def test_values_that_cannot_be_honoured_are_refused():
    from bertkit.pipelines import options

    with pytest.raises(ValueError, match=r"^--label-all-subtokens is for --task ner, not classify$"):
        options.FinetuneOptions(**REQUIRED["FinetuneOptions"], label_all_subtokens=True)
    # a task's own options given for another task are refused, each group named with the task it is for
    with pytest.raises(ValueError, match=r"^--doc-stride, --max-answer-length are for --task qa, not classify$"):
        options.FinetuneOptions(**REQUIRED["FinetuneOptions"], doc_stride=64, max_answer_length=10)
    with pytest.raises(ValueError, match=r"^--prompt is for --task classify, not pairs$"):
        options.FinetuneOptions(**{**REQUIRED["FinetuneOptions"], "task": "pairs"}, prompt="[MASK]：{text}")
    with pytest.raises(ValueError, match=r"^--temperature, --pooling are for --task embedding, not ner$"):
        options.FinetuneOptions(**{**REQUIRED["FinetuneOptions"], "task": "ner"}, temperature=0.1, pooling="cls")
    options.FinetuneOptions(**{**REQUIRED["FinetuneOptions"], "task": "qa"}, doc_stride=64)  # its own: taken
    with pytest.raises(ValueError, match=r"^--eval-fraction must be in \(0, 1\), got 0"):
        options.LMOptions(**REQUIRED["LMOptions"], eval_fraction=0.0)  # it held out one document all the same


def test_more_training_examples_asked_for_than_there_are_is_said(ws, tmp_path, capsys):
    code, _, err = run(capsys, "finetune", *finetune_argv(ws, tmp_path / "ft", "--max-steps", "1",
                                                          "--max-train-examples", "1000"))
    assert code == 0, err
    assert "bertkit finetune: warning: --max-train-examples 1000 is more than the 24 training examples: all 24 are " \
           "used\n" in err


def test_a_language_model_batch_larger_than_the_training_blocks_is_said(ws, tmp_path, capsys):
    code, _, err = run(capsys, "lm-train", "--corpus", ws / "corpus.txt", "--size", "tiny", "--block-size", "16",
                       "--batch-size", "1000", "--max-steps", "1", "--no-progress", "--out", tmp_path / "lm")
    assert code == 0, err
    assert re.search(r"warning: --batch-size 1000 is more than the (\d+) training blocks of 16 tokens: each step "
                     r"takes all \1\n", err), err


def test_more_test_pairs_asked_for_than_there_are_is_said(tmp_path, capsys):
    rng, digits = random.Random(0), "一二三四五六七八九十"
    words = "one two three four five six seven eight nine ten".split()
    rows = []
    for _ in range(120):
        picked = [rng.randrange(10) for _ in range(rng.randint(1, 4))]
        rows.append(" ".join(words[i] for i in picked) + "\t" + "".join(digits[i] for i in picked))
    (tmp_path / "numbers.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    code, _, err = run(capsys, "translate-train", "--data", tmp_path / "numbers.tsv", "--pair", "en-zh", "--size",
                       "tiny", "--batch-size", "16", "--max-steps", "1", "--max-test", "1000", "--beams", "1",
                       "--no-progress", "--out", tmp_path / "mt")
    assert code == 0, err
    assert err == "bertkit translate-train: warning: --max-test 1000 is more than the 12 test pairs: BLEU is scored " \
                  "on all 12\n"
