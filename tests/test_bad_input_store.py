# ruff: noqa: F811  (test_store's fixtures, imported: pytest finds them by the argument names that look redefined)
"""Bad input that token stores, their caches and resumed runs meet: every field of a damaged store.json named in one
line, a damaged cached store made again, a shared read-only store trained on, a store prepared again from other
text refused on resume, a directory corpus read whole and said, held-out figures with their support, and a plan
that would leave most of the text unused said."""

from __future__ import annotations

import json
import shutil

from bertkit.cli import main
from bertkit.data.pretraining import plans
from bertkit.data.pretraining.store import META, META_FIELDS, OPTIONAL, TokenStore, stores_home
from test_store import CONFIG, one_error_line, pretrain_argv, run_files, vocab, vocab_beside  # noqa: F401

WRONG = {str: 7, int: "7", bool: "yes", dict: [], list: {}}  # a value of another JSON type than each field's


def prepared(root, capsys):
    argv = ["prepare", "--corpus", str(root / "corpus.txt"), "--vocab", str(root.parent / "vocab"), "--out",
            str(root / "store"), "--no-progress"]
    assert main(argv) == 0
    capsys.readouterr()
    return root / "store"


def meta_damages() -> list[tuple[str, object]]:
    """Each field of store.json removed, and each retyped, in turn (a removed optional field is no damage)."""
    damages = [(name, ...) for name in META_FIELDS if name not in OPTIONAL]
    for name, (_, kind) in META_FIELDS.items():
        first = kind[0] if isinstance(kind, tuple) else kind
        damages.append((name, WRONG.get(first, "x")))
    return damages + [("dtype", "float99"), ("tokens", -1), ("sentences", 10 ** 9), ("inputs", [{"path": 3}])]


def test_every_field_of_a_damaged_store_json_is_named_in_one_line(vocab_beside, capsys):
    root = vocab_beside
    store = prepared(root, capsys)
    kept = json.loads((store / META).read_text())
    for name, value in meta_damages():
        damaged = {k: v for k, v in kept.items() if k != name}
        if value is not ...:
            damaged[name] = value
        (store / META).write_text(json.dumps(damaged))
        assert main(pretrain_argv(root, store, root / "run", "--max-steps", "1")) == 2, (name, value)
        said = one_error_line(capsys, "pretrain")
        assert str(store / META) in said and "damaged" in said or "does not describe" in said, (name, value, said)
        assert "prepare it again (bertkit prepare)" in said or "does not describe" in said, said
        assert not (root / "run").exists()
    (store / META).write_text(json.dumps(kept))
    for text in ("[]", "[" * 100_000, '"a string"', "null"):  # not an object at all, nested past any parser
        (store / META).write_text(text)
        assert main(pretrain_argv(root, store, root / "run", "--max-steps", "1")) == 2
        said = one_error_line(capsys, "pretrain")
        assert str(store / META) in said, said


def test_a_damaged_cached_store_is_made_again(vocab_beside, capsys):
    """A store bertkit made for a run is not the user's to prepare: a damaged one is made again, and said."""
    root = vocab_beside
    argv = pretrain_argv(root, root / "corpus.txt", root / "a", "--max-steps", "1")
    assert main(argv) == 0
    record = json.loads((root / "a" / "corpus_stores.json").read_text())[0]
    cached = TokenStore.open(record["store"]).path
    assert cached.parent == stores_home()
    meta = json.loads((cached / META).read_text())
    (cached / META).write_text(json.dumps({**meta, "dtype": "float99"}))
    capsys.readouterr()
    assert main(pretrain_argv(root, root / "corpus.txt", root / "b", "--max-steps", "1")) == 0
    err = capsys.readouterr().err
    assert "cannot be used" in err and "'dtype' is 'float99'" in err and "it is made again" in err, err
    assert TokenStore.open(cached).meta["dtype"] == "uint16"
    # damage found later than opening (an array) names the exact path to delete, not `bertkit prepare`
    (cached / "store.sentences").write_bytes((cached / "store.sentences").read_bytes()[:-8])
    shutil.rmtree(cached / "store.plans")
    meta = json.loads((cached / META).read_text())
    from bertkit.data.pretraining.store import remedy

    assert remedy(cached) == (f"delete {cached} (a store bertkit made for a run): the next run makes it again from "
                              "its text")
    assert "prepare it again" in remedy(root / "store")


def test_stores_home_naming_a_file_is_one_line(vocab_beside, capsys, monkeypatch):
    root = vocab_beside
    (root / "stores-file").write_text("not a directory")
    monkeypatch.setenv("BERTKIT_STORES", str(root / "stores-file"))
    assert main(pretrain_argv(root, root / "corpus.txt", root / "a", "--max-steps", "1")) == 2
    said = one_error_line(capsys, "pretrain")
    assert f"BERTKIT_STORES {root / 'stores-file'} is a file" in said


def test_a_store_that_cannot_be_written_trains_with_its_cached_plan_and_plans_elsewhere(vocab_beside, capsys,
                                                                                        monkeypatch):
    root = vocab_beside
    store = prepared(root, capsys)
    assert main(pretrain_argv(root, store, root / "a", "--max-steps", "1")) == 0
    made = sorted(p.name for p in (store / "store.plans").iterdir() if not p.name.startswith("."))

    def no_lock(*args, **kwargs):
        raise PermissionError("read-only file system")

    monkeypatch.setattr(plans, "locked", no_lock)   # reading a cached plan takes no lock (it would write)
    assert main(pretrain_argv(root, store, root / "b", "--max-steps", "1")) == 0
    monkeypatch.undo()
    # a plan not cached yet, beside a store this process may not write: kept in the stores' cache instead
    real_access = plans.os.access
    monkeypatch.setattr(plans.os, "access", lambda path, mode: False if str(path) == str(store) else
                        real_access(path, mode))
    assert main(pretrain_argv(root, store, root / "c", "--max-steps", "1", "--short-seq-prob", "0.3")) == 0
    assert sorted(p.name for p in (store / "store.plans").iterdir() if not p.name.startswith(".")) == made
    assert any((stores_home() / "plans").iterdir())


def test_resuming_on_a_store_prepared_again_from_other_text_is_refused(vocab_beside, capsys):
    root = vocab_beside
    store = prepared(root, capsys)
    argv = pretrain_argv(root, store, root / "run", "--max-steps", "4", "--save-every", "2")
    assert main([*argv]) == 0
    shutil.rmtree(root / "run" / "checkpoint-4")  # as if killed during step 3
    for name in ("train_results.json", "model.safetensors"):
        (root / "run" / name).unlink()
    text = (root / "corpus.txt").read_text(encoding="utf-8")
    (root / "other.txt").write_text(text[::-1], encoding="utf-8")
    assert main(["prepare", "--corpus", str(root / "other.txt"), "--vocab", str(root.parent / "vocab"), "--out",
                 str(store), "--overwrite", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["pretrain", "--resume", str(root / "run")]) == 2
    said = one_error_line(capsys, "pretrain")
    assert f"the store {store} holds other text than when the run in {root / 'run'} started" in said


def test_a_directory_corpus_reads_its_subdirectories_leaves_hidden_files_out_and_says_what_it_read(vocab_beside,
                                                                                                    capsys):
    root = vocab_beside
    folder = root / "texts"
    (folder / "sub").mkdir(parents=True)
    (folder / ".git").mkdir()
    (folder / "a.txt").write_text("第一篇。\n", encoding="utf-8")
    (folder / "sub" / "b.txt").write_text("第二篇。\n", encoding="utf-8")
    (folder / ".hidden.txt").write_text("隐藏。\n", encoding="utf-8")
    (folder / ".git" / "c.txt").write_text("版本。\n", encoding="utf-8")
    argv = ["prepare", "--corpus", str(folder), "--vocab", str(root.parent / "vocab"), "--out", str(root / "s"),
            "--no-progress"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "2 documents" in out and f"read 2 inputs: {folder / 'a.txt'}, {folder / 'sub' / 'b.txt'}" in out, out
    assert err.count("\n") == 1 and "reading 2 corpus files (a.txt, sub/b.txt); left out 2 hidden (.git, " \
        ".hidden.txt)" in err, err
    # a store prepared inside the corpus directory is not read as JSON, and a store is no corpus for prepare
    shutil.move(root / "s", folder / "store")
    assert main([*argv[:-2], str(root / "s2"), "--no-progress"]) == 0
    assert "left out 2 hidden (.git, .hidden.txt) and 1 token store (store)" in capsys.readouterr().err
    for given in (folder / "store", folder / "store" / "store.json"):
        argv_store = ["prepare", "--corpus", str(given), "--vocab", str(root.parent / "vocab"), "--out",
                      str(root / "s3"), "--no-progress"]
        assert main(argv_store) == 2
        assert f"is {'a file of ' if given.name == 'store.json' else ''}a token store, not text: `bertkit " \
               f"pretrain --corpus {folder / 'store'}` reads it" in one_error_line(capsys, "prepare")


def test_held_out_figures_carry_their_support_and_too_few_pairs_are_not_a_figure(vocab_beside, capsys):
    root = vocab_beside
    assert main(pretrain_argv(root, root / "corpus.txt", root / "a", "--max-steps", "2")) == 0
    out = capsys.readouterr().out
    assert "mlm_accuracy" in out and " predictions)" in out
    assert "nsp_accuracy not reported (6 held-out pairs, fewer than 20: hold out more documents)" in out, out
    last = json.loads((root / "a" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["eval_nsp_pairs"] == 6 and "eval_nsp_accuracy" not in last


def test_a_corpus_too_small_to_hold_documents_out_trains_on_all_of_them_and_says_so(vocab_beside, capsys):
    root = vocab_beside
    (root / "two.txt").write_text("第一篇的句子。\n还有一句。\n\n第二篇的句子。\n再一句。\n", encoding="utf-8")
    assert main(pretrain_argv(root, root / "two.txt", root / "a", "--max-steps", "1")) == 0
    out, err = capsys.readouterr()
    assert "the corpus has 2 documents: too few to hold any out" in err and "Traceback" not in err, err
    assert "mlm_accuracy" not in out  # nothing held out: no held-out figures


def test_a_plan_that_leaves_most_of_the_text_unused_says_so(vocab_beside, capsys):
    root = vocab_beside
    # Chinese text without a sentence end: each line two sentences of 45 tokens (at most 64 a sentence), where an
    # instance of --max-seq-length 16 holds 14
    chars = "".join(c for c in (root / "corpus.txt").read_text(encoding="utf-8") if "\u4e00" <= c <= "\u9fff")
    (root / "long.txt").write_text("\n\n".join(chars[i:i + 90] for i in range(0, 900, 90)), encoding="utf-8")
    assert main(pretrain_argv(root, root / "long.txt", root / "a", "--max-steps", "1", "--objective", "mlm",
                              "--max-seq-length", "16")) == 0
    out, err = capsys.readouterr()
    assert "the training instances hold" in err and "sentences longer than --max-seq-length 16 are cut" in err, err
    report = json.loads((root / "a" / "data_report.json").read_text())
    assert report["measured"]["planned_tokens"] < report["measured"]["document_tokens"] / 2


def test_init_from_a_question_answering_model_drops_its_reader_head(tmp_path):
    """`pretrain --init` of a QA model: its qa_outputs are another task's head, left out (not a config mismatch)."""
    import warnings

    from bertkit.models.bert.configuration import BertConfig
    from bertkit.models.bert.heads import BertForMaskedLM, BertForPreTraining, BertForQuestionAnswering

    config = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32)
    BertForQuestionAnswering(config).save_pretrained(tmp_path / "reader")
    for head in (BertForMaskedLM, BertForPreTraining):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the pretraining heads start fresh, and a warning says so
            model = head.from_pretrained(tmp_path / "reader")
        assert not any(name.startswith("qa_outputs") for name in model.state_dict())


def test_pretrain_refuses_a_stream_as_its_corpus(vocab_beside, capsys):
    """A pipe has no path, size and time to cache its store by, and a resumed run could not read it again."""
    import os
    import threading

    root = vocab_beside
    fifo = root / "pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: (fifo.open("w").close()), daemon=True)  # an opened, empty stream
    writer.start()
    assert main(pretrain_argv(root, fifo, root / "a", "--max-steps", "1")) == 2
    said = one_error_line(capsys, "pretrain")
    assert f"--corpus {fifo} is a pipe or standard input" in said and "bertkit prepare --corpus" in said
    assert not (root / "a").exists()
