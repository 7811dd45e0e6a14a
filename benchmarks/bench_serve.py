"""`bertkit serve` against a naive server: requests per second and latency of POST /embed under 1, 8 and 32 clients.

The naive server is what "wrap encode in a web server" gives: the same ASGI stack (Starlette on uvicorn, with
httptools and uvloop), transformers' AutoTokenizer and AutoModel in fp32, one forward per request, no batching; it
pools the way `bertkit serve` does for the model (mean for m3e-small) and normalizes. It runs with the torch threads
bertkit serve takes by default (one fewer than the cores), so that the comparison is of batching, not of threads.
Every server is a process of its own on the loopback, started by this script and stopped by it; the clients run
here, in another process, as asyncio tasks on keep-alive connections, each sending one real headline (THUCNews)
per request and waiting for the answer before sending the next. For every client count the servers take turns
(the order reversed every other round), each for at most --requests requests or --seconds seconds after a short
warm-up. By default three `bertkit serve`s are measured: fp32 with the default threads, fp32 with two threads, bf16.

    python benchmarks/bench_serve.py [--model m3e-small] [--serve "--dtype fp32" --serve "--dtype bf16" ...]
                                     [--clients 1,8,32] [--requests 2000] [--seconds 20] [--rounds 1]
                                     [--naive-threads N] [--naive-mode inline|threads]

Printed: requests/s, p50 and p99 latency per server and client count, each server's ratio to the naive one, and
whether the goal holds (>= 3x the naive server's requests/s at the largest client count, p99 no worse). Before
timing, every server embeds the same headlines and the largest difference from the naive server's vectors is
printed.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

START_TIMEOUT = 180.0     # seconds for a server to load its model and answer /health
REQUEST_TIMEOUT = 60.0    # seconds for one answer
WARMUP_REQUESTS = 20


# ---- the naive server ----------------------------------------------------------------------------

def naive_app(model_dir: str, pooling: str, mode: str):
    """Starlette app: POST /embed {"inputs": text | [text]} -> [[float]], one transformers forward per request."""
    import torch
    import torch.nn.functional as F
    import transformers
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModel.from_pretrained(model_dir).eval()

    def forward(texts: list[str]) -> list[list[float]]:
        with torch.inference_mode():
            batch = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
            hidden = model(**batch).last_hidden_state
            if pooling == "mean":
                weights = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                vectors = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
            else:
                vectors = hidden[:, 0]
            return F.normalize(vectors, dim=-1).tolist()

    async def embed(request):
        inputs = (await request.json())["inputs"]
        texts = [inputs] if isinstance(inputs, str) else inputs
        vectors = await run_in_threadpool(forward, texts) if mode == "threads" else forward(texts)
        return JSONResponse(vectors)

    async def health(request):
        return Response(b"")

    return Starlette(routes=[Route("/embed", embed, methods=["POST"]), Route("/health", health)])


def run_naive_server(model_dir: str, pooling: str, mode: str, threads: int | None) -> None:
    import socket

    import torch
    import uvicorn

    if threads:
        torch.set_num_threads(threads)
    app = naive_app(model_dir, pooling, mode)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    print(f"naive server: listening at http://127.0.0.1:{listener.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[listener])


# ---- servers as processes ------------------------------------------------------------------------

@dataclass
class Server:
    name: str
    process: subprocess.Popen
    port: int


def start(name: str, command: list[str], env: dict[str, str]) -> Server:
    """Start a server process and wait until it prints its port and answers /health with 200."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.monotonic() + START_TIMEOUT
    port = None
    lines = []
    while port is None:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"{name} exited before listening:\n" + "".join(lines))
        lines.append(line)
        found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        port = int(found.group(1)) if found else None
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"{name} did not listen within {START_TIMEOUT:.0f} s")
    server = Server(name, process, port)
    while asyncio.run(_status(port, "GET", "/health")) != 200:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"{name} did not become ready within {START_TIMEOUT:.0f} s")
        time.sleep(0.2)
    return server


def stop(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(10)


# ---- a small HTTP/1.1 client ---------------------------------------------------------------------
# Hand-written over asyncio streams: the load generator shares the machine with both servers, and an HTTP library's
# per-request cost would be taken from them.

class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(*await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), REQUEST_TIMEOUT))

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" \
               f"Content-Length: {len(body)}\r\n\r\n"
        self.writer.write(head.encode() + body)
        return await asyncio.wait_for(self._response(), REQUEST_TIMEOUT)

    async def _response(self) -> tuple[int, bytes]:
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def _status(port: int, method: str, path: str) -> int:
    try:
        connection = await Connection.open(port)
    except OSError:
        return 0
    try:
        return (await connection.request(method, path))[0]
    except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
        return 0
    finally:
        connection.close()


async def embed_all(port: int, texts: list[str]) -> list[list[float]]:
    connection = await Connection.open(port)
    try:
        vectors = []
        for text in texts:
            status, body = await connection.request("POST", "/embed", orjson.dumps({"inputs": text}))
            if status != 200:
                raise RuntimeError(f"/embed answered {status}: {body[:200]!r}")
            vectors.append(orjson.loads(body)[0])
        return vectors
    finally:
        connection.close()


async def load(port: int, bodies: list[bytes], clients: int, requests: int, seconds: float) -> dict:
    """`clients` connections, each sending its next request when the last is answered, until `requests` are sent
    or `seconds` have passed; requests/s over the whole run, latency percentiles, errors."""
    connections = [await Connection.open(port) for _ in range(clients)]
    warm = itertools.count()
    await asyncio.gather(*(_client(c, bodies, warm, min(WARMUP_REQUESTS, requests), time.monotonic() + seconds, [],
                                   []) for c in connections))
    latencies: list[float] = []
    errors: list[int] = []
    sent = itertools.count()
    start = time.perf_counter()
    await asyncio.gather(*(_client(c, bodies, sent, requests, time.monotonic() + seconds, latencies, errors)
                           for c in connections))
    elapsed = time.perf_counter() - start
    for connection in connections:
        connection.close()
    latencies.sort()
    return {"requests": len(latencies), "rps": len(latencies) / elapsed, "errors": len(errors),
            "p50": 1e3 * statistics.median(latencies),
            "p99": 1e3 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]}


async def _client(connection: Connection, bodies: list[bytes], sent: itertools.count, requests: int,
                  deadline: float, latencies: list[float], errors: list[int]) -> None:
    while time.monotonic() < deadline and (n := next(sent)) < requests:
        start = time.perf_counter()
        status, _ = await connection.request("POST", "/embed", bodies[n % len(bodies)])
        if status == 200:
            latencies.append(time.perf_counter() - start)
        else:
            errors.append(status)


# ---- the comparison ------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="m3e-small")
    parser.add_argument("--serve", action="append", metavar="FLAGS",
                        help='flags of one `bertkit serve` to measure, e.g. "--dtype bf16"; repeat for several '
                             '(default: "--dtype fp32", "--dtype fp32 --threads 2", "--dtype bf16")')
    parser.add_argument("--clients", default="1,8,32", help="client counts, comma-separated (default: 1,8,32)")
    parser.add_argument("--requests", type=int, default=2000, help="requests per measurement at most")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per measurement at most")
    parser.add_argument("--rounds", type=int, default=1, help="measurements per server and client count")
    parser.add_argument("--naive-threads", type=int,
                        help="torch threads of the naive server (default: what bertkit serve takes by default, one "
                             "fewer than the cores torch would use)")
    parser.add_argument("--naive-mode", default="inline", choices=["inline", "threads"],
                        help="the naive server runs each forward in the event loop, or in Starlette's thread pool")
    parser.add_argument("--naive-server", action="store_true", help=argparse.SUPPRESS)  # run as the naive server
    args = parser.parse_args()

    from bertkit.data.sources import resolve_model
    from bertkit.inference.serving.model import declared_pooling, default_threads

    model_dir = str(resolve_model(args.model))
    pooling = declared_pooling(model_dir) or "cls"
    naive_threads = args.naive_threads or default_threads()
    if args.naive_server:
        return run_naive_server(model_dir, pooling, args.naive_mode, naive_threads)

    from bertkit.data.tasks import load_classification

    splits = load_classification("thucnews")
    texts = [example.text for split in ("train", "dev", "test") for example in splits[split]]
    bodies = [orjson.dumps({"inputs": text}) for text in texts]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    commands = {}
    for flags in args.serve or ["--dtype fp32", "--dtype fp32 --threads 2", "--dtype bf16"]:
        commands[f"bertkit {flags}"] = [sys.executable, "-m", "bertkit", "serve", args.model, "--port", "0",
                                        "--pooling", pooling, *flags.split()]
    commands["naive"] = [sys.executable, str(Path(__file__).resolve()), "--naive-server", "--model", args.model,
                         "--naive-mode", args.naive_mode, "--naive-threads", str(naive_threads)]
    print(f"{args.model} ({pooling} pooling), {len(texts):,} THUCNews headlines, one per request; naive: "
          f"transformers fp32, {args.naive_mode}, torch threads {naive_threads}; bertkit serve's default torch threads "
          f"{default_threads()}; {os.cpu_count()} CPUs", flush=True)

    servers: list[Server] = []
    results: dict[tuple[str, int], list[dict]] = {}
    try:
        for name, command in commands.items():
            servers.append(start(name, command, env))
        reference = asyncio.run(embed_all(servers[-1].port, texts[:64]))
        for server in servers[:-1]:
            vectors = asyncio.run(embed_all(server.port, texts[:64]))
            difference = max(abs(a - b) for u, v in zip(vectors, reference) for a, b in zip(u, v))
            print(f"largest difference between {server.name}'s vectors and the naive server's (64 headlines): "
                  f"{difference:.2e}")
        for clients in (int(c) for c in args.clients.split(",")):
            for round_ in range(args.rounds):
                for server in servers if round_ % 2 == 0 else servers[::-1]:
                    result = asyncio.run(load(server.port, bodies, clients, args.requests, args.seconds))
                    results.setdefault((server.name, clients), []).append(result)
                    print(f"  {server.name:<34} {clients:>3} clients: {result['rps']:7.1f} req/s  p50 "
                          f"{result['p50']:7.1f} ms  p99 {result['p99']:7.1f} ms  ({result['requests']} requests"
                          f"{', ' + str(result['errors']) + ' errors' if result['errors'] else ''})", flush=True)
    finally:
        for server in servers:
            stop(server)

    def median(name: str, clients: int, key: str) -> float:
        return statistics.median(r[key] for r in results[(name, clients)])

    print("\n| clients | server | requests/s | p50 ms | p99 ms | requests/s vs naive |\n|---|---|---|---|---|---|")
    counts = sorted({clients for _, clients in results})
    for clients in counts:
        for server in servers:
            ratio = median(server.name, clients, "rps") / median("naive", clients, "rps")
            print(f"| {clients} | {server.name} | {median(server.name, clients, 'rps'):.1f} | "
                  f"{median(server.name, clients, 'p50'):.1f} | {median(server.name, clients, 'p99'):.1f} | "
                  f"{ratio:.2f}x |")
    top = counts[-1]
    for server in servers[:-1]:
        ratio = median(server.name, top, "rps") / median("naive", top, "rps")
        p99_ok = median(server.name, top, "p99") <= median("naive", top, "p99")
        print(f"{server.name}, {top} clients: {ratio:.2f}x the naive server's requests/s, p99 "
              f"{'no worse' if p99_ok else 'worse'}: goal (>= 3x, p99 no worse) "
              f"{'met' if ratio >= 3 and p99_ok else 'not met'}")


if __name__ == "__main__":
    main()
