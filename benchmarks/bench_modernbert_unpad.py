"""A ModernBERT encoder over real texts of mixed lengths, padded against unpadded (its real tokens packed: every step
but attention skips the padding), in one process, alternating rounds.

Texts: THUCNews headlines and inews bodies (cut at --max-length tokens), shuffled together as a stream of mixed
lengths arrives (a search index's documents, a queue of requests), tokenized with m3e-small's vocabulary; batches of
--batch-size in that order, each padded to its longest. The model: ModernBERT's architecture at bertkit's scale
(--layers x --hidden, random weights; every third layer global, the rest local over 128 tokens), float32, no
gradients. Also the same texts sorted by length first (as `bertkit encode` batches them), where padding is small.

    python benchmarks/bench_modernbert_unpad.py            # prints tokens/s of each and the ratio
"""

from __future__ import annotations

import argparse
import random
import time

import torch


def texts(headlines: int, bodies: int, seed: int) -> list[str]:
    from bertkit.data.tasks import inews_split, thucnews_headlines

    mixed = [title for _, title in thucnews_headlines()][:headlines]
    mixed += [" ".join(b.split()) for b in inews_split("train")[1] if b.strip()][:bodies]
    random.Random(seed).shuffle(mixed)
    return mixed


def batches(tokenizer, items: list[str], batch_size: int, max_length: int) -> list[dict[str, torch.Tensor]]:
    return [tokenizer(items[i:i + batch_size], padding=True, truncation=True, max_length=max_length,
                      return_tensors="pt", return_token_type_ids=False)
            for i in range(0, len(items), batch_size)]


def run(model, prepared: list[dict[str, torch.Tensor]], unpad: bool) -> float:
    model.unpad = unpad
    start = time.perf_counter()
    with torch.no_grad():
        for batch in prepared:
            model(batch["input_ids"], batch["attention_mask"])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headlines", type=int, default=448)
    parser.add_argument("--bodies", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from bertkit.data.sources import resolve_model
    from bertkit.inference.machine import cpu_name
    from bertkit.models.modernbert.configuration import ModernBertConfig
    from bertkit.models.modernbert.modeling import ModernBertModel
    from bertkit.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(resolve_model("m3e-small"))
    config = ModernBertConfig(vocab_size=len(tokenizer), hidden_size=args.hidden,
                              intermediate_size=args.hidden * 3 // 2, num_hidden_layers=args.layers,
                              num_attention_heads=args.hidden // 64,
                              max_position_embeddings=args.max_length, pad_token_id=tokenizer.pad_token_id,
                              layer_types=["full_attention" if i % 3 == 0 else "sliding_attention"
                                           for i in range(args.layers)])
    torch.manual_seed(0)
    model = ModernBertModel(config).eval()
    items = texts(args.headlines, args.bodies, seed=0)
    orders = {"mixed (input order)": items, "sorted by length": sorted(items, key=len)}
    print(f"CPU: {cpu_name()}, torch threads {torch.get_num_threads()}; "
          f"{args.layers} x {args.hidden} ModernBERT, {len(items)} texts ({args.headlines} headlines, {args.bodies} "
          f"bodies), batches of {args.batch_size}, at most {args.max_length} tokens")
    for name, order in orders.items():
        prepared = batches(tokenizer, order, args.batch_size, args.max_length)
        real = sum(int(b["attention_mask"].sum()) for b in prepared)
        padded = sum(b["attention_mask"].numel() for b in prepared)
        run(model, prepared[:2], False), run(model, prepared[:2], True)  # warm-up: kernels chosen, memory found
        seconds = {False: [], True: []}
        for _ in range(args.rounds):
            for unpad in (False, True):
                seconds[unpad].append(run(model, prepared, unpad))
        best = {unpad: min(times) for unpad, times in seconds.items()}
        print(f"{name}: {real:,} real tokens of {padded:,} padded ({1 - real / padded:.0%} padding); "
              f"padded {real / best[False]:,.0f} tokens/s, unpadded {real / best[True]:,.0f} tokens/s: "
              f"{best[False] / best[True]:.2f}x (best of {args.rounds} alternating rounds)")


if __name__ == "__main__":
    main()
