"""`bertkit serve` against a naive server: requests per second and latency under 1, 8 and 32 clients, on POST /embed
(a headline per request), and with --routes on POST /rerank (a query and its candidates) and on POST /embed of texts
longer than the model's positions (read in windows).

The naive server is what "wrap encode in a web server" gives: the same ASGI stack (Starlette on uvicorn, with
httptools and uvloop), transformers' AutoTokenizer and AutoModel in fp32, one forward per request, no batching; it
pools the way `bertkit serve` does for the model (mean for m3e-small) and normalizes. It runs with the torch threads
bertkit serve takes by default (one fewer than the cores), so that the comparison is of batching, not of threads.
Every server is a process of its own on the loopback, started by this script and stopped by it; the clients run
here, in another process, as asyncio tasks on keep-alive connections, each sending one request and waiting for the
answer before sending the next. For every client count the servers take turns (the order reversed every other
round), each for at most --requests requests or --seconds seconds after a short warm-up. By default three
`bertkit serve`s are measured: fp32 with the default threads, fp32 with two threads, bf16.

    python benchmarks/bench_serve.py [--model m3e-small] [--serve "--dtype fp32" --serve "--dtype bf16" ...]
                                     [--clients 1,8,32] [--requests 2000] [--seconds 20] [--rounds 1]
                                     [--naive-threads N] [--naive-mode inline|threads]
                                     [--routes embed,rerank,long] [--out runs/bench-serve] [--rerank-model DIR]
                                     [--rerank-texts 16] [--long-max-tokens 2048] [--chunk-stride N]
                                     [--naive-long chunk|truncate]

--routes names the rows to measure (default: embed), each with its own servers, started and stopped in turn:

    embed   POST /embed, one real headline (THUCNews) per request.
    rerank  POST /rerank, TEI's {"query": text, "texts": [text, ...]}: a THUCNews headline as the query and the
            --rerank-texts (16) headlines after it as the candidates, against a naive server that scores the same
            (query, text) pairs with transformers' AutoModelForSequenceClassification in fp32, all of a request's
            pairs in one padded forward, and answers TEI's [{"index", "score"}] best first (the score: the
            probability of the label "1", else of the last; a sigmoid for one output, as bertkit's). The
            cross-encoder is --rerank-model, or one this script makes once and keeps in --out/cross-encoder/best:
            m3e-small fine-tuned by `bertkit finetune --task pairs` for a few steps on inews (title, its own body) =
            1 and (title, the next article's body) = 0 pairs (bertkit has no named pairs dataset); its speed does not
            depend on how well it ranks.
    long    POST /embed, one inews body longer than the model's positions (512 tokens, at most --long-max-tokens)
            per request, against `bertkit serve --long-inputs chunk`: the text's tokens in windows of the model's
            positions sharing --chunk-stride tokens (bertkit's default: a quarter of a window), pooled by their
            mean weighted by the text's tokens in each. The naive server (--naive-long chunk, the default) reads the
            same windows, made by transformers' tokenizer (return_overflowing_tokens with stride: bertkit's windows,
            token for token), all of a request's windows in one padded forward, pooled the same way: the same work
            and the same vectors, so the row compares serving, not reading less. --naive-long truncate is TEI's
            default instead (auto-truncate: the first 512 tokens only), a server that does less than is asked; its
            vectors are not compared.

Printed: requests/s, p50 and p99 latency per server and client count, each server's ratio to the naive one, and
for /embed whether the goal holds (>= 3x the naive server's requests/s at the largest client count, p99 no worse).
Before timing, every server answers the same requests and the largest difference from the naive server's answers
is printed: vectors for /embed, scores for /rerank, vectors and windows per text for the long row; on these two rows a
server computing in fp32 beyond 1e-5 of the naive fp32 server stops the benchmark, which would compare different
work.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

START_TIMEOUT = 180.0     # seconds for a server to load its model and answer /health
REQUEST_TIMEOUT = 60.0    # seconds for one answer
WARMUP_REQUESTS = 20
ROUTES = ("embed", "rerank", "long")
FP32_TOLERANCE = 1e-5     # the rerank scores and long vectors of an fp32 server against the naive fp32 server's
CHECKED = 64              # requests every server answers before timing, compared with the naive server's answers
LONG_CHECKED = 16         # the same for the long row, whose requests take a second or more each
RERANK_STEPS = 30         # fine-tuning steps of the cross-encoder made here (its speed does not depend on them)
RERANK_ARTICLES = (512, 64)  # inews articles (train, dev) whose title/body pairs it is fine-tuned and scored on


# ---- the naive server ----------------------------------------------------------------------------

def naive_embedder(model_dir: str, pooling: str, long_inputs: str = "truncate",
                   overlap: int = 0) -> Callable[[list[str]], list[list[float]]]:
    """texts -> unit vectors, one transformers forward per call. A text longer than the model's positions is cut to
    them (`long_inputs` "truncate", TEI's auto-truncate), or ("chunk") read in the windows transformers' tokenizer
    makes of it (return_overflowing_tokens, `overlap` tokens shared), all windows in the one forward, whose vectors
    are pooled by their mean weighted by the text's tokens in each (the windows less [CLS] and [SEP])."""
    import torch
    import torch.nn.functional as F
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModel.from_pretrained(model_dir).eval()
    windows = {"stride": overlap, "return_overflowing_tokens": True} if long_inputs == "chunk" else {}

    def forward(texts: list[str]) -> list[list[float]]:
        with torch.inference_mode():
            batch = tokenizer(texts, padding=True, truncation=True, max_length=model.config.max_position_embeddings,
                              return_tensors="pt", **windows)
            owners = batch.pop("overflow_to_sample_mapping", None)
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"]
            if pooling == "mean":
                weights = mask.unsqueeze(-1).to(hidden.dtype)
                vectors = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
            else:
                vectors = hidden[:, 0]
            if owners is not None:  # each text's windows, weighted by its tokens in each
                tokens = (mask.sum(1) - 2).clamp(min=1).to(torch.float64).unsqueeze(-1)
                sums = torch.zeros(len(texts), vectors.shape[1], dtype=torch.float64)
                totals = torch.zeros(len(texts), 1, dtype=torch.float64)
                vectors = (sums.index_add_(0, owners, vectors.double() * tokens)
                           / totals.index_add_(0, owners, tokens)).float()
            return F.normalize(vectors, dim=-1).tolist()

    return forward


def naive_reranker(model_dir: str) -> Callable[[str, list[str]], list[dict]]:
    """(query, texts) -> TEI's [{"index", "score"}] best first, one transformers forward of all the pairs: the score
    is the probability of the label "1" (else of the last label), or for one output its sigmoid, as bertkit's."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    labels = [str(model.config.id2label[i]) for i in range(model.config.num_labels)]
    positive = labels.index("1") if "1" in labels else len(labels) - 1

    def forward(query: str, texts: list[str]) -> list[dict]:
        with torch.inference_mode():
            batch = tokenizer([query] * len(texts), texts, padding=True, truncation=True,
                              max_length=model.config.max_position_embeddings, return_tensors="pt")
            logits = model(**batch).logits
            scores = logits[:, 0].sigmoid() if logits.shape[1] == 1 else logits.softmax(-1)[:, positive]
        ranks = [{"index": index, "score": score} for index, score in enumerate(scores.tolist())]
        return sorted(ranks, key=lambda rank: -rank["score"])

    return forward


def naive_app(model_dir: str, pooling: str, mode: str, task: str = "embed", long_inputs: str = "truncate",
              overlap: int = 0):
    """Starlette app: POST /embed {"inputs": text | [text]} -> [[float]], or (task "rerank") POST /rerank {"query":
    text, "texts": [text]} -> [{"index", "score"}]; one transformers forward per request."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    if task == "rerank":
        forward, path = naive_reranker(model_dir), "/rerank"
    else:
        forward, path = naive_embedder(model_dir, pooling, long_inputs, overlap), "/embed"

    async def answer(request):
        body = await request.json()
        if task == "rerank":
            work = (body["query"], body["texts"])
        else:
            work = ([body["inputs"]] if isinstance(body["inputs"], str) else body["inputs"],)
        return JSONResponse(await run_in_threadpool(forward, *work) if mode == "threads" else forward(*work))

    async def health(request):
        return Response(b"")

    return Starlette(routes=[Route(path, answer, methods=["POST"]), Route("/health", health)])


def run_naive_server(model_dir: str, pooling: str, mode: str, threads: int | None, task: str, long_inputs: str,
                     overlap: int) -> None:
    import socket

    import torch
    import uvicorn

    if threads:
        torch.set_num_threads(threads)
    app = naive_app(model_dir, pooling, mode, task, long_inputs, overlap)
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
    def __init__(self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.port, self.reader, self.writer = port, reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(port, *await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), REQUEST_TIMEOUT))

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes, dict[bytes, bytes]]:
        """(status, body, headers with lower-case names) of one request. A keep-alive connection the server closed
        while it sat idle (uvicorn closes one after 5 s: a client can wait that long between its warm-up and its
        measured requests when each takes seconds) is opened again and the request sent on the new one, as HTTP
        clients do."""
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" \
               f"Content-Length: {len(body)}\r\n\r\n"
        for attempt in range(2):
            self.writer.write(head.encode() + body)
            try:
                status_line = await asyncio.wait_for(self.reader.readline(), REQUEST_TIMEOUT)
            except ConnectionResetError:
                status_line = b""
            if status_line or attempt:
                break
            self.writer.close()
            self.reader, self.writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port),
                                                              REQUEST_TIMEOUT)
        return await asyncio.wait_for(self._response(status_line), REQUEST_TIMEOUT)

    async def _response(self, status_line: bytes) -> tuple[int, bytes, dict[bytes, bytes]]:
        status = int(status_line.split()[1])
        headers = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        return status, await self.reader.readexactly(int(headers.get(b"content-length", 0))), headers

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


async def post_all(port: int, path: str, bodies: list[bytes]) -> list[tuple[object, dict[bytes, bytes]]]:
    """The answers (JSON, and headers) to `bodies` posted one after another on one connection."""
    connection = await Connection.open(port)
    try:
        answers = []
        for body in bodies:
            status, answer, headers = await connection.request("POST", path, body)
            if status != 200:
                raise RuntimeError(f"{path} answered {status}: {answer[:200]!r}")
            answers.append((orjson.loads(answer), headers))
        return answers
    finally:
        connection.close()


async def load(port: int, path: str, bodies: list[bytes], clients: int, requests: int, seconds: float) -> dict:
    """`clients` connections, each sending its next request when the last is answered, until `requests` are sent
    or `seconds` have passed; requests/s over the whole run, latency percentiles, errors."""
    connections = [await Connection.open(port) for _ in range(clients)]
    warm = itertools.count()
    await asyncio.gather(*(_client(c, path, bodies, warm, min(WARMUP_REQUESTS, requests), time.monotonic() + seconds,
                                   [], []) for c in connections))
    latencies: list[float] = []
    errors: list[int] = []
    sent = itertools.count()
    start = time.perf_counter()
    await asyncio.gather(*(_client(c, path, bodies, sent, requests, time.monotonic() + seconds, latencies, errors)
                           for c in connections))
    elapsed = time.perf_counter() - start
    for connection in connections:
        connection.close()
    latencies.sort()
    return {"requests": len(latencies), "rps": len(latencies) / elapsed, "errors": len(errors),
            "p50": 1e3 * statistics.median(latencies),
            "p99": 1e3 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]}


async def _client(connection: Connection, path: str, bodies: list[bytes], sent: itertools.count, requests: int,
                  deadline: float, latencies: list[float], errors: list[int]) -> None:
    while time.monotonic() < deadline and (n := next(sent)) < requests:
        start = time.perf_counter()
        status, *_ = await connection.request("POST", path, bodies[n % len(bodies)])
        if status == 200:
            latencies.append(time.perf_counter() - start)
        else:
            errors.append(status)


# ---- the comparison ------------------------------------------------------------------------------
# ---- the rows ------------------------------------------------------------------------------------

@dataclass
class Workload:
    """One row: a route's requests, the servers that answer them (the naive one last), and the check of their
    answers against the naive server's before timing."""

    route: str                              # embed, rerank or long
    path: str                               # the route posted to
    title: str                              # what is measured, printed first
    bodies: list[bytes]                     # the requests, sent in turn
    commands: dict[str, list[str]]          # server name -> command line; "naive" last
    check: Callable[[list[Server]], None]


def model_dtype(port: int) -> str:
    """The number format a `bertkit serve` computes in (its /info's model_dtype)."""
    async def info() -> dict:
        connection = await Connection.open(port)
        try:
            return orjson.loads((await connection.request("GET", "/info"))[1])
        finally:
            connection.close()

    return asyncio.run(info())["model_dtype"]


def judged(server: Server, difference: float, what: str) -> str:
    """`difference` printed with its bound: an fp32 server's answers are the naive fp32 server's within
    FP32_TOLERANCE, or the benchmark stops."""
    dtype = model_dtype(server.port)
    if dtype != "float32":
        return f"{difference:.2e} ({dtype})"
    if difference > FP32_TOLERANCE:
        raise SystemExit(f"bench_serve: {server.name}'s {what} differ from the naive server's by {difference:.2e}, "
                         f"more than {FP32_TOLERANCE:g} in fp32: the servers would not be doing the same work")
    return f"{difference:.2e} (float32: within {FP32_TOLERANCE:g})"


def largest_difference(answers: list[list[float]], reference: list[list[float]]) -> float:
    return max(abs(a - b) for u, v in zip(answers, reference) for a, b in zip(u, v))


def rerank_pairs(articles: list[tuple[str, str]]) -> list[tuple[str, str, int]]:
    """(title, its own body, 1) and (title, the next article's body, 0) for every (title, body), whitespace made
    single spaces (a TSV cell holds no tab or newline) and bodies cut to 300 characters (fine-tuning reads 128
    tokens)."""
    flat = [(" ".join(title.split()), " ".join(body.split())[:300]) for title, body in articles]
    rows = []
    for k, (title, body) in enumerate(flat):
        rows += [(title, body, 1), (title, flat[(k + 1) % len(flat)][1], 0)]
    return rows


def cross_encoder(out: Path, model: str, env: dict[str, str]) -> Path:
    """out/cross-encoder/best: `model` fine-tuned by `bertkit finetune --task pairs` on inews title/body pairs, made
    once and kept for later runs."""
    from bertkit.data.tasks import inews_split

    run = out / "cross-encoder"
    if (run / "best" / "config.json").is_file():
        print(f"cross-encoder: {run / 'best'}, made by an earlier run (delete {run} to make it again)", flush=True)
        return run / "best"
    data = out / "rerank-pairs"
    data.mkdir(parents=True, exist_ok=True)
    for split, count in zip(("train", "dev"), RERANK_ARTICLES):
        titles, bodies, _ = inews_split(split)
        articles = [(title, body) for title, body in zip(titles, bodies) if title.strip() and body.strip()][:count]
        rows = "".join(f"{title}\t{body}\t{label}\n" for title, body, label in rerank_pairs(articles))
        (data / f"{split}.tsv").write_text("text\ttext_pair\tlabel\n" + rows, encoding="utf-8")
    command = [sys.executable, "-m", "bertkit", "finetune", "--task", "pairs", "--model", model, "--train",
               str(data / "train.tsv"), "--dev", str(data / "dev.tsv"), "--max-length", "128", "--batch-size", "16",
               "--max-steps", str(RERANK_STEPS), "--no-progress", "--overwrite", "--out", str(run)]
    print(f"cross-encoder: fine-tuning {model} for {RERANK_STEPS} steps on {2 * RERANK_ARTICLES[0]} inews pairs "
          f"(title, own body: 1; title, the next article's body: 0) into {run / 'best'}, kept for later runs",
          flush=True)
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"bench_serve: making the cross-encoder failed: {' '.join(command)}\n"
                         f"{done.stdout}{done.stderr}")
    return run / "best"


def embed_workload(args, model_dir: str, pooling: str, serves: list[str], naive: Callable[..., list[str]]) -> Workload:
    from bertkit.data.tasks import load_classification
    from bertkit.inference.serving.model import default_threads

    splits = load_classification("thucnews")
    texts = [example.text for split in ("train", "dev", "test") for example in splits[split]]
    commands = {f"bertkit {flags}": serve_command(args.model, flags, "--pooling", pooling) for flags in serves}
    commands["naive"] = naive(args.model, "--naive-long", "truncate")

    def check(servers: list[Server]) -> None:
        bodies = [orjson.dumps({"inputs": text}) for text in texts[:CHECKED]]
        reference = [answer[0] for answer, _ in asyncio.run(post_all(servers[-1].port, "/embed", bodies))]
        for server in servers[:-1]:
            vectors = [answer[0] for answer, _ in asyncio.run(post_all(server.port, "/embed", bodies))]
            print(f"largest difference between {server.name}'s vectors and the naive server's ({CHECKED} headlines): "
                  f"{largest_difference(vectors, reference):.2e}")

    title = (f"{args.model} ({pooling} pooling), {len(texts):,} THUCNews headlines, one per request; naive: "
             f"transformers fp32, {args.naive_mode}, torch threads {args.naive_threads}; bertkit serve's default "
             f"torch threads {default_threads()}; {os.cpu_count()} CPUs")
    return Workload("embed", "/embed", title, [orjson.dumps({"inputs": text}) for text in texts], commands, check)


def rerank_workload(args, model_dir: str, serves: list[str], naive: Callable[..., list[str]],
                    env: dict[str, str]) -> Workload:
    from bertkit.data.tasks import load_classification

    ranker = args.rerank_model or str(cross_encoder(Path(args.out), args.model, env))
    splits = load_classification("thucnews")
    texts = [example.text for split in ("train", "dev", "test") for example in splits[split]]
    k = args.rerank_texts
    requests = [{"query": texts[i], "texts": [texts[(i + j) % len(texts)] for j in range(1, k + 1)]}
                for i in range(len(texts))]
    commands = {f"bertkit {flags}": serve_command(ranker, flags) for flags in serves}
    commands["naive"] = naive(ranker, "--naive-task", "rerank")

    def scores(server: Server, bodies: list[bytes]) -> list[list[float]]:
        """Each request's scores in the order of its texts."""
        answers = asyncio.run(post_all(server.port, "/rerank", bodies))
        return [[rank["score"] for rank in sorted(answer, key=lambda rank: rank["index"])] for answer, _ in answers]

    def check(servers: list[Server]) -> None:
        bodies = [orjson.dumps(request) for request in requests[:CHECKED]]
        reference = scores(servers[-1], bodies)
        for server in servers[:-1]:
            difference = largest_difference(scores(server, bodies), reference)
            print(f"largest difference between {server.name}'s scores and the naive server's ({CHECKED} requests of "
                  f"{k} pairs): {judged(server, difference, 'scores')}")

    title = (f"/rerank: {ranker}, a cross-encoder; {len(requests):,} requests, each a THUCNews headline as the query "
             f"and the {k} headlines after it as the texts; naive: transformers AutoModelForSequenceClassification "
             f"fp32, the request's {k} pairs in one padded forward, {args.naive_mode}, torch threads "
             f"{args.naive_threads}")
    return Workload("rerank", "/rerank", title, [orjson.dumps(request) for request in requests], commands, check)


def long_workload(args, model_dir: str, pooling: str, serves: list[str], naive: Callable[..., list[str]],
                  max_length: int, overlap: int) -> Workload:
    from bertkit.data.tasks import inews_split
    from bertkit.inference.long_inputs import window_size, window_spans
    from bertkit.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(model_dir)
    _, bodies, _ = inews_split("test")
    texts, lengths = [], []
    for body in (body.strip() for body in bodies):
        length = len(tokenizer(body, verbose=False)["input_ids"])  # with [CLS] and [SEP]
        if max_length < length <= args.long_max_tokens:
            texts.append(body)
            lengths.append(length)
    if not texts:
        raise SystemExit(f"bench_serve: no inews body has from {max_length + 1} to {args.long_max_tokens} tokens; "
                         "give a larger --long-max-tokens")
    windows = [len(window_spans(length - 2, window_size(max_length), overlap)) for length in lengths]
    stride = [] if args.chunk_stride is None else ["--chunk-stride", str(args.chunk_stride)]
    commands = {f"bertkit {flags}": serve_command(args.model, flags, "--pooling", pooling, "--long-inputs", "chunk",
                                                  *stride) for flags in serves}
    commands["naive"] = naive(args.model, "--naive-long", args.naive_long, "--chunk-stride", str(overlap))

    def check(servers: list[Server]) -> None:
        bodies = [orjson.dumps({"inputs": text}) for text in texts[:LONG_CHECKED]]
        reference = [answer[0] for answer, _ in asyncio.run(post_all(servers[-1].port, "/embed", bodies))]
        for server in servers[:-1]:
            answers = asyncio.run(post_all(server.port, "/embed", bodies))
            counted = [int(headers.get(b"x-bertkit-windows", b"0")) for _, headers in answers]
            if counted != windows[:LONG_CHECKED]:
                raise SystemExit(f"bench_serve: {server.name} read the first {LONG_CHECKED} texts in {counted} "
                                 f"windows, not the {windows[:LONG_CHECKED]} expected")
            if args.naive_long == "chunk":
                difference = largest_difference([answer[0] for answer, _ in answers], reference)
                print(f"largest difference between {server.name}'s vectors and the naive server's ({LONG_CHECKED} long "
                      f"texts, windows as expected): {judged(server, difference, 'vectors')}")
        if args.naive_long != "chunk":
            print(f"the naive server reads the first {max_length} tokens of each text only: its vectors are not "
                  "compared")

    naive_reads = (f"the same windows (transformers' tokenizer, return_overflowing_tokens, stride {overlap}), all of a "
                   "text's windows in one padded forward, pooled the same way" if args.naive_long == "chunk" else
                   f"the first {max_length} tokens only (TEI's auto-truncate)")
    title = (f"long /embed: {args.model} ({pooling} pooling), {len(texts)} inews bodies of {min(lengths)} to "
             f"{max(lengths)} tokens (mean {statistics.mean(lengths):.0f}), one per request; bertkit serve "
             f"--long-inputs chunk reads each in windows of {max_length} positions sharing {overlap} tokens: "
             f"{statistics.mean(windows):.2f} windows per text (from {min(windows)} to {max(windows)}); naive: "
             f"transformers fp32, {naive_reads}, {args.naive_mode}, torch threads {args.naive_threads}")
    return Workload("long", "/embed", title, [orjson.dumps({"inputs": text}) for text in texts], commands, check)


def serve_command(model: str, flags: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "bertkit", "serve", model, "--port", "0", *extra, *flags.split()]


# ---- the comparison ------------------------------------------------------------------------------

def measure(workload: Workload, args, env: dict[str, str]) -> None:
    """Start the workload's servers, check their answers, time them under every client count, stop them, and print
    the table."""
    print(workload.title, flush=True)
    servers: list[Server] = []
    results: dict[tuple[str, int], list[dict]] = {}
    try:
        for name, command in workload.commands.items():
            servers.append(start(name, command, env))
        workload.check(servers)
        for clients in args.clients:
            for round_ in range(args.rounds):
                for server in servers if round_ % 2 == 0 else servers[::-1]:
                    result = asyncio.run(load(server.port, workload.path, workload.bodies, clients, args.requests,
                                              args.seconds))
                    results.setdefault((server.name, clients), []).append(result)
                    print(f"  {server.name:<34} {clients:>3} clients: {result['rps']:7.1f} req/s  p50 "
                          f"{result['p50']:7.1f} ms  p99 {result['p99']:7.1f} ms  ({result['requests']} requests"
                          f"{', ' + str(result['errors']) + ' errors' if result['errors'] else ''})", flush=True)
    finally:
        for server in servers:
            stop(server)

    def median(name: str, clients: int, key: str) -> float:
        return statistics.median(r[key] for r in results[(name, clients)])

    print(f"\n{workload.route}:\n| clients | server | requests/s | p50 ms | p99 ms | requests/s vs naive |\n"
          "|---|---|---|---|---|---|")
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
        p99, naive_p99 = median(server.name, top, "p99"), median("naive", top, "p99")
        line = (f"{server.name}, {top} clients: {ratio:.2f}x the naive server's requests/s, p99 "
                f"{'no worse' if p99 <= naive_p99 else 'worse'} ({p99:.0f} ms against {naive_p99:.0f})")
        if workload.route == "embed":
            line += f": goal (>= 3x, p99 no worse) {'met' if ratio >= 3 and p99 <= naive_p99 else 'not met'}"
        print(line)
    print()


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
    parser.add_argument("--routes", default="embed",
                        help="the rows to measure, comma-separated: embed, rerank, long (default: embed)")
    parser.add_argument("--out", default="runs/bench-serve",
                        help="where the cross-encoder of the rerank row is made and kept (default: runs/bench-serve)")
    parser.add_argument("--rerank-model", metavar="DIR",
                        help="the cross-encoder of the rerank row (a `bertkit finetune --task pairs` model; default: "
                             "one made in --out/cross-encoder)")
    parser.add_argument("--rerank-texts", type=int, default=16, help="texts ranked per /rerank request (default: 16)")
    parser.add_argument("--long-max-tokens", type=int, default=2048,
                        help="the long row's texts: inews bodies longer than the model's positions and at most this "
                             "many tokens (default: 2048)")
    parser.add_argument("--chunk-stride", type=int,
                        help="the long row: tokens consecutive windows share (default: bertkit serve's, a quarter of "
                             "a window)")
    parser.add_argument("--naive-long", default="chunk", choices=["chunk", "truncate"],
                        help="the long row's naive server reads a long text in bertkit's windows, or its first "
                             "positions only (TEI's auto-truncate) (default: chunk)")
    parser.add_argument("--naive-server", action="store_true", help=argparse.SUPPRESS)  # run as the naive server
    parser.add_argument("--naive-task", default="embed", choices=["embed", "rerank"], help=argparse.SUPPRESS)
    args = parser.parse_args()

    from bertkit.data.sources import resolve_model
    from bertkit.inference.encode import declared_settings
    from bertkit.inference.serving.model import default_threads

    model_dir = str(resolve_model(args.model))
    pooling = declared_settings(model_dir).pooling
    args.naive_threads = args.naive_threads or default_threads()
    if args.naive_server:
        return run_naive_server(model_dir, pooling, args.naive_mode, args.naive_threads, args.naive_task,
                                args.naive_long, args.chunk_stride or 0)

    from bertkit.errors import InputError
    from bertkit.inference.long_inputs import check_overlap

    routes = [name.strip() for name in args.routes.split(",") if name.strip()]
    if not routes or set(routes) - set(ROUTES):
        parser.error(f"--routes takes names from {', '.join(ROUTES)}, comma-separated; got {args.routes!r}")
    try:
        args.clients = [int(count) for count in args.clients.split(",")]
    except ValueError:
        parser.error(f"--clients takes whole numbers, comma-separated; got {args.clients!r}")
    for name, value in (("--clients", min(args.clients)), ("--requests", args.requests), ("--rounds", args.rounds),
                        ("--seconds", args.seconds)):
        if value <= 0:
            parser.error(f"{name} must be positive, got {value}")
    if not 1 <= args.rerank_texts <= 32:
        parser.error(f"--rerank-texts must be from 1 to 32 (bertkit serve's --max-client-batch-size), got "
                     f"{args.rerank_texts}")
    if args.rerank_model is not None and not (Path(args.rerank_model) / "config.json").is_file():
        parser.error(f"--rerank-model {args.rerank_model} is not a model directory (it has no config.json)")
    max_length = json.loads((Path(model_dir) / "config.json").read_text())["max_position_embeddings"]
    if args.long_max_tokens <= max_length:
        parser.error(f"--long-max-tokens must be more than the model's {max_length} positions, got "
                     f"{args.long_max_tokens}")
    try:
        overlap = check_overlap(args.chunk_stride, max_length, "--chunk-stride")
    except InputError as err:
        parser.error(str(err))

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    serves = args.serve or ["--dtype fp32", "--dtype fp32 --threads 2", "--dtype bf16"]

    def naive(model: str, *extra: str) -> list[str]:
        return [sys.executable, str(Path(__file__).resolve()), "--naive-server", "--model", model, "--naive-mode",
                args.naive_mode, "--naive-threads", str(args.naive_threads), *extra]

    for route in dict.fromkeys(routes):
        if route == "embed":
            workload = embed_workload(args, model_dir, pooling, serves, naive)
        elif route == "rerank":
            workload = rerank_workload(args, model_dir, serves, naive, env)
        else:
            workload = long_workload(args, model_dir, pooling, serves, naive, max_length, overlap)
        measure(workload, args, env)


if __name__ == "__main__":
    main()
