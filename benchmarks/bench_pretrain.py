"""Pretraining speed: bertkit BertForPreTraining vs transformers.BertForPreTraining, training tokens/s.

Same config (4 layers, hidden 256, 4 heads, FFN 1024, vocab 21128), same initial weights, same batches
(seq 128, batch 32, 15% of tokens masked 80/10/10, NSP labels), AdamW, fp32 by default. The two run in
one process, alternating round by round; the figure is the median over rounds, and the ratio.

    python benchmarks/bench_pretrain.py [--rounds 6] [--steps 3] [--bf16] [--compile]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import transformers

from bertkit.models.bert.heads import BertForPreTraining

CONFIG = dict(vocab_size=21128, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
              max_position_embeddings=512)


def make_batches(n: int, batch: int, seq: int, vocab: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n):
        ids = torch.randint(106, vocab, (batch, seq), generator=g)
        ids[:, 0], ids[:, seq // 2], ids[:, -1] = 101, 102, 102               # [CLS] A [SEP] B [SEP]
        types = (torch.arange(seq) > seq // 2).long().expand(batch, seq).clone()
        chosen = torch.rand(batch, seq, generator=g) < 0.15
        chosen[:, [0, seq // 2, seq - 1]] = False
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        r = torch.rand(batch, seq, generator=g)
        masked = ids.clone()
        masked[chosen & (r < 0.8)] = 103
        random_pos = chosen & (r >= 0.8) & (r < 0.9)
        masked[random_pos] = torch.randint(106, vocab, (int(random_pos.sum()),), generator=g)
        batches.append({"input_ids": masked, "token_type_ids": types, "attention_mask": torch.ones_like(ids),
                        "labels": labels, "next_sentence_label": torch.randint(0, 2, (batch,), generator=g)})
    return batches


def trainer_step(model, optimizer, bf16: bool):
    def step(batch):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=3, help="training steps per model per round")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast for both")
    parser.add_argument("--compile", action="store_true", help="torch.compile both models")
    args = parser.parse_args()

    torch.manual_seed(0)
    theirs = transformers.BertForPreTraining(transformers.BertConfig(**CONFIG, attn_implementation="sdpa"))
    with tempfile.TemporaryDirectory() as tmp:
        theirs.save_pretrained(tmp)
        ours = BertForPreTraining.from_pretrained(tmp)
    steps = {}
    for name, model in (("bertkit", ours), ("transformers", theirs)):
        run = torch.compile(model) if args.compile else model
        steps[name] = trainer_step(run, torch.optim.AdamW(model.parameters(), lr=1e-4), args.bf16)

    batches = make_batches(args.steps, args.batch, args.seq, CONFIG["vocab_size"])
    # Same weights and batch -> same loss (dropout off for this check), before any training step.
    with torch.no_grad():
        first = {name: float(model.eval()(**batches[0]).loss) for name, model in (("bertkit", ours),
                                                                                   ("transformers", theirs))}
    ours.train()
    theirs.train()
    for step in steps.values():  # warm-up (and compilation)
        step(batches[0])
    times = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for batch in batches:
                step(batch)
            times[name].append(time.perf_counter() - start)
    tokens = args.steps * args.batch * args.seq
    tps = {name: tokens / statistics.median(t) for name, t in times.items()}
    mode = ("bf16" if args.bf16 else "fp32") + (" + compile" if args.compile else "")
    print(f"BertForPreTraining 4L/256/4H/1024, vocab 21128, batch {args.batch} x seq {args.seq}, AdamW, {mode}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, transformers {transformers.__version__}")
    print(f"loss on the first batch (eval mode): bertkit {first['bertkit']:.6f}  "
          f"transformers {first['transformers']:.6f}")
    print(f"training tokens/s: bertkit {tps['bertkit']:,.0f}  transformers {tps['transformers']:,.0f}  "
          f"ratio {tps['bertkit'] / tps['transformers']:.2f}")


if __name__ == "__main__":
    main()
