"""Token stores (data/pretraining/: store.py, store_writer.py, store_cache.py, corpus_stream.py): the tokenizer's
ids, documents and sentences as the readers see them, every input kind, worker processes, the cache that a second
run and a resume find, and damaged stores or changed inputs named."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli import main
from bertkit.data.corpus import read_text_documents
from bertkit.data.pretraining import corpus_stream
from bertkit.data.pretraining import plans as plan_cache
from bertkit.data.pretraining.store import META, TokenStore
from bertkit.data.pretraining.store_cache import cached_store
from bertkit.data.pretraining.store_writer import prepare_store
from bertkit.data.readers import DataWarning
from bertkit.data.vocab import build_char_vocab
from bertkit.tokenizer import BertTokenizer

TEXT = ("今天天气很好。我们去公园吧！你来吗？\n第二行没有句号\r\n\n\n"
        "Second doc. It is English, mostly: Mr. Smith went to Washington. He arrived!\n"
        "一个很长的句子" + "，它一直没有结束" * 30 + "。\n\n"
        "  \u3000 \n"                     # a blank line in full-width spaces
        "第三篇。带一个生僻字𪚥。\n"          # a character the vocabulary lacks: [UNK]
        "\x1c\n"                          # a line of nothing but a separator: no sentence, no token
        "最后一行\n")


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    root = tmp_path_factory.mktemp("store-vocab")
    return build_char_vocab([TEXT.replace("𪚥", ""), "结尾。"], root / "vocab")


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes("\ufeff".encode() + TEXT.encode("utf-8") + "坏的一行\n".encode("gbk") + "结尾。".encode())
    return path


def documents_of(store: TokenStore) -> list[list[list[int]]]:
    """The store's token ids as documents of sentences."""
    out = []
    for d in range(store.num_documents):
        first, end = int(store.document_offsets[d]), int(store.document_offsets[d + 1])
        out.append([np.asarray(store.ids[store.sentence_offsets[s]:store.sentence_offsets[s + 1]]).tolist()
                    for s in range(first, end)])
    return out


def expected_documents(documents: list[list[str]], tokenizer) -> list[list[list[int]]]:
    """What a store must hold: each sentence tokenized alone, empty sentences and documents dropped."""
    ids = [[row for row in tokenizer([s for s in doc], add_special_tokens=False)["input_ids"] if row]
           for doc in documents]
    return [doc for doc in ids if doc]


def backend_or_skip(vocab, backend: str) -> BertTokenizer:
    """The tokenizer of `vocab` in `backend`; skips the Rust one where `tokenizers` is not installed."""
    from bertkit.tokenizer import fast

    if backend == "fast" and not fast.available():
        pytest.skip("the Rust `tokenizers` package is not installed")
    tokenizer = BertTokenizer.from_pretrained(vocab, backend=backend)
    assert tokenizer.backend == backend
    return tokenizer


@pytest.mark.parametrize("backend", ["python", "fast"])
def test_the_store_holds_the_tokenizers_ids_in_the_readers_documents(corpus, vocab, tmp_path, monkeypatch, backend):
    tokenizer = backend_or_skip(vocab, backend)
    monkeypatch.setattr(corpus_stream, "CHUNK_BYTES", 64)  # documents and sentences span chunks
    with pytest.warns(DataWarning, match=r"corpus.txt: skipped 1 line, kept 4: undecodable bytes \(line 12\)"):
        store = prepare_store([str(corpus)], tokenizer, tmp_path / "store", progress=False)
    with pytest.warns(DataWarning):
        documents = read_text_documents(corpus)
    assert len(documents) == 4
    # the ids of the Python backend, whichever backend made the store
    assert documents_of(store) == expected_documents(documents, BertTokenizer.from_pretrained(vocab, backend="python"))
    unknown = tokenizer.unk_token_id
    assert store.meta["unknown_tokens"] == 1 and int(np.count_nonzero(np.asarray(store.ids) == unknown)) == 1
    assert store.meta["tokens"] == len(store.ids) and store.meta["dtype"] == "uint16"
    # worker processes write the same store, byte for byte
    with pytest.warns(DataWarning):
        parallel = prepare_store([str(corpus)], tokenizer, tmp_path / "parallel", workers=2, progress=False)
    for name in ("store.ids", "store.sentences", "store.documents"):
        assert (parallel.path / name).read_bytes() == (store.path / name).read_bytes(), name


MIXED = ("BERT's tokenizer splits unaffable words: un##aff##able, naïve Café résumé 3.14159!\n"
         "北京是中国的首都，也是一座历史悠久的城市。東京と大阪。\n\n"
         "Émile Zola wrote «J'accuse…!» in 1898 — tokenizers' edge cases: e-mail, U.S.A., x²+y², 😀 and \u00ad soft.\n"
         "混合 text 中文 mixed 一起 with ＦＵＬＬ-width ＡＢＣ and numbers 12,345.67。\n")


@pytest.mark.network
@pytest.mark.parametrize("backend", ["python", "fast"])
@pytest.mark.parametrize("model", ["all-MiniLM-L6-v2", "m3e-small"])
def test_the_store_holds_the_ids_of_real_wordpiece_vocabularies(tmp_path, model, backend):
    """An English WordPiece vocabulary (lowercase, accents stripped, ## pieces) and a Chinese BERT's: the store made
    by either backend, in worker processes, holds the Python backend's ids of every sentence."""
    from conftest import model_dir_or_skip

    directory = model_dir_or_skip(model)
    path = tmp_path / "mixed.txt"
    path.write_text(MIXED * 3, encoding="utf-8")
    store = prepare_store([str(path)], backend_or_skip(directory, backend), tmp_path / "store", workers=2,
                          progress=False)
    python = BertTokenizer.from_pretrained(directory, backend="python")
    assert documents_of(store) == expected_documents(read_text_documents(path), python)
    assert any(python.convert_ids_to_tokens(i).startswith("##") for i in np.asarray(store.ids).tolist())


def test_a_vocabulary_past_65536_tokens_is_stored_in_uint32(tmp_path):
    chars = [chr(0x4E00 + k) for k in range(20000)]
    extra = [f"tok{k}" for k in range(1 << 16)]
    vocab = tmp_path / "big-vocab"
    vocab.mkdir()
    (vocab / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *extra, *chars]) + "\n",
                                     encoding="utf-8")
    tokenizer = BertTokenizer.from_pretrained(vocab)
    text = "".join(chars[k] for k in range(0, 20000, 37))
    (tmp_path / "corpus.txt").write_text(text + "。\n\n" + text[::-1] + "\n", encoding="utf-8")
    store = prepare_store([str(tmp_path / "corpus.txt")], tokenizer, tmp_path / "store", progress=False)
    assert store.meta["dtype"] == "uint32" and store.ids.dtype == np.uint32
    ids = np.asarray(store.ids).tolist()
    assert max(ids) > 1 << 16 and ids == tokenizer(text + "。", add_special_tokens=False)["input_ids"] + tokenizer(
        text[::-1], add_special_tokens=False)["input_ids"]


def test_jsonl_gzip_other_encodings_and_directories(vocab, tmp_path):
    tokenizer = BertTokenizer.from_pretrained(vocab)
    records = ["今天天气很好。我们去公园吧！\n第二行没有句号", "Second doc. It is English."]
    lines = [json.dumps({"text": records[0]}, ensure_ascii=False), "not json", json.dumps({"title": "x"}),
             json.dumps([1]), json.dumps({"content": records[1]})]
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with gzip.open(folder / "b.txt.gz", "wb") as f:  # an undecodable line inside: skipped and counted, not fatal
        f.write("第三篇。\n".encode() + "坏行\n".encode("gbk") + "\n第四篇！".encode())
    with gzip.open(folder / "c.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(json.dumps({"sentence": "第五篇。"}, ensure_ascii=False) + "\n")
    (folder / "notes.md").write_text("not read")
    (folder / ".draft.txt").write_text("隐藏的文件。")  # hidden: left out, and said
    with pytest.warns(DataWarning) as warned:
        store = prepare_store([str(folder)], tokenizer, tmp_path / "store", progress=False)
    said = sorted(str(w.message) for w in warned)
    assert len(said) == 3
    assert said[2].endswith("in: reading 3 corpus files (a.jsonl, b.txt.gz, c.jsonl.gz); left out 1 hidden "
                            "(.draft.txt)"), said
    assert re.search(r"a.jsonl: skipped 3 lines, kept 2: invalid JSON \(line 2\); no text field .*\(line 3\); not a "
                     r"JSON object \(line 4\)", said[0]), said
    assert re.search(r"b.txt.gz: skipped 1 line, kept 2: undecodable bytes \(line 2\)", said[1]), said
    texts = [[s for part in r.splitlines() for s in read_sentences(part)] for r in records]
    texts += [["第三篇。"], ["第四篇！"], ["第五篇。"]]
    assert documents_of(store) == expected_documents(texts, tokenizer)
    # the same text in UTF-16 and GBK, with --encoding
    for encoding in ("utf-16", "gbk"):
        path = tmp_path / f"{encoding}.txt"
        path.write_bytes("第三篇。\n\n第四篇！\n".encode(encoding))
        other = prepare_store([str(path)], tokenizer, tmp_path / encoding, encoding=encoding, progress=False)
        assert documents_of(other) == documents_of(store)[2:4]


def read_sentences(text: str) -> list[str]:
    from bertkit.data.corpus import guess_lang, split_sentences

    return split_sentences(text, guess_lang(text))


def test_whole_word_starts_are_jiebas_words(corpus, vocab, tmp_path):
    import jieba

    tokenizer = BertTokenizer.from_pretrained(vocab)
    with pytest.warns(DataWarning):
        store = prepare_store([str(corpus)], tokenizer, tmp_path / "store", whole_word=True, progress=False)
        documents = read_text_documents(corpus)
    ids, starts = [], []
    for sentence in (s for doc in documents for s in doc):
        for word in (w for w in jieba.lcut(sentence) if w.strip()):
            pieces = tokenizer(word, add_special_tokens=False)["input_ids"]
            ids += pieces
            starts += [True] + [False] * (len(pieces) - 1)
    assert np.asarray(store.ids).tolist() == ids
    assert store.word_starts(0, len(ids)).tolist() == starts
    assert store.word_starts(5, 17).tolist() == starts[5:17]
    assert not all(starts)  # jieba's words hold several characters each


def test_binary_files_and_unknown_corpora_are_named(vocab, tmp_path):
    tokenizer = BertTokenizer.from_pretrained(vocab)
    (tmp_path / "model.bin").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    with pytest.raises(ValueError, match="model.bin is not a text file: it holds NUL bytes"):
        prepare_store([str(tmp_path / "model.bin")], tokenizer, tmp_path / "store", progress=False)
    (tmp_path / "gbk.txt").write_bytes("北京是中国的首都\n".encode("gbk") * 10 + b"ok\n")
    with pytest.raises(ValueError, match="gbk.txt is not utf-8 text: 10 of 11 lines do not decode"):
        prepare_store([str(tmp_path / "gbk.txt")], tokenizer, tmp_path / "store", progress=False)
    with pytest.raises(FileNotFoundError, match="corpus 'nope' is neither a file nor one of zh"):
        prepare_store(["nope"], tokenizer, tmp_path / "store", progress=False)
    assert not (tmp_path / "store" / META).exists()


def test_the_cache_is_found_again_and_a_changed_file_is_a_new_store(corpus, vocab, monkeypatch):
    tokenizer = BertTokenizer.from_pretrained(vocab)
    calls = []
    tokenize = corpus_stream.tokenize_chunk
    monkeypatch.setattr(corpus_stream, "tokenize_chunk", lambda chunk: calls.append(1) or tokenize(chunk))
    with pytest.warns(DataWarning):
        first = cached_store([str(corpus)], tokenizer, progress=False)
    made = len(calls)
    assert made > 0
    assert cached_store([str(corpus)], tokenizer, progress=False).path == first.path and len(calls) == made
    with open(corpus, "a", encoding="utf-8") as f:
        f.write("\n\n又一篇。\n")
    with pytest.warns(DataWarning):
        second = cached_store([str(corpus)], tokenizer, progress=False)
    assert second.path != first.path and len(calls) > made and second.num_documents == first.num_documents + 1


# ---- through the command line ----------------------------------------------------------------------

CONFIG = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
              max_position_embeddings=64)


@pytest.fixture
def run_files(vocab, tmp_path):
    """A corpus of 30 documents and a tiny model config."""
    chars = [c for c in (vocab / "vocab.txt").read_text(encoding="utf-8").split("\n")[5:] if len(c) == 1]
    rng = np.random.default_rng(0)
    docs = ["\n".join("".join(rng.choice(chars, 12)) + "。" for _ in range(5)) for _ in range(30)]
    (tmp_path / "corpus.txt").write_text("\n\n".join(docs), encoding="utf-8")
    size = len((vocab / "vocab.txt").read_text(encoding="utf-8").split("\n")) - 1
    (tmp_path / "tiny.json").write_text(json.dumps({**CONFIG, "vocab_size": size}))
    return tmp_path


def pretrain_argv(root, corpus, out, *extra):
    return ["pretrain", "--corpus", str(corpus), "--vocab", str(root.parent / "vocab"), "--config",
            str(root / "tiny.json"), "--max-seq-length", "32", "--batch-size", "4", "--no-progress", "--out", str(out),
            *extra]


@pytest.fixture
def vocab_beside(run_files, vocab):
    shutil.copytree(vocab, run_files.parent / "vocab", dirs_exist_ok=True)
    return run_files


def test_prepare_then_pretrain_on_the_store_tokenizes_once(vocab_beside, monkeypatch, capsys):
    root = vocab_beside
    calls = []
    tokenize = corpus_stream.tokenize_chunk
    monkeypatch.setattr(corpus_stream, "tokenize_chunk", lambda chunk: calls.append(1) or tokenize(chunk))
    argv = ["prepare", "--corpus", str(root / "corpus.txt"), "--vocab", str(root.parent / "vocab"), "--out",
            str(root / "store"), "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "prepared" in out and "30 documents" in out and f"--corpus {root / 'store'}" in out
    assert main(argv) == 2 and "already holds a bertkit run or model (store.json)" in capsys.readouterr().err
    assert len(calls) > 0
    # the first run plans the training instances and the held-out probe's (singles and pairs): three settings
    assert main(pretrain_argv(root, root / "store", root / "a", "--max-steps", "2")) == 0
    made = plans(root / "store")
    assert len(made) == 3
    with nothing_tokenized_or_planned(monkeypatch):  # a second run reads the store and its plans back
        assert main(pretrain_argv(root, root / "store", root / "b", "--max-steps", "2")) == 0
    assert plans(root / "store") == made
    assert trained(root / "a") == trained(root / "b")
    # another packing setting is another training plan (the probe's stay as they are)
    assert main(pretrain_argv(root, root / "store", root / "e", "--max-steps", "2", "--short-seq-prob", "0.5")) == 0
    assert len(plans(root / "store")) == 4 and made < plans(root / "store")
    # text given to pretrain is prepared into the cache once, then found there
    calls.clear()
    assert main(pretrain_argv(root, root / "corpus.txt", root / "c", "--max-steps", "2")) == 0
    assert len(calls) > 0
    with nothing_tokenized_or_planned(monkeypatch):
        assert main(pretrain_argv(root, root / "corpus.txt", root / "d", "--max-steps", "2")) == 0
    recorded = json.loads((root / "c" / "corpus_stores.json").read_text())[0]
    assert recorded["corpus"] == str(root / "corpus.txt") and recorded == json.loads(
        (root / "d" / "corpus_stores.json").read_text())[0]
    assert len(plans(Path(recorded["store"]))) == 3


TIMINGS = ("seconds", "examples_per_second", "tokens_per_second", "data_share")


def trained(run: Path) -> list[dict]:
    """A run's metrics.jsonl records without their timings: what the data and the model decide."""
    return [{k: v for k, v in json.loads(line).items() if k not in TIMINGS}
            for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_resumed_run_tokenizes_and_plans_nothing(vocab_beside, monkeypatch):
    """A run from text, stopped after its checkpoint at step 2, resumes from its cached store and plans: nothing is
    tokenized or planned, and it ends as the uninterrupted run did."""
    from safetensors.numpy import load_file

    root = vocab_beside
    argv = pretrain_argv(root, root / "corpus.txt", root / "run", "--max-steps", "4", "--save-every", "2",
                         "--log-every", "1")
    assert main(argv) == 0
    full, weights = trained(root / "run"), load_file(root / "run" / "model.safetensors")
    shutil.rmtree(root / "run" / "checkpoint-4")  # as if killed during step 3
    for name in ("train_results.json", "model.safetensors"):
        (root / "run" / name).unlink()
    with nothing_tokenized_or_planned(monkeypatch):
        assert main(["pretrain", "--resume", str(root / "run"), "--no-progress"]) == 0
    assert trained(root / "run") == full and len(full) == 4
    resumed = load_file(root / "run" / "model.safetensors")
    assert resumed.keys() == weights.keys() and all(np.array_equal(resumed[k], weights[k]) for k in weights)


def plans(store: Path) -> set[str]:
    """The plans cached beside a store: their directories' names."""
    return {path.parent.name for path in store.glob("store.plans/*/plan.json")}


@contextlib.contextmanager
def nothing_tokenized_or_planned(monkeypatch):
    """Within: tokenizing a chunk, or building a plan, fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("tokenized or planned again")

    with monkeypatch.context() as patch:
        patch.setattr(corpus_stream, "tokenize_chunk", refuse)
        patch.setattr(plan_cache, "_planner", refuse)
        yield


def test_a_damaged_store_is_named(vocab_beside, capsys):
    root = vocab_beside
    assert main(["prepare", "--corpus", str(root / "corpus.txt"), "--vocab", str(root.parent / "vocab"), "--out",
                 str(root / "store"), "--no-progress"]) == 0
    store = root / "store"
    kept = {name: (store / name).read_bytes() for name in os.listdir(store) if name.startswith("store.")}

    def refused(damage, message, *extra):
        damage()
        assert main(pretrain_argv(root, store, root / "run", "--max-steps", "1", *extra)) == 2
        assert message in one_error_line(capsys, "pretrain")
        for name, data in kept.items():
            if (store / name).is_dir():
                shutil.rmtree(store / name)
            (store / name).write_bytes(data)
        shutil.rmtree(store / "store.plans", ignore_errors=True)
        shutil.rmtree(root / "run", ignore_errors=True)  # a run refused mid-way (a damaged id) leaves its start

    ids = store / "store.ids"
    refused(lambda: ids.write_bytes(kept["store.ids"][:-6]),
            f"{ids} has {len(kept['store.ids']) - 6:,} bytes, the store says {len(kept['store.ids']):,}: it is "
            "truncated or damaged; prepare it again")
    refused(lambda: (ids.unlink(), ids.mkdir()), f"{ids} is a directory, not the store's array file: the store is "
                                                 "damaged; prepare it again")
    refused(lambda: (store / META).write_text("{not json"), f"{store / META} cannot be read as a store's description")
    refused(lambda: (store / "store.documents").write_bytes(np.arange(31, dtype=np.int64)[::-1].tobytes()),
            f"{store / 'store.documents'} does not hold the document offsets store.json describes: the store is "
            "damaged; prepare it again")
    refused(lambda: (store / META).unlink(), f"{store} holds no store.json: it is not a token store, or its "
                                             "preparation did not finish")
    sentences = np.frombuffer(kept["store.sentences"], np.int64).copy()
    sentences[[5, 6]] = sentences[[6, 5]]  # the ends still right: found when the plan reads every offset
    refused(lambda: (store / "store.sentences").write_bytes(sentences.tobytes()),
            f"{store / 'store.sentences'} does not hold the sentence offsets store.json describes: the store is "
            "damaged; prepare it again")
    ids = np.frombuffer(kept["store.ids"], np.uint16).copy()
    ids[:] = 60000
    for extra in ([], ["--eval-fraction", "0", "--loader-workers", "1"]):  # met by the probe, by a loader's worker
        refused(lambda: (store / "store.ids").write_bytes(ids.tobytes()),
                f"{store} holds token id 60000 past the vocabulary's", *extra)
    other = build_char_vocab(["完全不同的字"], root / "other-vocab")
    assert main([*pretrain_argv(root, store, root / "run", "--max-steps", "1"), "--vocab", str(other)]) == 2
    assert f"{store} was prepared with another tokenizer than {other}" in one_error_line(capsys, "pretrain")
    assert not (root / "run").exists()


def one_error_line(capsys, command: str) -> str:
    """What the command wrote to stderr, asserted to be one line `bertkit COMMAND: error: ...` (no traceback)."""
    err = capsys.readouterr().err
    assert err.startswith(f"bertkit {command}: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_a_corpus_without_text_is_named_plainly(vocab_beside, capsys):
    root = vocab_beside
    for name, content in (("notes", None), ("empty", "")):
        folder = root / name
        folder.mkdir()
        (folder / "readme.md").write_text("不是语料")
        if content is not None:
            (folder / "blank.txt").write_text("\n\n  \n")
        for argv in (pretrain_argv(root, folder, root / "run", "--max-steps", "1"),
                     ["prepare", "--corpus", str(folder), "--vocab", str(root.parent / "vocab"), "--out",
                      str(root / "store"), "--no-progress"]):
            assert main(argv) == 2
            said = one_error_line(capsys, argv[0])
            if content is None:
                assert f"error: {folder} holds no corpus files (*.txt, *.jsonl, or either .gz)" in said
            else:
                assert f"error: the corpus {folder} holds no text" in said
            assert "[" not in said and "'" not in said


def test_an_input_changed_after_preparing_is_named(vocab_beside, capsys):
    root = vocab_beside
    assert main(["prepare", "--corpus", str(root / "corpus.txt"), "--vocab", str(root.parent / "vocab"), "--out",
                 str(root / "store"), "--no-progress"]) == 0
    with open(root / "corpus.txt", "a", encoding="utf-8") as f:
        f.write("\n\n新的一篇。")
    assert main(pretrain_argv(root, root / "store", root / "run", "--max-steps", "1")) == 2
    assert f"{root / 'corpus.txt'} changed after it was prepared into {root / 'store'}" in one_error_line(capsys,
                                                                                                      "pretrain")
    # a run from the text itself that is resumed after the text changed is refused too
    os.remove(root / "corpus.txt")
    shutil.copy(root / "store" / "store.json", root / "kept.json")
    (root / "corpus.txt").write_text("\n\n".join(["一篇。"] * 30), encoding="utf-8")
    assert main(pretrain_argv(root, root / "corpus.txt", root / "run", "--max-steps", "4", "--save-every", "2")) == 0
    shutil.rmtree(root / "run" / "checkpoint-4")
    (root / "run" / "train_results.json").unlink()
    with open(root / "corpus.txt", "a", encoding="utf-8") as f:
        f.write("\n\n又一篇。")
    assert main(["pretrain", "--resume", str(root / "run"), "--no-progress"]) == 2
    assert f"{root / 'corpus.txt'} changed since the run in {root / 'run'} started" in one_error_line(capsys,
                                                                                                  "pretrain")
