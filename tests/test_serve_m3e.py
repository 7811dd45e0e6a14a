"""`bertkit serve m3e-small`, where real behaviour matters: /embed gives `bertkit encode`'s vectors on real headlines,
overload gets 429 and the server serves on, and SIGTERM under load answers every accepted request and exits 0."""

from __future__ import annotations

import http.client
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from bertkit.cli import main
from conftest import fetch_or_skip
from serve_helpers import CALL_TIMEOUT, ServerProcess, request

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.xdist_group("serve-m3e")]


@pytest.fixture(scope="module")
def headlines():
    fetch_or_skip("thucnews")
    from bertkit.data.tasks import load_classification

    return [example.text for example in load_classification("thucnews")["test"]]


@pytest.fixture(scope="module")
def long_texts(headlines):
    """Texts of about 500 tokens (headlines run together): each a forward of its own under --max-batch-tokens 512."""
    joined = "".join(headlines)
    return [joined[start:start + 500] for start in range(0, 500 * 16, 500)]


def wait_in_flight(server: ServerProcess, count: int, timeout: float = CALL_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while server.metric("bertkit_requests_in_flight") < count:
        assert time.monotonic() < deadline, f"{count} requests were never in flight at once"
        time.sleep(0.02)


def test_embed_equals_bertkit_encode_and_overload_gets_429(m3e_small_dir, headlines, long_texts, tmp_path, capsys):
    texts = headlines[:40]
    out = tmp_path / "vectors.npy"
    assert main(["encode", "--model", "m3e-small", "--pooling", "mean", "--out", str(out), *texts]) == 0
    capsys.readouterr()
    with ServerProcess("m3e-small", "--max-concurrent-requests", "2", "--max-batch-tokens", "512") as server:
        status, info = server.get("/info")
        assert info["model_type"] == {"embedding": {"pooling": "mean"}}  # m3e-small's own pooling
        status, vectors = server.post("/embed", {"inputs": texts[:32], "normalize": False})
        assert status == 200
        status, rest = server.post("/embed", {"inputs": texts[32:], "normalize": False})
        assert status == 200
        np.testing.assert_allclose(vectors + rest, np.load(out), atol=1e-5, rtol=0)

        # two requests of 8 texts of ~500 tokens take the server's two places for a second or more: a third gets 429
        body = {"inputs": long_texts[:8], "truncate": True}
        with ThreadPoolExecutor(2) as threads:
            slow = [threads.submit(request, server.port, "POST", "/embed", body) for _ in range(2)]
            wait_in_flight(server, 2)
            status, error = server.post("/embed", {"inputs": "今天天气很好"})
            assert status == 429 and error["error_type"] == "overloaded" and "2 requests" in error["error"]
            answers = [future.result(timeout=CALL_TIMEOUT * 3) for future in slow]
        assert [status for status, _ in answers] == [200, 200]
        assert all(np.asarray(vectors).shape == (8, 512) for _, vectors in answers)
        assert server.get("/health")[0] == 200
        status, again = server.post("/embed", {"inputs": texts[:1], "normalize": False})
        assert status == 200
        np.testing.assert_allclose(again[0], vectors[0], atol=1e-5, rtol=0)
        _, metrics = server.get("/metrics")
        assert 'bertkit_requests_total{route="/embed",status="429"} 1.0' in metrics.decode()
        assert server.stop() == 0


def test_sigterm_answers_every_accepted_request(m3e_small_dir, long_texts):
    from bertkit.inference import encode
    from bertkit.inference.loading import load_text_model

    bodies = [{"inputs": long_texts[k:k + 4], "truncate": True} for k in (0, 4, 8, 12)]
    with ServerProcess("m3e-small", "--max-batch-tokens", "512") as server:
        with ThreadPoolExecutor(len(bodies)) as threads:
            accepted = [threads.submit(request, server.port, "POST", "/embed", body, timeout=CALL_TIMEOUT * 3)
                        for body in bodies]
            wait_in_flight(server, len(bodies))
            server.process.send_signal(signal.SIGTERM)
            refused_while_draining = False
            deadline = time.monotonic() + CALL_TIMEOUT
            while time.monotonic() < deadline and not all(future.done() for future in accepted):
                try:  # a new connection is refused once the server has stopped accepting
                    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
                    connection.request("GET", "/health")
                    connection.getresponse().read()
                    connection.close()
                except OSError:
                    refused_while_draining = not all(future.done() for future in accepted)
                    break
                time.sleep(0.05)
            answers = [future.result(timeout=CALL_TIMEOUT * 3) for future in accepted]
        assert server.wait() == 0
    assert refused_while_draining, "the server kept accepting connections after SIGTERM"
    assert [status for status, _ in answers] == [200] * len(bodies)
    model, tokenizer = load_text_model("m3e-small", "encode")
    want = encode(model, tokenizer, long_texts[:1], pooling="mean", normalize=True)
    for _, vectors in answers:
        assert np.asarray(vectors).shape == (4, 512)
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(answers[0][1][0], want[0], atol=1e-5, rtol=0)
