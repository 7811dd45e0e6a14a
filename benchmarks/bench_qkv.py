"""BERT's Q/K/V projection: three ways to compute it from the three `query`/`key`/`value` Linears.

- cat:    concatenate the three weights and biases (C -> 3C) on every call, one GEMM;
- three:  three F.linear calls, no copy of the weights (what BertSelfAttention does);
- cached: the concatenated weight kept between calls and rebuilt only when a parameter's `_version`
          counter moves; only without autograd, where no gradient has to flow back through it. Not
          adopted: torch's fused AdamW and writes through `.data` change a weight without moving its
          counter, so the kept copy would go stale, and `three` is as fast.

For BertSelfAttention at m3e-small's width (512, 8 heads) and the tiny preset's (128, 2 heads), batches of
32x64 and 1x16 tokens, it times the projection plus attention in eval (no_grad) forward and in training
forward + backward, alternating the variants, median of the rounds; ratios are against `cat`.

    python benchmarks/bench_qkv.py [--rounds 30] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.modeling import BertSelfAttention
from bertkit.models.functional import efficient_attention

SHAPES = [(512, 8, 32, 64), (512, 8, 1, 16), (128, 2, 32, 64), (128, 2, 1, 16)]  # (C, H, B, T)


def _qkv_cat(m: BertSelfAttention, x: torch.Tensor) -> torch.Tensor:
    weight = torch.cat((m.query.weight, m.key.weight, m.value.weight))
    bias = torch.cat((m.query.bias, m.key.bias, m.value.bias))
    return F.linear(x, weight, bias)                                            # (B, T, 3C)


def _qkv_three(m: BertSelfAttention, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return m.query(x), m.key(x), m.value(x)                                     # 3 x (B, T, C)


class _Cache:
    def __init__(self) -> None:
        self.key, self.value = None, None

    def __call__(self, m: BertSelfAttention, x: torch.Tensor) -> torch.Tensor:
        params = (m.query.weight, m.key.weight, m.value.weight, m.query.bias, m.key.bias, m.value.bias)
        key = tuple((p.data_ptr(), p._version) for p in params)
        if key != self.key:
            with torch.no_grad():
                self.value = (torch.cat(params[:3]), torch.cat(params[3:]))
            self.key = key
        return F.linear(x, *self.value)


def attend(m: BertSelfAttention, x: torch.Tensor, qkv) -> torch.Tensor:
    B, T, C = x.shape
    out = qkv(m, x)
    if isinstance(out, tuple):
        q, k, v = (t.view(B, T, m.num_heads, m.head_dim).transpose(1, 2) for t in out)
    else:
        q, k, v = out.view(B, T, 3, m.num_heads, m.head_dim).permute(2, 0, 3, 1, 4)
    return efficient_attention(q, k, v).transpose(1, 2).reshape(B, T, C)


def seconds(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median ms per call; ratio = variant / cat")
    print(f"{'C':>4} {'B x T':>7}  {'mode':<11}{'cat':>8}{'three':>8}{'ratio':>7}{'cached':>8}{'ratio':>7}")
    for C, H, B, T in SHAPES:
        torch.manual_seed(0)
        m = BertSelfAttention(BertConfig(hidden_size=C, num_attention_heads=H, intermediate_size=4 * C))
        x = torch.randn(B, T, C)
        x_grad = x.clone().requires_grad_()
        for mode in ("eval", "train f+b"):
            variants = {"cat": _qkv_cat, "three": _qkv_three}
            if mode == "eval":
                variants["cached"] = _Cache()
            steps = {}
            for name, qkv in variants.items():
                if mode == "eval":
                    steps[name] = torch.no_grad()(lambda qkv=qkv, m=m, x=x: attend(m, x, qkv))
                else:
                    steps[name] = lambda qkv=qkv, m=m, x=x_grad: attend(m, x, qkv).sum().backward()
            for step in steps.values():  # warm up
                step()
            times = {name: [] for name in steps}
            for _ in range(args.rounds):  # alternate, so a busy neighbour slows every variant alike
                for name, step in steps.items():
                    times[name].append(seconds(step, 1))
            ms = {name: statistics.median(t) * 1000 for name, t in times.items()}
            cached = f"{ms['cached']:8.3f}{ms['cached'] / ms['cat']:7.2f}" if "cached" in ms else f"{'-':>8}{'-':>7}"
            print(f"{C:>4} {f'{B}x{T}':>7}  {mode:<11}{ms['cat']:8.3f}{ms['three']:8.3f}"
                  f"{ms['three'] / ms['cat']:7.2f}{cached}")


if __name__ == "__main__":
    main()
