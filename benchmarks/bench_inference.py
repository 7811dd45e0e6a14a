"""Inference speed: bertkit BertModel vs transformers BertModel (sdpa, fp32), same weights, same inputs.

Both models run in one process, alternating round by round so that machine noise hits both alike;
the figure is the median tokens/s over the rounds, and the ratio bertkit / transformers.

    python benchmarks/bench_inference.py [--model DIR] [--rounds 10]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import transformers

from bertkit.models.bert import BertModel


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="model dir (default: the all-MiniLM-L6-v2 source)")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    if args.model is None:
        from bertkit.data.sources import model_dir

        args.model = model_dir("all-MiniLM-L6-v2")

    ours = BertModel.from_pretrained(args.model).eval()
    theirs = transformers.BertModel.from_pretrained(args.model, attn_implementation="sdpa").eval()
    vocab = ours.config.vocab_size
    print(f"model {args.model}  torch {torch.__version__}  threads {torch.get_num_threads()}  "
          f"transformers {transformers.__version__}")
    print(f"{'shape':>8} {'bertkit tok/s':>14} {'transformers tok/s':>19} {'ratio':>6} {'max|diff|':>10}")
    for batch, seq in ((32, 128), (1, 128)):
        r = bench_shape(ours, theirs, batch, seq, vocab, args.rounds)
        print(f"{r['shape']:>8} {r['bertkit']:>14,.0f} {r['transformers']:>19,.0f} {r['ratio']:>6.2f} "
              f"{r['max_abs_diff']:>10.1e}")


if __name__ == "__main__":
    main()
