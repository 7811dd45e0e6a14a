"""Attention on CPU: torch's fused kernel (scaled_dot_product_attention) against the explicit maths.

`bertkit.models.functional.efficient_attention` picks between the two by dtype; this script is the evidence.
For shapes of BERT fine-tuning, pretraining, inference and translation, in float32 and bfloat16, it
times forward and forward + backward of both (alternating, median of the rounds) and prints the ratio
explicit / fused (below 1: the explicit maths is faster). Inputs carry a padding mask, as real batches do.

    python benchmarks/bench_attention.py [--rounds 8] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from bertkit.models.functional import attention, padding_mask_bias

# (batch, heads, length, head size): BERT fine-tuning / pretraining / long inputs / one query / translation
SHAPES = [(32, 8, 64, 64), (32, 4, 128, 64), (32, 12, 128, 64), (8, 8, 256, 64), (4, 8, 512, 64),
          (1, 12, 128, 32), (64, 4, 33, 64)]


def seconds(fn, rounds: int) -> float:
    fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compare(q, k, v, bias, rounds: int) -> list[float]:
    """[fused, explicit, ratio] milliseconds for the forward, then the same for forward + backward."""
    paths = {"fused": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias),
             "explicit": lambda: attention(q, k, v, bias)[0]}
    row = []
    for train in (False, True):
        times = {}
        for name, fn in paths.items():
            step = (lambda fn=fn: fn().sum().backward()) if train else torch.no_grad()(fn)
            times[name] = seconds(step, rounds) * 1000
        row += [times["fused"], times["explicit"], times["explicit"] / times["fused"]]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; times in ms; ratio = explicit / fused")
    print(f"{'shape (B, H, T, D)':<22}{'dtype':<10}{'fused fwd':>10}{'explicit':>10}{'ratio':>7}"
          f"{'fused f+b':>11}{'explicit':>10}{'ratio':>7}")
    for B, H, T, D in SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            q, k, v = (torch.randn(B, H, T, D, dtype=dtype, requires_grad=True) for _ in range(3))
            mask = torch.ones(B, T, dtype=torch.long)
            mask[B // 2:, T - T // 4:] = 0                       # half the rows end in padding
            row = compare(q, k, v, padding_mask_bias(mask, dtype), args.rounds)
            print(f"{str((B, H, T, D)):<22}{str(dtype).removeprefix('torch.'):<10}{row[0]:>10.2f}{row[1]:>10.2f}"
                  f"{row[2]:>7.2f}{row[3]:>11.2f}{row[4]:>10.2f}{row[5]:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
