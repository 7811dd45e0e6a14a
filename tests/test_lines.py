"""The one reading path of files read by lines (data/lines.py): the readers and the corpus stores read a file the
same way, whatever its encoding, compression or block size, and name a file that is not text in one line."""

from __future__ import annotations

import gzip
import re

import pytest

from bertkit.cli import main
from bertkit.data import lines
from bertkit.data.corpus import read_text_documents
from bertkit.data.lines import NotTextError, line_blocks
from bertkit.data.readers import DataWarning, iter_decoded_lines, read_classification_file

TEXT = "第一行\r\nsecond line\n\n第三行，没有换行"
EXPECTED = [(1, "第一行"), (2, "second line"), (3, ""), (4, "第三行，没有换行")]


@pytest.mark.parametrize("encoding", ["utf-8", "gbk", "utf-16", "utf-32", "utf-16-le"])
@pytest.mark.parametrize("block", [1, 5, 1 << 20])
def test_every_encoding_reads_the_same_lines(tmp_path, encoding, block):
    path = tmp_path / "x.txt"
    path.write_bytes(TEXT.encode(encoding))
    assert list(iter_decoded_lines(path, encoding, block_bytes=block)) == EXPECTED


def test_blocks_hold_whole_lines_in_order_and_count_the_files_bytes(tmp_path):
    path = tmp_path / "x.txt.gz"
    text = "".join(f"行{i}\n" for i in range(30000))
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(text)
    blocks = list(line_blocks(path, block_bytes=10000, compressed=True))
    assert len(blocks) > 5 and all(b.lines.endswith(b"\n") for b in blocks)
    assert b"".join(b.lines for b in blocks).decode() == text
    assert [b.first_line for b in blocks] == [1 + sum(b.lines.count(b"\n") for b in blocks[:k])
                                              for k in range(len(blocks))]
    assert sum(b.size for b in blocks) == path.stat().st_size  # compressed bytes: a progress bar's total


def test_a_line_longer_than_the_limit_is_cut_not_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(lines, "MAX_RECORD_BYTES", 1000)  # the readers' rows are records: read whole up to this
    path = tmp_path / "long.txt"
    path.write_text("短" * 40000 + "\nok\n", encoding="utf-8")  # 120,000 bytes without a line break
    with pytest.warns(DataWarning, match=r"long.txt: 1 line longer than 1,000 bytes was cut into parts"):
        got = list(iter_decoded_lines(path, block_bytes=64))
    assert "".join(text for _, text in got[:-1]) == "短" * 40000 and got[-1][1] == "ok" and len(got) > 100
    assert all(len(text.encode()) <= 1000 for _, text in got)  # cut between characters, never inside one


def test_not_text_is_named_alike_by_the_readers_and_the_stores(tmp_path, capsys):
    vocab = tmp_path / "vocab"
    vocab.mkdir()
    (vocab / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"一二三"]) + "\n",
                                     encoding="utf-8")
    binary, gbk, cut = tmp_path / "model.txt", tmp_path / "gbk.txt", tmp_path / "cut.txt.gz"
    packed, zipped = tmp_path / "packed.tsv", tmp_path / "rows.txt"  # compressed, under a text file's name
    packed.write_bytes(gzip.compress(b"a\tb\n" * 50))
    zipped.write_bytes(b"PK\x03\x04" + b"\x00" * 60)
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00" * 100)
    gbk.write_bytes("北京欢迎你\n".encode("gbk") * 20)
    cut.write_bytes(gzip.compress("".join(f"{i}一二三\n" for i in range(5000)).encode())[:200])  # cut off
    said = {binary: "is not a text file: it holds NUL bytes", gbk: "is not utf-8 text: 20 of 20 lines do not decode",
            cut: "cannot be read as gzip: Compressed file ended before the end-of-stream marker was reached",
            packed: rf"is a gzip-compressed file, not text: decompress it first \(e.g. gzip -dc {packed} > out.txt\), "
                    "then give the text file",
            zipped: rf"is a zip-compressed file, not text: decompress it first \(e.g. unzip {zipped}\)"}
    for path, message in said.items():
        if path is not cut:  # the readers read plain files
            for read in (read_text_documents, lambda p: read_classification_file(p, format="tsv")):
                with pytest.raises(NotTextError, match=f"{path.name} {message}"):
                    read(path)
        assert main(["prepare", "--corpus", str(path), "--vocab", str(vocab), "--out", str(tmp_path / "store"),
                     "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert re.match(f"bertkit prepare: error: {re.escape(str(path))} {message}", err), err
        assert err.count("\n") == 1 and "Traceback" not in err


def test_undecodable_lines_are_counted_alike(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_bytes("一。\n".encode() + "坏".encode("gbk") + b"\n" + "二。\n\n三。\n".encode())
    with pytest.warns(DataWarning, match=r"mixed.txt: skipped 1 line, kept 2: undecodable bytes \(line 2\)"):
        assert read_text_documents(path) == [["一。", "二。"], ["三。"]]
