"""`bertkit serve` as a process on a free loopback port, and a small HTTP client with a timeout on every call.

    with ServerProcess(model_dir, "--max-client-batch-size", "4") as server:
        status, body = server.post("/embed", {"inputs": "the cat"})

Starting waits (bounded) for the server to print its port and to say it is ready; leaving the block sends SIGTERM
and waits (bounded) for the exit, killing the process if it does not end.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any

START_TIMEOUT = 120.0   # seconds to listen and load (a loaded shared machine, m3e-small)
STOP_TIMEOUT = 60.0     # seconds from SIGTERM to exit
CALL_TIMEOUT = 60.0     # seconds for one HTTP answer


def request(port: int, method: str, path: str, body: Any = None, raw: bytes | None = None,
            headers: dict[str, str] | None = None, timeout: float = CALL_TIMEOUT) -> tuple[int, Any]:
    """(status, body): JSON bodies decoded, others as bytes. `body` is sent as JSON, `raw` as it is."""
    status, _, payload = exchange(port, method, path, body, raw, headers, timeout)
    return status, payload


def exchange(port: int, method: str, path: str, body: Any = None, raw: bytes | None = None,
             headers: dict[str, str] | None = None, timeout: float = CALL_TIMEOUT) -> tuple[int, dict[str, str], Any]:
    """(status, the answer's headers with lower-case names, body) of one request, as `request` sends it."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        connection.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        payload = response.read()
        answer_headers = {name.lower(): value for name, value in response.getheaders()}
        if answer_headers.get("content-type", "").startswith("application/json"):
            payload = json.loads(payload)
        return response.status, answer_headers, payload
    finally:
        connection.close()


class ServerProcess:
    """`python -m bertkit serve MODEL --port 0 ARGS...` for the length of a `with` block."""

    def __init__(self, model: str | os.PathLike, *args: str, wait_ready: bool = True) -> None:
        # float32 unless a test asks for another format: the tests compare with float32's outputs, and --dtype's
        # default (auto) picks the machine's fastest
        fp32 = [] if "--dtype" in args else ["--dtype", "fp32"]
        self.command = [sys.executable, "-m", "bertkit", "serve", str(model), "--port", "0", *fp32, *map(str, args)]
        self.wait_ready = wait_ready
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        self.port = 0
        self.returncode: int | None = None

    def __enter__(self) -> ServerProcess:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env=env)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        try:
            self.port = int(self.wait_for(r"listening at http://127\.0\.0\.1:(\d+)").group(1))
            if self.wait_ready:
                self.wait_for(r"ready: ")
        except BaseException:
            self.kill()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.stop()
        self.reader.join(STOP_TIMEOUT)  # the process has ended: its output ends too
        self.process.stdout.close()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, pattern: str, timeout: float = START_TIMEOUT) -> re.Match:
        """The first line of output (from now on) matching `pattern`; an AssertionError with the output if the
        process ends or `timeout` passes first."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r} in {timeout:.0f} s; output:\n"
                                     + "".join(self.output)) from None
            if line is None:
                self.process.wait(STOP_TIMEOUT)
                raise AssertionError(f"the server exited ({self.process.returncode}) before printing {pattern!r}; "
                                     "output:\n" + "".join(self.output))
            self.output.append(line)
            if found := re.search(pattern, line):
                return found

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM, then the exit status (the process is killed, and the test fails, if it does not exit)."""
        self.process.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float = STOP_TIMEOUT) -> int:
        try:
            self.returncode = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the server did not exit within {timeout:.0f} s") from None
        return self.returncode

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(STOP_TIMEOUT)
        self.reader.join(STOP_TIMEOUT)
        self.process.stdout.close()

    def text(self) -> str:
        """Everything the process has printed so far."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return "".join(self.output)
            if line is not None:
                self.output.append(line)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> tuple[int, Any]:
        return request(self.port, "POST", path, body, **kwargs)

    def get(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        return request(self.port, "GET", path, **kwargs)

    def metric(self, name: str) -> float:
        """The value of an unlabelled metric from GET /metrics."""
        _, text = self.get("/metrics")
        found = re.search(rf"^{re.escape(name)} (\S+)$", text.decode(), re.MULTILINE)
        assert found, f"no metric {name}"
        return float(found.group(1))


def assert_same_entities(served: list, predicted: list) -> None:
    """The server's /predict spans are `bertkit predict`'s: the same entities, places and texts, scores within
    1e-5."""
    import pytest

    assert len(served) == len(predicted)
    for got, want in zip(served, predicted):
        assert [(e["entity"], e["start"], e["end"], e["text"]) for e in got] == \
               [(e["entity"], e["start"], e["end"], e["text"]) for e in want]
        assert [e["score"] for e in got] == pytest.approx([e["score"] for e in want], abs=1e-5)

