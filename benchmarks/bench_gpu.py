"""One GPU run: bertkit against transformers, and bertkit's Trainer against its model's bare step, in tokens/s.

Pretraining steps and sentence vectors against transformers, the Trainer against the model alone: each figure in
tokens/s, the ratio, and the share of the GPU's peak it reaches (MFU).

Every comparison runs in one process on identical weights (one state_dict loaded into both models: bertkit's weight
names are Hugging Face's) and identical inputs, the sides alternating round by round (the order reversed every other
round), after warm-up steps; a figure is the median round. bf16 autocast on CUDA, fp32 on the CPU. Rows (--rows):

- pretrain: BertForPreTraining training steps (forward, backward, fused AdamW step, zero_grad) of BERT-base (12 x 768,
  12 heads, FFN 3072, vocab 21128, dropout 0.1) at 256 x 128 and 32 x 512, 15% of the positions predicted (-100
  elsewhere), NSP labels. The batches are unpadded and both sides get an all-ones attention_mask; one more bertkit
  run gets attention_mask=None (its attention may then take the flash kernel), and one runs LayerNorm in float32 as
  autocast does (bertkit's reads and writes bf16 on a GPU: what that saves). transformers runs "sdpa".
- tiny: the "tiny" preset trained by `bertkit pretrain` in a process of its own, as a user runs it (the Trainer:
  collation and masking on the CPU, loss and gradient norm read back, clipping, logging) on a synthetic corpus, its
  tokens/s read from metrics.jsonl, against the same model's bare step (forward, backward, the Trainer's AdamW) on the
  run's own timing batches on the device; --tiny-workers 0,4,8 runs it once per --loader-workers value.
- encode: mean-pooled sentence vectors of headline-length and body-length texts (cut at 512 tokens), BERT-base's
  shape with random weights: bertkit's `encode` (length-sorted batches) against transformers.BertModel on input-order
  batches padded to their longest, as a user runs it; batch 64, bf16 weights on CUDA. Each set twice: the models
  alone on texts tokenized before timing, and texts in, vectors out (tokenization, on the CPU, included); and each
  again with bertkit's own batches ("batches auto": on a GPU a batch of short texts grows to 16,384 padded tokens),
  transformers' still of 64. Texts:
  --texts files, else THUCNews headlines and inews bodies where bertkit's cache holds them, else synthetic texts of
  like lengths (the output says which; --save-texts writes the cached ones to files to carry to another machine).
- compile: the pretrain row at 256 x 128 with both models under torch.compile (bertkit's as `--compile` runs it),
  and bertkit's compiled step against transformers' eager one; compilation time printed apart. It runs last and
  --no-compile-rows leaves it out (it may cost a minute or more).

MFU counts useful FLOPs only, the same count for both sides: 6 x the non-embedding parameters (encoder layers and
pooler) per real token, 12 x layers x length x hidden per token for the attention scores, and the masked-LM head
(transform + decoder) at the predicted positions only. transformers computes the head at every position, 6.7x the
head's useful work; that extra is its cost, not work done, so it is not counted. Encode counts the forward (2 x, 4 x).

    python benchmarks/bench_gpu.py --save-texts texts                       # where bertkit's cache has them
    python benchmarks/bench_gpu.py --json bench_gpu.json --texts texts/headlines.txt texts/bodies.txt  # the GPU
    python benchmarks/bench_gpu.py --rows pretrain,tiny --no-compile-rows   # some rows
    python benchmarks/bench_gpu.py --smoke                                  # CPU, tiny sizes, every path
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path
from tempfile import TemporaryDirectory
from types import SimpleNamespace

import numpy as np
import torch
import transformers

from bertkit.models import layer_norm
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForPreTraining
from bertkit.models.bert.modeling import BertModel
from bertkit.training.compiling import compile_forward

BASE = dict(vocab_size=21128, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
            max_position_embeddings=512)
# shapes: the pretrain row's (batch, length); steps: per side per round; tiny_*: the tiny row's run and its model-alone
# loop (the last tiny_batches of the run's seven timing batches, tiny_passes over them a round); encode texts per set
FULL = SimpleNamespace(model=BASE, shapes=((256, 128), (32, 512)), warmup=3, rounds=5, steps=4, backend="inductor",
                       tiny_docs=2000, tiny_steps=300, tiny_log=10, tiny_options={}, tiny_batches=7, tiny_passes=2,
                       headlines=4000, bodies=600, max_length=512, encode_rounds=3)
# every path of the full run, on sizes a CPU runs in seconds; compile traces with dynamo but skips Inductor's codegen
SMOKE = SimpleNamespace(model=dict(BASE, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=128),
                        shapes=((4, 32), (2, 64)), warmup=1, rounds=2, steps=1, backend="eager",
                        tiny_docs=40, tiny_steps=6, tiny_log=1, tiny_options=dict(batch_size=8, max_seq_length=64),
                        tiny_batches=2, tiny_passes=1, headlines=48, bodies=8, max_length=128, encode_rounds=1)
ENCODE_BATCH = 64
CLS, SEP, MASK, FIRST_WORD = 101, 102, 103, 106  # bert-base-chinese's ids


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def alternate(runs: dict, rounds: int, device: torch.device) -> dict[str, float]:
    """Median seconds of each run (a callable doing one round's work), each once per round, the order reversed every
    other round so that drift (clocks, temperature) hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs)
    for r in range(rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            synchronize(device)
            start = time.perf_counter()
            runs[name]()
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ---- FLOPs ----------------------------------------------------------------------------------------

def flop_counts(model) -> SimpleNamespace:
    """Parameter counts of bertkit's `model` (BertForPreTraining or BertModel) that the FLOPs count multiplies. The
    pooler runs once per sequence but is counted per token, as the usual 6N convention does (0.7% of N here)."""
    bert = getattr(model, "bert", model)
    dense = sum(p.numel() for m in (bert.encoder, bert.pooler) if m is not None for p in m.parameters())
    head = 0
    if hasattr(model, "cls"):
        predictions = model.cls.predictions
        head = (sum(p.numel() for p in predictions.transform.parameters()) + predictions.decoder.weight.numel()
                + predictions.bias.numel())
    c = model.config
    return SimpleNamespace(dense=dense, head=head, layers=c.num_hidden_layers, hidden=c.hidden_size)


def batch_stats(batch: dict) -> tuple[int, int, int]:
    """(real tokens, sum over rows of length², predicted positions) of a training batch."""
    ids = batch["input_ids"]
    mask = batch.get("attention_mask")
    lengths = mask.sum(1) if mask is not None else torch.full((ids.size(0),), ids.size(1))
    predicted = int((batch["labels"] != -100).sum()) if "labels" in batch else 0
    return int(lengths.sum()), int((lengths.long() ** 2).sum()), predicted


def train_flops(n: SimpleNamespace, tokens: int, squares: int, predicted: int) -> float:
    """Useful FLOPs of a training step: 6 N per token, attention scores 12 L C per token per key, the head where
    a prediction is wanted."""
    return 6 * n.dense * tokens + 12 * n.layers * n.hidden * squares + 6 * n.head * predicted


def forward_flops(n: SimpleNamespace, tokens: int, squares: int) -> float:
    return 2 * n.dense * tokens + 4 * n.layers * n.hidden * squares


# ---- pretraining steps ----------------------------------------------------------------------------

def make_batches(n: int, batch: int, seq: int, vocab: int, device: torch.device, seed: int = 0) -> list[dict]:
    """[CLS] A [SEP] B [SEP] of random ids; round(15%) of each row predicted (google-research/bert's count, so every
    batch has as many: one compiled graph serves all), masked 80/10/10; random NSP labels."""
    g = torch.Generator().manual_seed(seed)
    k = round(0.15 * seq)
    out = []
    for _ in range(n):
        ids = torch.randint(FIRST_WORD, vocab, (batch, seq), generator=g)
        ids[:, 0], ids[:, seq // 2], ids[:, -1] = CLS, SEP, SEP
        types = (torch.arange(seq) > seq // 2).long().expand(batch, seq).clone()
        scores = torch.rand(batch, seq, generator=g)
        scores[:, [0, seq // 2, seq - 1]] = 2.0  # never predicted
        chosen = torch.zeros(batch, seq, dtype=torch.bool).scatter(1, scores.topk(k, largest=False).indices, True)
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        r = torch.rand(batch, seq, generator=g)
        masked = ids.clone()
        masked[chosen & (r < 0.8)] = MASK
        swapped = chosen & (r >= 0.8) & (r < 0.9)
        masked[swapped] = torch.randint(FIRST_WORD, vocab, (int(swapped.sum()),), generator=g)
        b = {"input_ids": masked, "token_type_ids": types, "attention_mask": torch.ones_like(ids), "labels": labels,
             "next_sentence_label": torch.randint(0, 2, (batch,), generator=g)}
        out.append({key: value.to(device) for key, value in b.items()})
    return out


def train_step(model, optimizer, device: torch.device, bf16: bool):
    def step(batch: dict) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def repeat(step, batches: list[dict], n: int):
    return lambda: [step(batches[i % len(batches)]) for i in range(n)]


def with_float32_layer_norm(step):
    """step with autocast's float32 LayerNorm: bertkit's own on a GPU reads and writes bf16 under autocast
    (bertkit.models.layer_norm); this measures what that saves."""
    def run(batch: dict) -> None:
        devices, layer_norm.LOW_PRECISION_DEVICES = layer_norm.LOW_PRECISION_DEVICES, set()
        try:
            step(batch)
        finally:
            layer_norm.LOW_PRECISION_DEVICES = devices
    return run


def pretraining_pair(ctx):
    """bertkit's and transformers' BertForPreTraining on one state_dict, on the device, each with a fused AdamW; kept
    for the compile row, which loads the same initial weights again."""
    if ctx.pair is None:
        torch.manual_seed(0)
        theirs = transformers.BertForPreTraining(transformers.BertConfig(**ctx.sizes.model, attn_implementation="sdpa"))
        ours = BertForPreTraining(BertConfig(**ctx.sizes.model))
        initial = {k: v.clone() for k, v in theirs.state_dict().items()}
        ours.load_state_dict(initial, strict=True)
        models = {"bertkit": ours.to(ctx.device).train(), "transformers": theirs.to(ctx.device).train()}
        optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
                      for name, m in models.items()}
        ctx.pair = SimpleNamespace(models=models, optimizers=optimizers, initial=initial, counts=flop_counts(ours))
    for model in ctx.pair.models.values():
        model.load_state_dict(ctx.pair.initial)
    return ctx.pair


def row_pretrain(ctx) -> None:
    s, device = ctx.sizes, ctx.device
    pair = pretraining_pair(ctx)
    steps = {name: train_step(m, pair.optimizers[name], device, ctx.bf16) for name, m in pair.models.items()}
    for batch_size, seq in s.shapes:
        ctx.say("pretrain", f"{batch_size}x{seq}: warm-up, then {s.rounds} rounds of {s.steps} steps a side")
        batches = make_batches(s.steps, batch_size, seq, s.model["vocab_size"], device)
        unmasked = [{k: v for k, v in b.items() if k != "attention_mask"} for b in batches]
        if (batch_size, seq) == s.shapes[0]:  # same weights, same batch -> the same loss (eval: dropout off)
            with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=ctx.bf16):
                losses = {name: float(m.eval()(**batches[0]).loss) for name, m in pair.models.items()}
            for m in pair.models.values():
                m.train()
            ctx.say("pretrain", "loss on the first batch, eval mode: " + "  ".join(f"{k} {v:.5f}"
                                                                                    for k, v in losses.items()))
        feeds = {"bertkit": (steps["bertkit"], batches), "bertkit mask=None": (steps["bertkit"], unmasked),
                 "bertkit LN fp32": (with_float32_layer_norm(steps["bertkit"]), batches),
                 "transformers": (steps["transformers"], batches)}
        for step, feed in feeds.values():
            repeat(step, feed, s.warmup)()
        seconds = alternate({name: repeat(step, feed, s.steps) for name, (step, feed) in feeds.items()}, s.rounds,
                            device)
        tokens, squares, predicted = map(sum, zip(*(batch_stats(b) for b in batches)))
        flops = train_flops(pair.counts, tokens, squares, predicted)
        for name, label, what in (("bertkit", "mask=ones", "attention_mask all ones"),
                                  ("bertkit mask=None", "mask=None", "attention_mask None"),
                                  ("bertkit LN fp32", "LN fp32", "LayerNorm in float32 (autocast's), mask all ones")):
            ctx.add(f"pretrain {batch_size}x{seq} {label}", name, tokens / seconds[name], "transformers",
                    tokens / seconds["transformers"], flops / seconds[name], flops / seconds["transformers"],
                    f"bertkit's {what}; transformers' mask all ones")
        del batches, unmasked
        free_memory()


def row_compile(ctx) -> None:
    s, device = ctx.sizes, ctx.device
    pair = pretraining_pair(ctx)
    batch_size, seq = s.shapes[0]
    batches = make_batches(s.steps, batch_size, seq, s.model["vocab_size"], device)
    runs, compiled = {}, {}
    for name, model in pair.models.items():
        ctx.say("compile", f"{name}: compiling ({s.backend})")
        # bertkit as `--compile` runs it (whole graphs: its masked-LM head's data-dependent rows captured)
        forward = (compile_forward(model, backend=s.backend) if name == "bertkit"
                   else torch.compile(model, backend=s.backend))
        step = train_step(forward, pair.optimizers[name], device, ctx.bf16)
        synchronize(device)
        start = time.perf_counter()
        repeat(step, batches, max(s.warmup, len(batches) + 1))()  # compiles, and recompiles if a batch asks it to
        synchronize(device)
        compiled[name] = time.perf_counter() - start
        ctx.say("compile", f"{name}: compiled and warmed up in {compiled[name]:.1f} s")
        runs[name] = repeat(step, batches, s.steps)
    eager = train_step(pair.models["transformers"], pair.optimizers["transformers"], device, ctx.bf16)
    repeat(eager, batches, s.warmup)()
    runs["transformers eager"] = repeat(eager, batches, s.steps)
    seconds = alternate(runs, s.rounds, device)
    tokens, squares, predicted = map(sum, zip(*(batch_stats(b) for b in batches)))
    flops = train_flops(pair.counts, tokens, squares, predicted)
    took = f"compile + warm-up s: bertkit {compiled['bertkit']:.1f}, transformers {compiled['transformers']:.1f}"
    for other, what in (("transformers", "both compiled"), ("transformers eager", "transformers not compiled")):
        ctx.add(f"compile {batch_size}x{seq} vs {'compiled' if other == 'transformers' else 'eager'}", "bertkit",
                tokens / seconds["bertkit"], other, tokens / seconds[other], flops / seconds["bertkit"],
                flops / seconds[other], f"torch.compile backend {s.backend}, {what}; {took}")
    torch._dynamo.reset()


# ---- the tiny BERT through `bertkit pretrain` -----------------------------------------------------

def chinese_like(rng: random.Random, n: int, alphabet: list[str], cum_weights: list[float]) -> str:
    """n characters of Zipf-distributed frequencies, a comma or a full stop after every 6 to 20."""
    chars = rng.choices(alphabet, cum_weights=cum_weights, k=n)
    at = rng.randint(6, 20)
    while at < n - 1:
        chars[at] = "，" if rng.random() < 0.7 else "。"
        at += rng.randint(6, 20)
    return "".join(chars)


def zipf_alphabet(size: int = 3500) -> tuple[list[str], list[float]]:
    alphabet = [chr(0x4E00 + (i * 7919) % 20000) for i in range(size)]  # spread over the CJK block
    return alphabet, list(np.cumsum([1.0 / (i + 1) for i in range(size)]))


def row_tiny(ctx) -> None:
    from bertkit.data.vocab import build_vocab
    from bertkit.pipelines.options import PretrainOptions
    from bertkit.pipelines.pretrain import prepare
    from bertkit.training.budget import timing_batches
    from bertkit.training.schedule import build_optimizer

    s, device, work = ctx.sizes, ctx.device, ctx.scratch / "tiny"
    rng, (alphabet, weights) = random.Random(1), zipf_alphabet()
    docs = [[chinese_like(rng, rng.randint(8, 40), alphabet, weights) + "。" for _ in range(rng.randint(5, 15))]
            for _ in range(s.tiny_docs)]
    work.mkdir(parents=True)
    (work / "corpus.txt").write_text("\n\n".join("\n".join(doc) for doc in docs), encoding="utf-8")
    vocab = build_vocab([line for doc in docs for line in doc], work / "vocab", kind="chars")
    os.environ["BERTKIT_STORES"] = str(work / "stores")  # the run's token store stays in the scratch directory
    options = dict(corpus=[str(work / "corpus.txt")], vocab=str(vocab), config="tiny", max_steps=s.tiny_steps,
                   bf16=ctx.bf16, progress=False, eval_fraction=0.0, log_every=s.tiny_log, **s.tiny_options)
    if "device" in {f.name for f in dataclasses.fields(PretrainOptions)}:
        options["device"] = str(device)
    # (i) the model alone: the run's model and timing batches (seven, short to long), on the device before timing
    run = prepare(PretrainOptions(**options, out=str(work / "alone")))
    probes = timing_batches(run.data.train_dataset, run.data.collator, run.options.batch_size,
                            run.options.group_by_length)[0]
    batches = [{k: v.to(device) for k, v in b.items()} for b in probes[-s.tiny_batches:]]
    model = run.model.to(device).train()
    step = train_step(model, build_optimizer(model, 5e-4, 0.01), device, ctx.bf16)  # the Trainer's AdamW
    repeat(step, batches, len(batches))()
    seconds = alternate({"alone": repeat(step, batches, s.tiny_passes * len(batches))}, s.rounds, device)["alone"]
    tokens, squares, predicted = map(sum, zip(*(batch_stats(b) for b in batches)))
    alone = s.tiny_passes * tokens / seconds
    flops_per_token = train_flops(flop_counts(model), tokens, squares, predicted) / tokens
    rows = sum(len(b["input_ids"]) for b in batches)
    shape = (f"batch {run.options.batch_size}, length {run.options.max_seq_length}, "
             f"mean {tokens / rows:.0f} tokens a row")
    ctx.say("tiny", f"model alone: {alone:,.0f} tok/s ({shape})")
    del run, model, step, batches
    free_memory()
    # (ii) the Trainer: `bertkit pretrain` as a user runs it, a process of its own (a run in this process would share
    # its warm CUDA state, and each loader setting its own process), its first records (warm-up) left out
    for workers in ctx.args.tiny_workers.split(","):
        out = work / f"run-{workers}"
        argv = [sys.executable, "-m", "bertkit", "pretrain", "--corpus", str(work / "corpus.txt"), "--vocab",
                str(vocab), "--config", "tiny", "--max-steps", str(s.tiny_steps), "--eval-fraction", "0",
                "--log-every", str(s.tiny_log), "--device", str(device), "--no-progress", "--out", str(out),
                *(["--bf16"] if ctx.bf16 else []), *(["--loader-workers", workers] if workers != "default" else []),
                *[f"--{k.replace('_', '-')}={v}" for k, v in s.tiny_options.items()]]
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
        skip = max(1, math.ceil(30 / s.tiny_log)) if s.tiny_steps > 60 else 2
        rates = [r["tokens_per_second"] for r in records[skip:] if "tokens_per_second" in r]
        trainer = statistics.median(rates)
        # the share of the loop's time spent getting its batches: near 1, the data loader sets the pace
        waits = [r["data_share"] for r in records[skip:] if "data_share" in r]
        waited = f", {statistics.median(waits):.0%} of it getting the batches" if waits else ""
        ctx.say("tiny", f"trainer ({workers} loader workers): {s.tiny_steps} steps in "
                        f"{time.perf_counter() - start:.1f} s with start-up; median of {len(rates)} records after the "
                        f"first {skip}: {trainer:,.0f} tok/s{waited}")
        name = "tiny: Trainer vs model alone" + ("" if workers == "default" else f", {workers} loader workers")
        ctx.add(name, "bertkit pretrain", trainer, "model alone", alone, trainer * flops_per_token,
                alone * flops_per_token, f"{shape}; target ratio >= 0.50")


# ---- sentence vectors of real-length texts --------------------------------------------------------

def encode_texts(args, s) -> tuple[dict[str, list[str]], str]:
    """{set name: texts} and where they came from: --texts files, else bertkit's cached THUCNews / inews, else
    synthetic texts of like lengths (headlines ~19 characters; bodies long-tailed, most cut at 512 tokens)."""
    if args.texts:
        sets = {Path(f).stem: [line.strip() for line in Path(f).read_text(encoding="utf-8").splitlines()
                               if line.strip()] for f in args.texts}
        return sets, "files " + ", ".join(args.texts)
    from bertkit.data import sources

    sets, origin = {}, []
    if sources.status("thucnews") == "fetched":  # never fetched here: the GPU machine has no network
        from bertkit.data.tasks import thucnews_headlines

        sets["headlines"] = [title for _, title in thucnews_headlines()][:s.headlines]
        origin.append("THUCNews headlines")
    if sources.status("inews") == "fetched":
        from bertkit.data.tasks import inews_split

        sets["bodies"] = [" ".join(b.split()) for b in inews_split("train")[1] if b.strip()][:s.bodies]
        origin.append("inews bodies")
    rng, (alphabet, weights) = random.Random(2), zipf_alphabet()
    if "headlines" not in sets:
        sets["headlines"] = [chinese_like(rng, min(40, max(5, round(rng.gauss(19, 5)))), alphabet, weights)
                             for _ in range(s.headlines)]
        origin.append("synthetic headlines (~19 characters)")
    if "bodies" not in sets:  # lognormal, median 600 characters: ~60% over 512 tokens, a tail to thousands
        sets["bodies"] = [chinese_like(rng, min(6000, max(40, int(rng.lognormvariate(math.log(600), 0.8)))),
                                       alphabet, weights) for _ in range(s.bodies)]
        origin.append("synthetic bodies (lognormal lengths, median 600 characters)")
    return sets, ", ".join(origin)


def write_vocab(texts: list[str], directory: Path, size: int) -> Path:
    """bert-base-chinese's layout: [PAD], [unused*], [UNK] [CLS] [SEP] [MASK] at 100-103, then the texts'
    characters by frequency, padded with [unused*] to `size` tokens."""
    counts: dict[str, int] = {}
    for text in texts:
        for ch in text.lower():
            if not ch.isspace():
                counts[ch] = counts.get(ch, 0) + 1
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(1, 100)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += sorted(counts, key=lambda ch: -counts[ch])[:size - len(tokens)]
    tokens += [f"[unused{i}]" for i in range(100, 100 + size - len(tokens))]
    directory.mkdir(parents=True)
    (directory / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return directory


def their_pooled(model, batch, device: torch.device) -> torch.Tensor:
    """Mean over the real tokens of one padded batch, on the CPU: the usual transformers recipe."""
    batch = batch.to(device)
    hidden = model(**batch).last_hidden_state.float()
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return ((hidden * mask).sum(1) / mask.sum(1)).cpu()


def row_encode(ctx) -> None:
    from bertkit.inference import EncodedText, TruncationWarning, encode, run_sorted, sorted_batches
    from bertkit.inference.batching import batch_tokens_for
    from bertkit.inference.encode import sentence_vectors
    from bertkit.inference.precision import for_inference
    from bertkit.tokenizer import BertTokenizer

    s, device, length = ctx.sizes, ctx.device, ctx.sizes.max_length
    sets, origin = encode_texts(ctx.args, s)
    ctx.say("encode", f"texts: {origin}")
    directory = write_vocab([t for texts in sets.values() for t in texts], ctx.scratch / "encode-vocab",
                            s.model["vocab_size"])
    ours_tok = BertTokenizer.from_pretrained(directory)
    theirs_tok = transformers.BertTokenizer.from_pretrained(directory)
    sample = next(iter(sets.values()))[:50]
    if ours_tok(sample)["input_ids"] != theirs_tok(sample)["input_ids"]:
        ctx.say("encode", "warning: the two tokenizers give different ids on the first texts")
    torch.manual_seed(1)
    theirs = transformers.BertModel(transformers.BertConfig(**s.model, attn_implementation="sdpa")).eval()
    ours = BertModel(BertConfig(**s.model))
    ours.load_state_dict(theirs.state_dict(), strict=True)
    counts = flop_counts(ours)
    ours, theirs = ours.to(device).eval(), theirs.to(device)
    if ctx.bf16:  # converted once, before timing, as each library's user would load a bf16 model
        ours, theirs = for_inference(ours, "bfloat16"), theirs.to(torch.bfloat16)

    def ours_forward(ids, mask, types):  # as `encode` runs it: the vectors read back while the next batch runs
        return sentence_vectors(ours, ids, mask, types, "mean")

    def theirs_run(batches):
        with torch.inference_mode():
            return torch.cat([their_pooled(theirs, b, device) for b in batches]).numpy()

    def theirs_batches(texts):
        return [theirs_tok(texts[i:i + ENCODE_BATCH], padding="longest", truncation=True, max_length=length,
                           return_tensors="pt") for i in range(0, len(texts), ENCODE_BATCH)]

    for name, texts in sets.items():
        encoded = ours_tok(texts, truncation=True, max_length=length)
        rows = [EncodedText(ids, types) for ids, types in zip(encoded["input_ids"], encoded["token_type_ids"])]
        lengths = np.array([len(row.input_ids) for row in rows])
        tokens, squares = int(lengths.sum()), int((lengths ** 2).sum())
        padded = sum(len(lengths[i:i + ENCODE_BATCH]) * lengths[i:i + ENCODE_BATCH].max()
                     for i in range(0, len(lengths), ENCODE_BATCH))
        flops = forward_flops(counts, tokens, squares)
        described = (f"{len(texts):,} texts, {tokens:,} real tokens (mean {tokens / len(texts):.0f}, max "
                     f"{lengths.max()}); input-order batches pad to {padded:,}")
        prebuilt = theirs_batches(texts)
        # the models alone: tokenized before timing; bertkit's run collates its sorted batches (numpy) as it goes
        runs = {"bertkit": lambda rows=rows: run_sorted(ours, rows, ours_forward, batch_size=ENCODE_BATCH,
                                                        pad_token_id=ours_tok.pad_token_id),
                "transformers": lambda prebuilt=prebuilt: theirs_run(prebuilt)}
        vectors = {side: np.stack(run()) if side == "bertkit" else run() for side, run in runs.items()}  # warm-up
        a, b = vectors["bertkit"], vectors["transformers"]
        cosine = float(((a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))).mean())
        seconds = alternate(runs, s.encode_rounds, device)
        ctx.add(f"encode {name} model only", "bertkit", tokens / seconds["bertkit"], "transformers",
                tokens / seconds["transformers"], flops / seconds["bertkit"], flops / seconds["transformers"],
                f"{described}; mean cosine of the two sides' vectors {cosine:.4f}")
        # bertkit's own batches: on a GPU, batches of short texts grow to GPU_BATCH_TOKENS padded tokens ("auto");
        # transformers as above, in batches of ENCODE_BATCH (sentence-transformers' default is 32)
        runs["bertkit"] = lambda rows=rows: run_sorted(ours, rows, ours_forward, batch_size=ENCODE_BATCH,
                                                       pad_token_id=ours_tok.pad_token_id, batch_tokens="auto")
        grown = sorted_batches([len(row.input_ids) for row in rows], ENCODE_BATCH, batch_tokens_for(device, "auto"))
        seconds = alternate(runs, s.encode_rounds, device)
        ctx.add(f"encode {name} model only, batches auto", "bertkit auto", tokens / seconds["bertkit"],
                "transformers", tokens / seconds["transformers"], flops / seconds["bertkit"],
                flops / seconds["transformers"], f"bertkit in {len(grown)} batches (at most "
                f"{max(map(len, grown))} texts), transformers in {len(prebuilt)} of {ENCODE_BATCH}")
        # as a user runs it: texts in, vectors out, tokenization included; batches of ENCODE_BATCH, then bertkit's own
        for batch_tokens, label in ((None, "with tokenizer"), ("auto", "with tokenizer, batches auto")):
            runs = {"bertkit": lambda texts=texts, b=batch_tokens: encode(
                        ours, ours_tok, texts, batch_size=ENCODE_BATCH, pooling="mean", max_length=length,
                        batch_tokens=b),
                    "transformers": lambda texts=texts: theirs_run(theirs_batches(texts))}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", TruncationWarning)  # texts over max_length are cut on both sides
                seconds = alternate(runs, max(1, s.encode_rounds - 1), device)
            ctx.add(f"encode {name} {label}", "bertkit" if batch_tokens is None else "bertkit auto",
                    tokens / seconds["bertkit"], "transformers", tokens / seconds["transformers"],
                    flops / seconds["bertkit"], flops / seconds["transformers"], described)


# ---- the run --------------------------------------------------------------------------------------

ROWS = {"pretrain": row_pretrain, "tiny": row_tiny, "encode": row_encode, "compile": row_compile}


class Context:
    def __init__(self, args, sizes, device: torch.device, scratch: Path) -> None:
        self.args, self.sizes, self.device, self.scratch = args, sizes, device, scratch
        self.bf16 = device.type == "cuda"
        self.peak = args.peak_tflops * 1e12
        self.pair = None
        self.results: list[dict] = []
        self.meta = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                     "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
                     "precision": "bf16 autocast" if self.bf16 else "fp32", "peak_tflops": args.peak_tflops,
                     "smoke": args.smoke, "seconds": {}}

    def say(self, row: str, line: str) -> None:
        print(f"[{row}] {line}", flush=True)

    def add(self, row: str, a: str, a_rate: float, b: str, b_rate: float, a_flops: float, b_flops: float,
            note: str) -> None:
        result = {"row": row, "a": a, "a_tokens_per_s": a_rate, "b": b, "b_tokens_per_s": b_rate,
                  "ratio": a_rate / b_rate, "a_mfu": a_flops / self.peak, "b_mfu": b_flops / self.peak, "note": note}
        self.results.append(result)
        self.say(row, f"{a} {a_rate:,.0f} tok/s, {b} {b_rate:,.0f} tok/s, ratio {result['ratio']:.2f}, "
                      f"MFU {result['a_mfu']:.1%} / {result['b_mfu']:.1%}; {note}")

    def save(self) -> None:
        if self.args.json:
            Path(self.args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(self.args.json).write_text(json.dumps({"meta": self.meta, "rows": self.results}, indent=1))

    def table(self) -> None:
        w = max([34, *(len(r["row"]) + 2 for r in self.results)])
        print(f"\n{'row':<{w}}{'side a':>18}{'tok/s':>12}{'side b':>20}{'tok/s':>12}{'ratio':>7}{'MFU a / b':>15}")
        for r in self.results:
            if "error" in r:
                print(f"{r['row']:<{w}}  failed: {r['error']}")
                continue
            mfu = f"{r['a_mfu']:.1%} / {r['b_mfu']:.1%}"
            print(f"{r['row']:<{w}}{r['a']:>18}{r['a_tokens_per_s']:>12,.0f}{r['b']:>20}{r['b_tokens_per_s']:>12,.0f}"
                  f"{r['ratio']:>7.2f}{mfu:>15}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, every path (the CPU unless --device)")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when there is one; cpu with --smoke)")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of {', '.join(ROWS)}")
    parser.add_argument("--compile", dest="compile", action="store_true", default=True,
                        help="run the compile row where --rows names it (the default)")
    parser.add_argument("--no-compile-rows", dest="compile", action="store_false", help="leave the compile row out")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the MFU's peak: H100/H200 dense bf16")
    parser.add_argument("--texts", nargs="+", metavar="FILE", help="encode these texts (one a line; a set per file)")
    parser.add_argument("--save-texts", metavar="DIR", help="write the encode row's texts to DIR (a file per set, "
                        "one text a line) for --texts on a machine without bertkit's cache, and stop")
    parser.add_argument("--json", metavar="PATH", help="write the results here (after every row)")
    parser.add_argument("--tiny-workers", default="default", metavar="N,...",
                        help="the tiny row's `bertkit pretrain` runs: comma-separated --loader-workers values, "
                             "'default' for the run's own choice (default: default)")
    args = parser.parse_args()
    sizes = SMOKE if args.smoke else FULL
    if args.save_texts:
        sets, origin = encode_texts(args, sizes)
        Path(args.save_texts).mkdir(parents=True, exist_ok=True)
        for name, texts in sets.items():
            (Path(args.save_texts) / f"{name}.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
        print(f"{origin}: {', '.join(f'{len(t):,} {n}' for n, t in sets.items())} written to {args.save_texts}")
        return
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() and not args.smoke else "cpu"))
    rows = [r.strip() for r in args.rows.split(",") if r.strip() and (args.compile or r.strip() != "compile")]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; known: {', '.join(ROWS)}")
    rows = sorted(set(rows), key=list(ROWS).index)  # compile last: the main rows are in before it costs
    began = time.perf_counter()
    with TemporaryDirectory() as scratch:
        ctx = Context(args, sizes, device, Path(scratch))
        print("  ".join(f"{k} {v}" for k, v in ctx.meta.items() if k != "seconds"), flush=True)
        for i, row in enumerate(rows):
            start = time.perf_counter()
            ctx.say(row, "start")
            try:
                ROWS[row](ctx)
            except Exception as err:  # one failed row must not lose the others' numbers
                traceback.print_exc()
                ctx.results.append({"row": row, "error": f"{type(err).__name__}: {err}"[:300]})
            if "compile" not in rows[i + 1:]:
                ctx.pair = None  # BERT-base twice with AdamW's moments: no later row needs them
            free_memory()
            ctx.meta["seconds"][row] = round(time.perf_counter() - start, 1)
            memory = ""
            if device.type == "cuda":
                memory = f", peak GPU memory {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB"
                torch.cuda.reset_peak_memory_stats(device)
            ctx.say(row, f"done in {ctx.meta['seconds'][row]:.1f} s (total {time.perf_counter() - began:.1f} s)"
                         + memory)
            ctx.save()
        ctx.table()


if __name__ == "__main__":
    main()
