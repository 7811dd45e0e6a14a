"""`bertkit encode --input FILE --out V.npy` streams: its peak memory does not grow with the file's length.

Encodes a 10,000-line and a 2,000,000-line file of real headlines (THUCNews, repeated) with a small BERT, each as
its own `bertkit encode` process, and prints the peak resident memory of each (the acceptance: the long file's
within 300 MB of the short one's), the seconds, and whether the streamed vectors equal those of `encode()` on the
same texts in memory, bit for bit.

    .venv/bin/python benchmarks/bench_encode_stream.py                 # 10,000 and 2,000,000 lines
    .venv/bin/python benchmarks/bench_encode_stream.py --lines 10000 200000 --compare-lines 200000
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
BERTKIT = str(Path(sys.executable).with_name("bertkit"))


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def small_model(directory: Path) -> None:
    """A BERT of m3e-small's vocabulary (its tokenizer files), 2 layers x 128: the model's size is not the point."""
    from bertkit.data.sources import model_dir
    from bertkit.models.bert.configuration import BertConfig
    from bertkit.models.bert.modeling import BertModel
    from bertkit.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(model_dir("m3e-small"))
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=512)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def write_lines(path: Path, count: int) -> list[str]:
    from bertkit.data.tasks import load_classification

    headlines = [example.text for split in load_classification("thucnews").values() for example in split]
    lines = [headlines[i % len(headlines)] for i in range(count)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines


def encode_process(model: Path, source: Path, out: Path) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of one `bertkit encode` process."""
    start = time.perf_counter()
    process = subprocess.Popen([BERTKIT, "encode", "--model", str(model), "--input", str(source), "--out", str(out),
                                "--batch-size", "64"], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bertkit encode failed on {source}")
    return usage.ru_maxrss / 1024, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, nargs="+", default=[10_000, 2_000_000])
    parser.add_argument("--compare-lines", type=int, default=None,
                        help="compare the streamed vectors of the longest file with encode() in memory on its "
                             "first N lines (default: all of them)")
    args = parser.parse_args()
    print(f"{cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        small_model(work / "model")
        rows = []
        for count in args.lines:
            lines = write_lines(work / f"{count}.txt", count)
            rss, seconds = encode_process(work / "model", work / f"{count}.txt", work / f"{count}.npy")
            rows.append((count, rss, seconds, lines))
            print(f"{count:>10,} lines: peak RSS {rss:8.1f} MB, {seconds:7.1f} s, {count / seconds:9,.0f} lines/s",
                  flush=True)
        count, _, _, lines = rows[-1]
        compare = args.compare_lines or count
        from bertkit.inference import encode
        from bertkit.models.bert.modeling import BertModel
        from bertkit.tokenizer import BertTokenizer

        model, tokenizer = BertModel.from_pretrained(work / "model"), BertTokenizer.from_pretrained(work / "model")
        streamed = np.load(work / f"{count}.npy", mmap_mode="r")[:compare]
        in_memory = encode(model, tokenizer, lines[:compare], batch_size=64)
        same = streamed.shape == in_memory.shape and bool(np.array_equal(streamed, in_memory))
        print(f"streamed vectors of the first {compare:,} lines equal encode() in memory, bit for bit: {same}")
        growth = rows[-1][1] - rows[0][1]
        print(f"peak RSS grows {growth:+.1f} MB from {rows[0][0]:,} to {rows[-1][0]:,} lines (goal: within 300 MB)")


if __name__ == "__main__":
    main()
