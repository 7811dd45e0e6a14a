"""One long request beside many short ones: does `bertkit serve --long-inputs chunk` keep other clients moving?

A client sends one /embed of a long text (read in windows of the model's positions); 0.2 s later 20 clients each send
one short /embed (a THUCNews headline), and the script prints the short requests' latencies (p50, p99, most) and
the long one's status and time. Two long texts are tried, each on a fresh server:

    over    600,000 characters (1,567 windows of m3e-small's 512): refused with 413 before any window is run
            (`--max-request-windows`, 16 by default);
    bound   as many characters as fill the bound's windows: run, its windows taking turns with the short requests'
            rows in the server's batches.

The goal (docs/serving.md): p99 of the short requests under 2 s on a 2-core CPU, in both rows.

    python benchmarks/bench_serve_fairness.py [--model m3e-small] [--clients 20] [--serve "--dtype fp32"]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).parent))
from bench_serve import Connection, serve_command, start, stop  # noqa: E402

LONG_CHARACTERS = 600_000


def headlines(count: int) -> list[str]:
    from bertkit.data.tasks import load_classification

    return [example.text for example in load_classification("thucnews")["test"][:count]]


def long_text(characters: int) -> str:
    """Chinese news text, repeated to `characters`: the inews bodies, one after another."""
    from bertkit.data.summaries import inews_articles

    bodies = "".join(body for body, _ in inews_articles("train")[:400])
    return (bodies * (characters // max(1, len(bodies)) + 1))[:characters]


async def one(port: int, body: bytes) -> tuple[int, float, bytes]:
    connection = await Connection.open(port)
    try:
        started = time.perf_counter()
        status, answer, _ = await connection.request("POST", "/embed", body)
        return status, time.perf_counter() - started, answer
    finally:
        connection.close()


async def beside(port: int, long_body: bytes, shorts: list[bytes]) -> tuple[tuple[int, float, bytes], list[float]]:
    """The long request, and the short ones sent 0.2 s after it: (its status, seconds, answer) and their seconds."""
    long_task = asyncio.create_task(one(port, long_body))
    await asyncio.sleep(0.2)
    answers = await asyncio.gather(*(one(port, body) for body in shorts))
    bad = [status for status, _, _ in answers if status != 200]
    if bad:
        raise RuntimeError(f"short requests answered {bad}")
    return await long_task, [seconds for _, seconds, _ in answers]


def windows_text(tokenizer, windows: int, stride: int, length: int) -> str:
    """A text of the long one's start that takes `windows` windows of `length` tokens sharing `stride`."""
    text = long_text(40_000)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    room = length - 2
    want = room + (windows - 1) * (room - stride)
    return tokenizer.decode(ids[:want]).replace(" ", "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="m3e-small")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--serve", default="", help="more flags for bertkit serve")
    args = parser.parse_args()
    from bertkit.data.sources import resolve_model
    from bertkit.inference.machine import Machine
    from bertkit.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(resolve_model(args.model))
    shorts = [orjson.dumps({"inputs": text}) for text in headlines(args.clients)]
    length = 512
    stride = (length - 2) // 4
    env = {**os.environ}
    print(f"machine: {Machine.here().describe()}; {args.clients} short /embed requests (a headline each) sent 0.2 s "
          "after one long one")
    for name, text in (("over", long_text(LONG_CHARACTERS)), ("bound", windows_text(tokenizer, 15, stride, length))):
        server = start(f"bertkit serve ({name})", serve_command(args.model, args.serve, "--long-inputs", "chunk"), env)
        try:
            asyncio.run(beside(server.port, shorts[0], shorts[:2]))  # warm: the first forwards of the process
            (status, seconds, answer), latencies = asyncio.run(beside(server.port, orjson.dumps({"inputs": text}),
                                                                      shorts))
        finally:
            stop(server)
        cut = sorted(latencies)
        p99 = cut[min(len(cut) - 1, round(0.99 * (len(cut) - 1)))]
        said = answer[:160].decode(errors="replace") if status != 200 else f"{len(orjson.loads(answer))} vector"
        print(f"{name}: the long request ({len(text):,} characters) answered {status} in {seconds:.2f} s ({said}); "
              f"short requests p50 {statistics.median(cut):.2f} s, p99 {p99:.2f} s, most {cut[-1]:.2f} s "
              f"({'under' if p99 < 2.0 else 'OVER'} 2 s)")


if __name__ == "__main__":
    main()
