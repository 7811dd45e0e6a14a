"""Bad corpora for the token stores (`bertkit prepare --corpus FILE`, `bertkit pretrain --corpus FILE`): old Mac line
ends, lines of megabytes without punctuation, standard input and pipes, a token store's own files given as text.

As in test_bad_input.py: a CLI error is exit status 2 and one line `bertkit COMMAND: error: ...`; a warning is one
line `bertkit COMMAND: warning: ...`. docs/bad-input.md lists what each gets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from bertkit.data import lines
from bertkit.data.corpus import MAX_SENTENCE_TOKENS, read_text_documents, split_sentences
from bertkit.data.lines import line_blocks
from bertkit.data.pretraining import corpus_stream, packing
from bertkit.data.pretraining.chain import StoreChain
from bertkit.data.pretraining.store import TokenStore
from bertkit.data.readers import iter_decoded_lines, read_classification_file, read_conll
from bertkit.tokenizer import BertTokenizer
from test_bad_input import refused, run  # the one voice of a refusal

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "。", *"张三在北京工作很好差的一是不了有人这中大为上个国我",
         "the", "cat", "sat", "on", "mat"]
SRC = Path(__file__).resolve().parents[1] / "src"


def documents(seed: int = 0, count: int = 40) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    chars = VOCAB[6:-5]
    return [["".join(rng.choice(chars, size=8)) + "。" for _ in range(4)] for _ in range(count)]


def text_of(docs: list[list[str]], end: str = "\n") -> str:
    return (end + end).join(end.join(doc) for doc in docs) + end


@pytest.fixture(scope="module")
def vocab(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus-vocab") / "vocab"
    BertTokenizer({t: i for i, t in enumerate(VOCAB)}).save_pretrained(path)
    return path


def prepare(capsys, vocab: Path, corpus, out: Path, *extra) -> tuple[TokenStore, str]:
    """`bertkit prepare` that succeeds: the store, and what it said on standard error."""
    code, _, err = run(capsys, "prepare", "--corpus", corpus, "--vocab", vocab, "--out", out, "--no-progress", *extra)
    assert code == 0, err
    return TokenStore.open(out), err


def arrays(store: TokenStore) -> list[bytes]:
    return [(store.path / name).read_bytes() for name in ("store.ids", "store.sentences", "store.documents")]


# ---- 1. line ends: "\r\n", "\n" and a lone "\r" alike -------------------------------------------------------------

def test_old_mac_line_ends_keep_the_documents_apart(vocab, tmp_path, capsys):
    docs = documents()
    (tmp_path / "lf.txt").write_text(text_of(docs), encoding="utf-8")
    (tmp_path / "cr.txt").write_bytes(text_of(docs, "\r").encode())       # an old Mac file: "\r" alone
    (tmp_path / "crlf.txt").write_bytes(text_of(docs, "\r\n").encode())
    reference, _ = prepare(capsys, vocab, tmp_path / "lf.txt", tmp_path / "s-lf")
    assert reference.num_documents == 40
    for name in ("cr.txt", "crlf.txt"):
        store, err = prepare(capsys, vocab, tmp_path / name, tmp_path / f"s-{name}")
        assert store.num_documents == 40 and arrays(store) == arrays(reference), name
        assert "warning" not in err
    assert read_text_documents(tmp_path / "cr.txt") == docs


def test_line_ends_split_by_a_block_are_one_line_end_and_line_numbers_stay_right(vocab, tmp_path, capsys,
                                                                                   monkeypatch):
    # every kind of line end, at every place a block can end: the lines are those of the file, numbered as its own
    text = "一\r\n二\r三\n\r\n四\r\r五\r\n\r\n六"
    want = [(1, "一"), (2, "二"), (3, "三"), (4, ""), (5, "四"), (6, ""), (7, "五"), (8, ""), (9, "六")]
    path = tmp_path / "mixed.txt"
    monkeypatch.setattr(lines, "NUL_WINDOW", 1)  # the first read is no longer than the others
    for encoding in ("utf-8", "gbk", "utf-16"):
        path.write_bytes(text.encode(encoding))
        for block in range(1, 9):
            assert list(iter_decoded_lines(path, encoding, block_bytes=block)) == want, (encoding, block)
    # a store read in small chunks: a bad line of a CR-only file is named by its number
    monkeypatch.setattr(corpus_stream, "CHUNK_BYTES", 7)
    bad = tmp_path / "bad.txt"
    bad.write_bytes("张三。\r北京。\r\r很好。\r".encode() + "坏".encode("gbk") + "\r\r我。\r\n人。\r".encode())
    _, err = prepare(capsys, vocab, bad, tmp_path / "store")
    assert err == f"bertkit prepare: warning: {bad}: skipped 1 line, kept 3: undecodable bytes (line 5)\n"


def test_the_readers_read_old_mac_files(tmp_path):
    tsv, conll = tmp_path / "train.tsv", tmp_path / "ner.conll"
    tsv.write_bytes(b"text\tlabel\rgood film\tpos\rbad film\tneg\r")
    conll.write_bytes("张 B-PER\r三 I-PER\r\r北 B-LOC\r京 I-LOC\r".encode())
    assert [(e.text, e.label) for e in read_classification_file(tsv)] == [("good film", "pos"), ("bad film", "neg")]
    assert [e.tokens for e in read_conll(conll)] == [["张", "三"], ["北", "京"]]


# ---- 2. long lines: bounded sentences, bounded memory ---------------------------------------------------------------

def test_a_sentence_never_exceeds_the_cap():
    rng = np.random.default_rng(0)
    chinese = "".join(rng.choice(list("张三在北京工作很好差的一是不了有人这中大为上个国我"), size=1000))
    pieces = split_sentences(chinese, "zh")
    assert "".join(pieces) == chinese and all(len(p) <= MAX_SENTENCE_TOKENS for p in pieces)
    assert len(pieces) == -(-1000 // MAX_SENTENCE_TOKENS)  # of about equal length: no short piece left over
    commas = "，".join(chinese[k:k + 30] for k in range(0, 300, 30))  # cut after a comma where one is near
    assert all(p.endswith("，") for p in split_sentences(commas, "zh")[:-1])
    words = " ".join(f"w{k}" for k in range(500))
    pieces = split_sentences(words, "en")
    assert " ".join(pieces) == words and all(len(p.split()) <= 48 for p in pieces) and len(pieces) == 11
    blob = "x" * 1000  # no space at all: cut anyway
    assert "".join(split_sentences(blob, "en")) == blob
    assert max(map(len, split_sentences(blob, "en"))) <= MAX_SENTENCE_TOKENS
    # a sentence under the cap is as it was
    assert split_sentences("今天天气很好。我们去公园吧！", "zh") == ["今天天气很好。", "我们去公园吧！"]


def test_a_long_unpunctuated_line_is_stored_as_sentences_a_sequence_can_hold(vocab, tmp_path, capsys, monkeypatch):
    rng = np.random.default_rng(0)
    line = "".join(rng.choice(list("张三在北京工作很好差的一是不了有人这中大为上个国我"), size=30000))
    path = tmp_path / "long.txt"
    path.write_text(f"{line}\n\n{line}\n", encoding="utf-8")
    # lines longer than the block are read in parts: one warning for the file, naming it and counting them
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(corpus_stream, "CHUNK_BYTES", 4096)
    store, err = prepare(capsys, vocab, path, tmp_path / "store")
    assert err == (f"bertkit prepare: warning: {path}: 2 lines longer than 4,096 bytes were cut into parts of at "
                   "most 4,096 bytes, each read as a line of its own (lines 1, 3)\n")
    lengths = np.diff(np.asarray(store.sentence_offsets))
    assert store.num_tokens == 60000 and store.num_documents == 2 and lengths.max() <= MAX_SENTENCE_TOKENS
    # the tokens the store counts are the tokens pretraining sees: packing cuts off only a little (all but one
    # sequence's worth, before)
    for objective in ("mlm", "mlm+nsp"):
        plan = packing.plan_in_memory(StoreChain([store]), np.arange(2), packing.Packing(128, objective))
        assert int(plan.a_len.sum() + plan.b_len.sum()) > 0.9 * store.num_tokens, objective


MEMORY = """
import resource, sys
from bertkit.data.pretraining.store_writer import prepare_store
from bertkit.tokenizer import BertTokenizer
prepare_store([sys.argv[1]], BertTokenizer.from_pretrained(sys.argv[2]), sys.argv[3], workers=0, progress=False)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def test_memory_does_not_grow_with_a_lines_length(vocab, tmp_path):
    rng = np.random.default_rng(0)
    chars = list("张三在北京工作很好差的一是不了有人这中大为上个国我")
    size = 1_000_000  # characters: 3 MB of UTF-8
    long, normal = tmp_path / "long.txt", tmp_path / "normal.txt"
    text = "".join(rng.choice(chars, size=size))
    long.write_text(text + "\n", encoding="utf-8")
    normal.write_text("\n\n".join(text[k:k + 40] + "。" for k in range(0, size, 40)) + "\n", encoding="utf-8")
    peaks = {}
    for path in (normal, long):
        done = subprocess.run([sys.executable, "-c", MEMORY, str(path), str(vocab), str(tmp_path / path.stem)],
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=300)
        assert done.returncode == 0, done.stderr
        peaks[path.stem] = int(done.stdout.split()[-1])
    assert peaks["long"] < 1.5 * peaks["normal"], peaks  # was 3.4 times (a 3 MB line), 6.7 times at 6 MB


# ---- 3. standard input and pipes -----------------------------------------------------------------------------------

def test_prepare_reads_standard_input(vocab, tmp_path):
    docs = documents()
    done = subprocess.run([sys.executable, "-m", "bertkit", "prepare", "--corpus", "/dev/stdin", "--vocab", str(vocab),
                           "--out", str(tmp_path / "store"), "--no-progress"], input=text_of(docs, "\r\n"),
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert TokenStore.open(tmp_path / "store").num_documents == 40


def test_a_pipe_reads_as_a_file(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    data = "".join(f"行{k}\r\n" for k in range(50000)).encode()

    def write():
        with open(fifo, "wb") as f:
            f.write(data)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        blocks = list(line_blocks(fifo, block_bytes=4096))
    finally:
        writer.join()
    assert b"".join(b.lines for b in blocks) == data.replace(b"\r\n", b"\n")
    assert sum(b.size for b in blocks) == len(data) and blocks[-1].first_line > 1


# ---- 4. a token store's own files are not text ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["store.json", "store.ids", "store.sentences", "store.documents"])
def test_a_stores_files_are_named_as_a_store(vocab, tmp_path, capsys, name):
    (tmp_path / "corpus.txt").write_text(text_of(documents()), encoding="utf-8")
    prepare(capsys, vocab, tmp_path / "corpus.txt", tmp_path / "store")
    said = (f"error: {tmp_path / 'store' / name} is a file of a token store, not text: `bertkit pretrain --corpus "
            f"{tmp_path / 'store'}` reads it as it is; prepare reads text files")
    assert refused(capsys, "prepare", "--corpus", tmp_path / "store" / name, "--vocab", vocab, "--out",
                   tmp_path / "again", "--no-progress") == f"bertkit prepare: {said}"
    assert not (tmp_path / "again").exists()
    if name == "store.json":  # pretrain reads a file given as --corpus as text too
        (tmp_path / "tiny.json").write_text(json.dumps(dict(
            vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=32)))
        assert refused(capsys, "pretrain", "--corpus", tmp_path / "store" / name, "--vocab", vocab, "--config",
                       tmp_path / "tiny.json", "--max-steps", "2", "--no-progress", "--out",
                       tmp_path / "run") == f"bertkit pretrain: {said}"
