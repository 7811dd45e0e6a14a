"""bertkit.utils.atomic: a file or directory is replaced whole or not at all, and saved files follow the umask."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from bertkit.utils.atomic import atomic_directory, atomic_write, atomic_write_text, remove_leftovers


@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request):
    """Run the test under this umask, then restore the process's own."""
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old")

    def fail(p):
        p.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, fail)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_text_is_utf8_with_newline_line_ends(tmp_path):
    path = atomic_write_text(tmp_path / "sub" / "t.txt", "北京\nline\n")
    assert path.read_bytes() == "北京\nline\n".encode() and [p.name for p in path.parent.iterdir()] == ["t.txt"]


def test_files_and_directories_follow_the_umask(tmp_path, umask):
    assert mode(atomic_write_text(tmp_path / "a.txt", "x")) == 0o666 & ~umask
    assert mode(atomic_write(tmp_path / "b.bin", lambda p: p.write_bytes(b"\0"))) == 0o666 & ~umask
    with atomic_directory(tmp_path / "run") as tmp:
        (tmp / "inner.txt").write_text("y")
    assert mode(tmp_path / "run") == 0o777 & ~umask
    assert (tmp_path / "run" / "inner.txt").read_text() == "y"


def test_saved_models_and_tokenizers_follow_the_umask(tmp_path, umask):
    from bertkit.models.bert.configuration import BertConfig
    from bertkit.models.bert.modeling import BertModel
    from bertkit.tokenizer import BertTokenizer

    model = BertModel(BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=8, max_position_embeddings=8))
    model.save_pretrained(tmp_path / "m")
    BertTokenizer({t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])}).save_pretrained(
        tmp_path / "m")
    files = sorted(p.name for p in (tmp_path / "m").iterdir())
    assert files == ["config.json", "model.safetensors", "special_tokens_map.json", "tokenizer_config.json",
                     "vocab.txt"]
    assert {name: mode(tmp_path / "m" / name) for name in files} == {name: 0o666 & ~umask for name in files}


def test_atomic_directory_replaces_the_old_one_whole_or_not_at_all(tmp_path):
    final = tmp_path / "ckpt"
    with atomic_directory(final) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(RuntimeError, match="killed"), atomic_directory(final) as tmp:
        (tmp / "b").write_text("2")
        raise RuntimeError("killed")
    assert [p.name for p in final.iterdir()] == ["a"]                  # the failed write left no trace
    with atomic_directory(final) as tmp:
        (tmp / "b").write_text("2")
    assert [p.name for p in final.iterdir()] == ["b"]                  # replaced, not merged
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]            # no temp or old directory left


def test_remove_leftovers_deletes_only_temp_and_old_directories(tmp_path):
    for name in (".ckpt.tmp-123", ".ckpt.old-456", ".other.tmp-1", "ckpt", ".hidden"):
        (tmp_path / name).mkdir()
    remove_leftovers(tmp_path, "ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden", ".other.tmp-1", "ckpt"]
    remove_leftovers(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden", "ckpt"]
