"""Every training command, the inference commands and the parity checks on a CUDA GPU (`--device cuda`).

On a machine with a CUDA GPU each training command trains a tiny model for a few steps on tiny synthetic data made
here (no network, no bertkit cache), the Trainer it ran is seen to train on the GPU, and the model it wrote loads
back and computes finite outputs there that agree with the CPU's; `--bf16` runs on the GPU; bertkit's BERT, GPT-2
and ViT agree with transformers' on the GPU in float32 (TF32 off) and a bf16 autocast forward stays close to the
float32 one; a Trainer run resumed from its checkpoint on the GPU continues as the uninterrupted run did; a
`--minutes` budget holds; and the inference commands (predict, evaluate, encode, translate, generate, summarize,
attention) given `--device cuda` allocate GPU memory (given `--device cpu`, none) and print what they print on the
CPU.

Without a CUDA GPU every test here is skipped ("needs a CUDA GPU"). The environment variable BERTKIT_TEST_DEVICE
names the device to test instead of `cuda` (`cuda:1`, say); `BERTKIT_TEST_DEVICE=cpu` runs every test on the CPU,
which checks the tests themselves on a machine without a GPU:

    BERTKIT_TEST_DEVICE=cpu python -m pytest -q tests/test_gpu.py
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import random
import re
import shutil
import string
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.modeling import BertModel
from bertkit.pipelines.options.common import native_bf16
from bertkit.tokenizer import BertTokenizer
from bertkit.training.trainer import Trainer
from test_qa_cli import toy_squad
from test_vision_cli import _make_folder as image_folder
from tolerance import assert_close


def _test_device() -> str | None:
    """The device the tests run on: BERTKIT_TEST_DEVICE, else `cuda`; None (skip) for a GPU this machine lacks."""
    spec = os.environ.get("BERTKIT_TEST_DEVICE", "").strip().lower() or "cuda"
    if spec != "cpu" and not torch.cuda.is_available():
        return None
    return spec


DEVICE = _test_device()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(DEVICE is None, reason="needs a CUDA GPU"),
              pytest.mark.xdist_group("gpu")]  # one set of trained models, shared by the module's tests

STEPS = 3
LETTERS = string.ascii_lowercase
WORDS = [f"w{i}" for i in range(40)]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *LETTERS, *WORDS, "where", "is", "?", "."]
TINY_BERT = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=64, max_position_embeddings=64)
ZH_DIGITS = "零一二三四五六七八九"
EN_DIGITS = "zero one two three four five six seven eight nine".split()


def on_test_device(device: torch.device | str) -> bool:
    """Whether `device` is the one under test (`cuda` matches whichever GPU is current)."""
    want, got = torch.device(DEVICE), torch.device(device)
    return got.type == want.type and (want.index is None or got.index == want.index)


@contextlib.contextmanager
def exact_float32():
    """Float32 matmuls and convolutions without TF32 (the GPU's default for cuDNN convolutions), restored after."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


# ---- running commands -------------------------------------------------------------------------------

def bertkit(*argv) -> str:
    """`bertkit ARGV` in this process; what it printed. Anything but exit status 0 fails with what it wrote to
    standard error (and, for a bug, the traceback it kept)."""
    argv = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as refused:  # the argument parser's refusal
            code = refused.code
    said = err.getvalue()
    crash = re.search(r"its traceback is in (\S+):", said)
    if code != 0 and crash and Path(crash.group(1)).is_file():
        said += "\n" + Path(crash.group(1)).read_text(encoding="utf-8")[-4000:]
    assert code == 0, f"bertkit {' '.join(argv)}\nexited {code}:\n{said[-6000:]}"
    return out.getvalue()


@dataclass
class TrainerRun:
    device: torch.device   # where the model's parameters were when the run ended
    bf16: bool             # whether it computed under bf16 autocast
    steps: int


@pytest.fixture(scope="module", autouse=True)
def trainer_runs():
    """Every Trainer.train of the module, as what it ran on: a command's `--device` is seen to reach its Trainer."""
    runs: list[TrainerRun] = []
    train = Trainer.train

    def recorded(self, *args, **kwargs):
        state = train(self, *args, **kwargs)
        runs.append(TrainerRun(next(self.model.parameters()).device, bool(getattr(self, "bf16", self.args.bf16)),
                               state.step))
        return state

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Trainer, "train", recorded)
        yield runs


def bf16_native() -> bool:
    """Whether the device under test computes bfloat16 (a GPU before compute capability 8.0 does not: a run asked
    for bf16 computes in float32 there; the CPU computes it, emulated or not)."""
    return torch.device(DEVICE).type != "cuda" or torch.cuda.is_bf16_supported(including_emulation=False)


def trains(runs: list[TrainerRun], *argv) -> str:
    """`bertkit ARGV` with `--device DEVICE` (a training command): it exits 0, and each Trainer it ran trained
    the steps asked for on the device under test, in bf16 exactly when `--bf16` was given (and the device has it);
    summarize-train's default is bf16 where the device computes it natively."""
    before = len(runs)
    if argv[0] == "summarize-train" and "--bf16" not in argv:
        bf16 = "--no-bf16" not in argv and native_bf16(DEVICE)
    else:
        bf16 = "--bf16" in argv and bf16_native()
    printed = bertkit(*argv, "--device", DEVICE, "--no-progress")
    made = runs[before:]
    assert made, f"bertkit {argv[0]} trained nothing"
    for run in made:
        assert on_test_device(run.device), f"bertkit {argv[0]} --device {DEVICE} trained on {run.device}"
        assert run.bf16 == bf16, f"bertkit {argv[0]}: bf16 {run.bf16}"
        assert run.steps == STEPS
    return printed


# ---- tiny data, made here -----------------------------------------------------------------------------

def toy_label(letters: str) -> int:
    """0: some of a/b/c and none of x/y/z; 1: the reverse; 2: otherwise (the tutorials' toy task)."""
    has_abc, has_xyz = any(c in "abc" for c in letters), any(c in "xyz" for c in letters)
    return 0 if has_abc and not has_xyz else 1 if has_xyz and not has_abc else 2


def articles(n: int, seed: int) -> list[tuple[str, str]]:
    """(body, title) pairs of letters whose body starts with its title."""
    rng = random.Random(seed)
    made = []
    for _ in range(n):
        title = " ".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 5)))
        made.append((f"{title} . " + " ".join(rng.choice(LETTERS) for _ in range(15)), title))
    return made


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """A tiny BERT encoder over letters and words, and every command's data: a corpus, labelled rows of each task
    kind, SQuAD questions, sentence pairs, numerals to translate, Chinese documents, images, articles."""
    root = tmp_path_factory.mktemp("gpu")
    rng = random.Random(0)
    torch.manual_seed(0)
    BertModel(BertConfig(**TINY_BERT)).save_pretrained(root / "encoder")
    BertTokenizer({t: i for i, t in enumerate(VOCAB)}).save_pretrained(root / "encoder")
    (root / "tiny.json").write_text(json.dumps(TINY_BERT))

    documents = ["\n".join(" ".join(rng.choice(LETTERS) for _ in range(rng.randint(5, 12))) + " ." for _ in range(6))
                 for _ in range(40)]
    (root / "corpus.txt").write_text("\n\n".join(documents) + "\n")

    def letters() -> str:
        return " ".join(rng.choice(LETTERS) for _ in range(6))

    for split, n in (("train", 64), ("dev", 16)):
        rows = [letters() for _ in range(n)]
        (root / f"classify-{split}.tsv").write_text(
            "text\tlabel\n" + "".join(f"{r}\t{toy_label(r)}\n" for r in rows))
        pairs = [(letters(), letters()) for _ in range(n)]
        (root / f"pairs-{split}.tsv").write_text(
            "text\ttext_pair\tlabel\n" + "".join(f"{a}\t{b}\t{int(a[0] == b[0] or toy_label(a + b) == 0)}\n"
                                                 for a, b in pairs))
        (root / f"ner-{split}.conll").write_text("\n\n".join(
            "\n".join(f"{c} {'B-LOC' if c in 'xyz' else 'B-PER' if c in 'abc' else 'O'}" for c in r.split())
            for r in rows) + "\n")
        (root / f"qa-{split}.json").write_text(json.dumps(toy_squad(n // 2, seed=len(split))))
        anchors = [rng.sample(LETTERS, rng.randint(3, 8)) for _ in range(n)]
        (root / f"embedding-{split}.tsv").write_text("".join(
            f"{' '.join(a)}\t{' '.join([*reversed(a), rng.choice(LETTERS)])}\t{letters()}\n" for a in anchors))

    numerals = []
    for _ in range(200):
        digits = [rng.randrange(10) for _ in range(rng.randint(2, 5))]
        numerals.append("".join(ZH_DIGITS[d] for d in digits) + "\t"
                        + " ".join(EN_DIGITS[d] for d in digits).capitalize() + ".")
    (root / "numerals.tsv").write_text("\n".join(numerals) + "\n", encoding="utf-8")
    sentences = ["今天天气很好。", "我们去公园散步。", "他喜欢看书。", "这本书很有意思。", "明天会下雨吗？"]
    (root / "documents.txt").write_text("\n\n".join("".join(rng.choice(sentences) for _ in range(6))
                                                    for _ in range(60)) + "\n", encoding="utf-8")
    image_folder(root / "images", per_class=20)
    return root


# ---- every training command, `--device DEVICE`, `STEPS` steps -----------------------------------------

def _pretrain(ws: Path, *extra) -> list:
    return ["pretrain", "--corpus", ws / "corpus.txt", "--max-seq-length", 32, "--batch-size", 8,
            "--dupe-factor", 2, "--log-every", 1, *extra]


def _finetune(ws: Path, task: str, data: str, *extra, suffix: str = "tsv", max_length: int = 16) -> list:
    return ["finetune", "--task", task, "--model", ws / "encoder", "--train", ws / f"{data}-train.{suffix}",
            "--dev", ws / f"{data}-dev.{suffix}", "--max-length", max_length, "--batch-size", 8,
            "--eval-every", STEPS, *extra]


COMMANDS = {
    "pretrain": lambda ws: _pretrain(ws, "--vocab", ws / "encoder", "--config", ws / "tiny.json"),
    "pretrain-init": lambda ws: _pretrain(ws, "--init", ws / "encoder"),
    "pretrain-bf16": lambda ws: _pretrain(ws, "--vocab", ws / "encoder", "--config", ws / "tiny.json", "--bf16"),
    "classify": lambda ws: _finetune(ws, "classify", "classify"),
    "classify-bf16": lambda ws: _finetune(ws, "classify", "classify", "--bf16"),
    "prompt": lambda ws: _finetune(ws, "classify", "classify", "--random-init", "--prompt", "[MASK] {text}",
                                   "--label-words", "0=a", "1=x", "2=m"),
    "pairs": lambda ws: _finetune(ws, "pairs", "pairs"),
    "ner": lambda ws: _finetune(ws, "ner", "ner", suffix="conll"),
    "qa": lambda ws: _finetune(ws, "qa", "qa", "--doc-stride", 6, "--max-answer-length", 4, suffix="json",
                               max_length=24),
    "embedding": lambda ws: _finetune(ws, "embedding", "embedding"),
    "lm-gpt": lambda ws: ["lm-train", "--corpus", ws / "documents.txt", "--size", "tiny", "--block-size", 32,
                          "--batch-size", 8],
    "lm-gru": lambda ws: ["lm-train", "--model", "gru", "--corpus", ws / "documents.txt", "--size", "tiny",
                          "--block-size", 16, "--batch-size", 8],
    "translate-transformer": lambda ws: ["translate-train", "--data", ws / "numerals.tsv", "--size", "tiny",
                                         "--batch-size", 16, "--beams", 2, "--max-test", 5],
    "translate-gru": lambda ws: ["translate-train", "--data", ws / "numerals.tsv", "--model", "gru-attention",
                                 "--size", "tiny", "--batch-size", 16, "--beams", 2, "--max-test", 5],
    "vision": lambda ws: ["vision-train", "--data", ws / "images", "--patch-size", 4, "--hidden-size", 16,
                          "--layers", 2, "--heads", 2, "--batch-size", 16],
    "summarize": lambda ws: ["summarize-train", "--architecture", "pointer-generator", "--model", ws / "encoder",
                             "--batch-size", 8, "--max-source-length", 24, "--max-target-length", 8,
                             "--decoder-layers", 1, "--decoder-heads", 2, "--decoder-ffn", 32, "--lead-length", 4,
                             "--max-test", 4, "--beams", 2],
    "summarize-unilm": lambda ws: ["summarize-train", "--model", ws / "encoder", "--batch-size", 8,
                                   "--max-source-length", 24, "--max-target-length", 8, "--lead-length", 4,
                                   "--max-test", 4, "--beams", 2],
}


@pytest.fixture(scope="module")
def trained(ws, trainer_runs, tmp_path_factory):
    """trained(name): the output directory of COMMANDS[name] run with `--max-steps STEPS --device DEVICE`, made once
    for the module."""
    made: dict[str, Path] = {}
    failed: set[str] = set()

    def run(name: str) -> Path:
        if name in failed:  # said by the first test that asked for it; not run again
            pytest.fail(f"{name} did not train (see the first test that needed it)", pytrace=False)
        if name not in made:
            out = tmp_path_factory.mktemp(name) / "run"
            with pytest.MonkeyPatch.context() as patch:
                if name.startswith("summarize"):  # the command reads inews; these articles stand in for it
                    splits = {"train": articles(48, 0), "dev": articles(10, 1), "test": articles(6, 2)}
                    patch.setattr("bertkit.data.summaries.load_articles", lambda: splits)
                try:
                    trains(trainer_runs, *COMMANDS[name](ws), "--max-steps", STEPS, "--out", out)
                except BaseException:
                    failed.add(name)
                    raise
            made[name] = out
        return made[name]

    return run


def agrees_across_devices(model: torch.nn.Module, inputs: dict, pick) -> torch.Tensor:
    """pick(model(**inputs)) on the device under test: finite, and in float32 (TF32 off) within 1e-4 of the
    CPU's (relative to its magnitude above 1, tests/tolerance.py)."""
    model.eval()
    with torch.no_grad(), exact_float32():
        on_cpu = pick(model.cpu()(**inputs))
        on_device = pick(model.to(DEVICE)(**{k: v.to(DEVICE) if torch.is_tensor(v) else v
                                               for k, v in inputs.items()}))
    assert on_test_device(on_device.device)
    assert torch.isfinite(on_device).all()
    mask = inputs.get("attention_mask")
    if mask is not None and tuple(on_cpu.shape[:2]) == tuple(mask.shape):
        # per token: a GPU runs a padded batch packed (BertModel.unpad), with zeros where the CPU computes padding's
        # unused vectors; the real tokens must agree
        keep = mask.bool()
        on_device, on_cpu = on_device[keep.to(on_device.device)], on_cpu[keep]
    assert_close(on_device, on_cpu, rtol=1e-4)
    return on_device


def text_inputs(tokenizer, texts: list[str], pairs: list[str] | None = None) -> dict:
    encoded = tokenizer(texts, pairs, padding=True, return_tensors="pt")
    return {k: encoded[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


def padded(rows: list[list[int]], pad: int) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([row + [pad] * (width - len(row)) for row in rows])


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name", ["pretrain", "pretrain-init", "pretrain-bf16"])
def test_pretrain_trains_on_the_device_and_its_model_loads_back(trained, name):
    from bertkit.models.bert.heads import BertForPreTraining

    out = trained(name)
    records = metrics(out)
    assert [r["step"] for r in records] == [1, 2, 3] and all(math.isfinite(r["loss"]) and r["loss"] > 0
                                                             for r in records)
    assert read_json(out / "train_results.json")["stop_reason"] == "max_steps"
    model = BertForPreTraining.from_pretrained(out)
    tokenizer = BertTokenizer.from_pretrained(out)
    inputs = text_inputs(tokenizer, ["a b c d", "x y z"], ["e f", "g h i j"])
    logits = agrees_across_devices(model, inputs, lambda o: o.prediction_logits)       # the real tokens' rows
    assert logits.shape == (int(inputs["attention_mask"].sum()), len(VOCAB))
    agrees_across_devices(model, inputs, lambda o: o.seq_relationship_logits)


@pytest.mark.parametrize("name, metric", [("classify", "dev_accuracy"), ("classify-bf16", "dev_accuracy"),
                                          ("prompt", "dev_accuracy"), ("pairs", "dev_accuracy"),
                                          ("ner", "dev_f1"), ("qa", "dev_f1"), ("embedding", "dev_mrr@10")])
def test_finetune_trains_on_the_device_and_its_model_loads_back(trained, name, metric):
    from bertkit.inference.loading import load_text_model

    out = trained(name)
    results = read_json(out / "finetune_results.json")
    assert results["steps"] == STEPS and results["stop_reason"] == "max_steps"
    assert math.isfinite(results[metric]) and 0 <= results[metric] <= (100 if name == "qa" else 1)
    model, tokenizer = load_text_model(out / "best", "encode" if name == "embedding" else "predict")
    if name == "qa":
        inputs = text_inputs(tokenizer, ["where is w3 ?"], [" ".join(WORDS[:12]) + " ."])
        agrees_across_devices(model, inputs, lambda o: o.start_logits)
        agrees_across_devices(model, inputs, lambda o: o.end_logits)
        return
    pairs = ["c b a", "z y"] if name == "pairs" else None
    inputs = text_inputs(tokenizer, ["a b c d e f", "x y z"], pairs)
    if name == "prompt":  # the texts inside the template the model was fine-tuned with
        from bertkit.data.prompts import PromptTemplate

        rows, _ = PromptTemplate(model.config.prompt["template"]).encode(tokenizer, ["a b c d e f", "x y z"], 16)
        inputs = {"input_ids": padded(rows, tokenizer.pad_token_id),
                  "attention_mask": padded([[1] * len(row) for row in rows], 0)}
    if name == "embedding":
        hidden = agrees_across_devices(model, inputs, lambda o: o.last_hidden_state)
        assert hidden.shape[-1] == TINY_BERT["hidden_size"]
    else:
        logits = agrees_across_devices(model, inputs, lambda o: o.logits)
        assert logits.shape[-1] == {"ner": 3, "pairs": 2}.get(name, 3)


@pytest.mark.parametrize("name", ["lm-gpt", "lm-gru"])
def test_lm_train_trains_on_the_device_and_its_model_loads_back(trained, name):
    from bertkit.models.registry import require

    out = trained(name)
    report = read_json(out / "report.json")
    assert report["steps"] == STEPS and math.isfinite(report["perplexity"]) and report["perplexity"] > 1
    model = require(out, "generate").head("language-model").from_pretrained(out)
    tokenizer = BertTokenizer.from_pretrained(out)
    ids = torch.tensor([[tokenizer.cls_token_id, *tokenizer("今天天气很好", add_special_tokens=False)["input_ids"]]])
    logits = agrees_across_devices(model, {"input_ids": ids}, lambda o: o.logits)
    assert logits.shape == (1, ids.shape[1], len(tokenizer))


@pytest.mark.parametrize("name", ["translate-transformer", "translate-gru"])
def test_translate_train_trains_on_the_device_and_its_model_loads_back(trained, name):
    from bertkit.pipelines.translation import load_translator

    out = trained(name)
    report = read_json(out / "report.json")
    assert report["steps"] == STEPS and report["test_sentences"] == 5 and 0 <= report["bleu"] <= 100
    assert math.isfinite(report["dev_loss"])
    model, tokenizer = load_translator(out)
    sources = tokenizer.encode_source(["四八六", "零一二三"])
    targets = tokenizer.encode_target(["Four eight six.", "Zero one two three."])
    inputs = {"input_ids": padded(sources, tokenizer.source.pad_token_id),
              "attention_mask": padded([[1] * len(s) for s in sources], 0), "labels": padded(targets, -100)}
    agrees_across_devices(model, inputs, lambda o: o.logits)
    assert math.isfinite(agrees_across_devices(model, inputs, lambda o: o.loss).item())


def test_vision_train_trains_on_the_device_and_its_model_loads_back(trained, ws):
    from bertkit.inference.images import load_image_model

    out = trained("vision")
    report = read_json(out / "report.json")
    assert report["steps"] == STEPS and 0 <= report["test_accuracy"] <= 1
    model, processor = load_image_model(out / "best")
    pixels = processor(sorted((ws / "images" / "left").glob("*.png"))[:4])
    logits = agrees_across_devices(model, {"pixel_values": pixels}, lambda o: o.logits)
    assert logits.shape == (4, 2)


def test_summarize_train_trains_on_the_device_and_its_model_loads_back(trained):
    from bertkit.pipelines.summarization import load_summarizer

    out = trained("summarize")
    report = read_json(out / "report.json")
    assert report["steps"] == STEPS and report["test_articles"] == 4 and report["train_pairs"] == 48
    assert set(report["rouge"]) == {"rouge1", "rouge2", "rougeL"} and math.isfinite(report["dev_loss"])
    model, tokenizer = load_summarizer(out)
    bodies = [body for body, _ in articles(2, 7)]
    sources = tokenizer.encode_source(bodies, 24)
    targets = tokenizer.encode_target([title for _, title in articles(2, 7)])
    inputs = {"input_ids": padded(sources, tokenizer.source.pad_token_id),
              "attention_mask": padded([[1] * len(s) for s in sources], 0), "labels": padded(targets, -100)}
    agrees_across_devices(model, inputs, lambda o: o.logits)


def test_unilm_summarize_train_trains_on_the_device_and_its_model_loads_back(trained):
    from bertkit.pipelines.summarization import load_summarizer
    from bertkit.pipelines.summarization.unilm import UniLMCollator, encode_pairs

    out = trained("summarize-unilm")
    report = read_json(out / "report.json")
    assert report["steps"] == STEPS and report["architecture"] == "unilm" and report["train_pairs"] == 48
    assert math.isfinite(report["dev_loss"])
    model, tokenizer = load_summarizer(out)
    batch = UniLMCollator(tokenizer.pad_token_id)(encode_pairs(tokenizer, articles(2, 7), 24, 8)[0])
    agrees_across_devices(model, batch, lambda o: o.logits)


# ---- parity with transformers on the device, float32 with TF32 off; bf16 autocast ------------------------

def _bert_batch(vocab: int, lengths=(13, 9, 4, 1)) -> dict:
    g = torch.Generator().manual_seed(1)
    width = max(lengths)
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    return {"input_ids": torch.randint(5, vocab, (len(lengths), width), generator=g) * mask,
            "attention_mask": mask, "token_type_ids": torch.randint(0, 2, (len(lengths), width), generator=g) * mask}


def _on_device(inputs: dict) -> dict:
    return {k: v.to(DEVICE) for k, v in inputs.items()}


@pytest.mark.parametrize("head", ["BertModel", "BertForPreTraining", "BertForSequenceClassification"])
def test_bert_matches_transformers_on_the_device(tmp_path, head):
    transformers = pytest.importorskip("transformers")
    import bertkit.models.bert.heads as heads
    from weights import randomise

    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=37, max_position_embeddings=64, num_labels=3)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    theirs = randomise(getattr(transformers, head)(config), seed=2)
    theirs.save_pretrained(tmp_path)
    ours = (BertModel if head == "BertModel" else getattr(heads, head)).from_pretrained(tmp_path).eval()
    theirs, ours = theirs.to(DEVICE), ours.to(DEVICE)
    inputs = _on_device(_bert_batch(99))
    keep = inputs["attention_mask"].bool()
    names = {"BertModel": ("last_hidden_state", "pooler_output"),
             "BertForPreTraining": ("prediction_logits", "seq_relationship_logits"),
             "BertForSequenceClassification": ("logits",)}[head]
    with torch.no_grad(), exact_float32():
        want = theirs(**inputs)
        for attentions in (False, True):  # the fused attention kernel, and the path that returns probabilities
            got = ours(**inputs, output_attentions=attentions)
            for name in names:
                a, b = getattr(got, name), getattr(want, name)
                assert on_test_device(a.device)
                if a.dim() == 3:  # per token: padding positions are noise
                    a, b = a[keep], b[keep]
                assert_close(a, b, rtol=1e-4, msg=f"{name}, output_attentions={attentions}")


def test_gpt2_matches_transformers_on_the_device_and_greedy_decoding_agrees(tmp_path):
    transformers = pytest.importorskip("transformers")
    from bertkit.models.gpt.modeling import GPT2LMHeadModel
    from weights import randomise

    config = transformers.GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=2, n_head=4, bos_token_id=1,
                                     eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    theirs = randomise(transformers.GPT2LMHeadModel(config), seed=5)
    theirs.save_pretrained(tmp_path)
    ours = GPT2LMHeadModel.from_pretrained(tmp_path).eval().to(DEVICE)
    theirs = theirs.to(DEVICE)
    ids = torch.randint(3, 50, (3, 9), generator=torch.Generator().manual_seed(1)).to(DEVICE)
    right = torch.ones_like(ids)
    right[1, 6:] = 0
    right[2, 3:] = 0
    with torch.no_grad(), exact_float32():
        for what, mask in {"no mask": None, "right padding": right, "left padding": right.flip(1)}.items():
            keep = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
            assert_close(ours(ids, attention_mask=mask).logits[keep], theirs(ids, attention_mask=mask).logits[keep],
                         rtol=1e-4, msg=what)
        prompt = ids[:2, :4]
        expected = theirs.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20,
                                   do_sample=False, num_beams=1, eos_token_id=None, pad_token_id=0)
        got = ours.generate(prompt, max_new_tokens=20, eos_token_id=None, pad_token_id=0)
    assert on_test_device(got.device) and got.tolist() == expected.tolist()


def test_vit_matches_transformers_on_the_device(tmp_path):
    transformers = pytest.importorskip("transformers")
    from bertkit.models.vit.modeling import ViTForImageClassification
    from weights import randomise

    config = transformers.ViTConfig(image_size=28, patch_size=7, num_channels=1, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=4, intermediate_size=37, num_labels=4)
    config._attn_implementation = "eager"
    theirs = randomise(transformers.ViTForImageClassification(config), seed=5)
    theirs.save_pretrained(tmp_path)
    ours = ViTForImageClassification.from_pretrained(tmp_path).eval().to(DEVICE)
    theirs = theirs.to(DEVICE)
    pixels = torch.randn(3, 1, 28, 28, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    with torch.no_grad(), exact_float32():
        a = ours(pixels, output_hidden_states=True)
        b = theirs(pixels, output_hidden_states=True)
    assert on_test_device(a.logits.device)
    assert_close(a.logits, b.logits, rtol=1e-4, msg="logits")
    for i, (x, y) in enumerate(zip(a.hidden_states, b.hidden_states, strict=True)):
        assert_close(x, y, rtol=1e-4, msg=f"hidden_states[{i}]")


def test_bf16_autocast_forward_is_close_to_float32():
    from bertkit.models.bert.heads import BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**TINY_BERT, id2label={0: "a", 1: "b", 2: "c"}))
    model = model.eval().to(DEVICE)
    inputs = _on_device(_bert_batch(len(VOCAB)))
    keep = inputs["attention_mask"].bool()
    with torch.no_grad():
        with exact_float32():
            exact = model.bert(**inputs).last_hidden_state[keep]
        with torch.autocast(torch.device(DEVICE).type, dtype=torch.bfloat16):
            half = model.bert(**inputs).last_hidden_state[keep]
            logits = model(**inputs).logits
    assert torch.isfinite(half).all() and torch.isfinite(logits).all() and logits.shape == (4, 3)
    error = float((half.float() - exact).norm() / exact.norm())
    assert 0 < error < 2e-2, error  # bf16 differs (its 8-bit mantissa), and only by that


def test_under_autocast_the_residual_stream_is_bf16_and_a_step_stays_close_to_float32_layer_norm(monkeypatch):
    """On a GPU, LayerNorm reads and writes bf16 under autocast (bertkit.models.layer_norm), so the hidden states
    between blocks are bf16; a pretraining step's loss and gradients stay close to autocast's float32 LayerNorm's."""
    from bertkit.models import layer_norm
    from bertkit.models.bert.heads import BertForPreTraining

    kind = torch.device(DEVICE).type
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**TINY_BERT)).to(DEVICE)
    inputs = _on_device(_bert_batch(len(VOCAB)))
    labels = torch.where(torch.rand(inputs["input_ids"].shape, device=DEVICE) < 0.3, inputs["input_ids"], -100)
    results, low_devices = {}, set(layer_norm.LOW_PRECISION_DEVICES)
    for name, devices in (("low", low_devices), ("float32", set())):
        monkeypatch.setattr(layer_norm, "LOW_PRECISION_DEVICES", devices)
        model.zero_grad()
        torch.manual_seed(1)  # the same dropout masks
        with torch.autocast(kind, dtype=torch.bfloat16):
            out = model(**inputs, labels=labels, output_hidden_states=True)
        out.loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results[name] = (float(out.loss.detach()), grads, {h.dtype for h in out.hidden_states})
    (low, low_grads, low_dtypes), (exact, exact_grads, exact_dtypes) = results["low"], results["float32"]
    assert exact_dtypes == {torch.float32}
    assert low_dtypes == ({torch.bfloat16} if kind in low_devices else {torch.float32})
    assert math.isfinite(low) and abs(low - exact) < 1e-2 * abs(exact), (low, exact)
    cosine = float(torch.nn.functional.cosine_similarity(low_grads, exact_grads, dim=0))
    assert cosine > 0.99, cosine



@pytest.mark.parametrize("train", [False, True])
def test_a_padded_batch_attends_packed_with_flash_attention_as_the_padded_batch_does(train):
    """On a GPU a padded bf16 batch runs packed, attention included (varlen flash attention, `attends_packed`): the
    padded batch's outputs at real tokens, and (no dropout) its gradients, to bf16's precision."""
    from torch.profiler import ProfilerActivity, profile

    from bertkit.models import functional

    torch.manual_seed(0)
    model = BertModel(BertConfig(**TINY_BERT, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    model = model.to(DEVICE).train(train)
    if not train:
        model = model.to(torch.bfloat16)
    inputs = _on_device(_bert_batch(len(VOCAB), lengths=(13, 9, 4, 1, 13, 2)))  # 52% padding: it packs
    keep = inputs["attention_mask"].bool()
    runs = {}
    for unpad in (False, True):
        model.unpad = unpad
        model.zero_grad()
        with torch.autocast(torch.device(DEVICE).type, dtype=torch.bfloat16, enabled=train), \
                torch.set_grad_enabled(train), \
                profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            hidden = model(**inputs).last_hidden_state
            if train:
                hidden[keep].float().square().mean().backward()  # real tokens: padding's differ by design
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]) if train else None
        runs[unpad] = hidden.detach().float(), grads, [e.name.lower() for e in prof.events()]
    (padded, padded_grads, _), (packed, packed_grads, kernels) = runs[False], runs[True]
    error = float((packed[keep] - padded[keep]).norm() / padded[keep].norm())
    assert error < 2e-2, error
    assert (packed[~keep] == 0).all()
    if train:
        cosine = float(torch.nn.functional.cosine_similarity(packed_grads, padded_grads, dim=0))
        assert cosine > 0.99, cosine
    query = torch.zeros(1, 4, 8, device=DEVICE, dtype=torch.bfloat16)
    if functional.attends_packed(query, functional.pack_padded(inputs["attention_mask"], torch.bfloat16), 0.0,
                                 train):
        assert any("flash" in name for name in kernels), sorted(set(kernels))


def test_a_lightly_padded_batch_runs_packed_where_its_attention_can_run_packed():
    """2% padding: a bf16 batch whose attention runs packed (`flash_attention_packs`) runs packed (zeros at its
    padding), from PACKED_ATTENTION_MIN_PADDING; a float32 one attends padded and so stays padded (under 10%)."""
    from bertkit.models import functional

    torch.manual_seed(0)
    model = BertModel(BertConfig(**TINY_BERT)).to(DEVICE).eval()
    inputs = _on_device(_bert_batch(len(VOCAB), lengths=(16, 16, 16, 16, 16, 14)))  # 2 of 96 positions
    pad = ~inputs["attention_mask"].bool()
    with torch.no_grad():
        full = model(**inputs).last_hidden_state
        half = model.to(torch.bfloat16)(**inputs).last_hidden_state
    assert full[pad].abs().sum() > 0  # float32: padded
    head_dim = TINY_BERT["hidden_size"] // TINY_BERT["num_attention_heads"]
    if functional.flash_attention_packs(torch.device(DEVICE), torch.bfloat16, head_dim, 0.0, False):
        assert (half[pad] == 0).all()
        assert_close(half[~pad].float(), full[~pad], rtol=5e-2, atol=5e-2)
    else:  # the CPU (BERTKIT_TEST_DEVICE=cpu), or a GPU flash attention cannot pack on
        assert half[pad].abs().sum() > 0


@pytest.mark.parametrize("masked", [False, True])
def test_attention_of_changing_lengths_takes_no_cudnn_kernel_and_equals_the_maths(masked):
    """cuDNN's attention plans every new shape on the host (100-200 ms a step where lengths change): the fused
    attention, forward and backward, must take another kernel on the GPU, and still compute softmax(QKᵀ/√d + mask)V."""
    from torch.profiler import ProfilerActivity, profile

    from bertkit.models.functional import attention, efficient_attention, padding_mask_bias

    torch.manual_seed(0)
    kernels = []
    for length in (17, 40, 64):  # lengths that change from batch to batch
        q, k, v = (torch.randn(3, 4, length, 64, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        keep = torch.ones(3, length, dtype=torch.long, device=DEVICE)
        keep[1, length // 2:] = 0
        bias = padding_mask_bias(keep, torch.bfloat16) if masked else None
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            out = efficient_attention(q, k, v, bias)
            out.float().square().sum().backward()
            if torch.device(DEVICE).type == "cuda":
                torch.cuda.synchronize()
        kernels += [e.name for e in prof.events()]
        want = attention(q.detach().float(), k.detach().float(), v.detach().float(),
                         None if bias is None else bias.float())[0]
        assert_close(out.float(), want, rtol=2e-2)  # bf16 inputs against float32 maths
        assert q.grad is not None and torch.isfinite(q.grad).all()
    assert kernels and not [name for name in kernels if "cudnn" in name.lower()]

# ---- the Trainer: a run resumed from its checkpoint continues as the uninterrupted run --------------------

def test_a_run_resumed_on_the_device_continues_as_the_uninterrupted_run(tmp_path):
    from safetensors.torch import load_file

    from bertkit.training.trainer import TrainingArguments
    from test_trainer import bert_classifier_collate, tiny, tiny_bert_classifier

    def run(out, model, **kwargs):
        args = TrainingArguments(output_dir=str(out), batch_size=12, learning_rate=1e-2, log_every=1, progress=False,
                                 seed=3, device=DEVICE, max_steps=6, save_every=3)
        return Trainer(model, args, tiny.make_dataset(36), bert_classifier_collate).train(**kwargs)

    full = tiny_bert_classifier(0)  # dropout 0.1: the resumed run must draw the masks the full run drew
    assert run(tmp_path / "full", full).step == 6
    assert on_test_device(next(full.parameters()).device)
    shutil.copytree(tmp_path / "full" / "checkpoint-3", tmp_path / "resumed" / "checkpoint-3")
    resumed = tiny_bert_classifier(1)  # other initial weights: all of them must come from the checkpoint
    state = run(tmp_path / "resumed", resumed, resume=True)
    assert (state.start_step, state.step) == (3, 6)
    want, got = full.state_dict(), resumed.state_dict()
    halfway = load_file(str(tmp_path / "full" / "checkpoint-3" / "model.safetensors"))
    moved = max(float((want[k].cpu() - halfway[k]).abs().max()) for k in halfway)
    assert moved > 1e-3  # the last three steps changed the weights: the comparison below has something to compare
    assert want.keys() == got.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-5, rtol=0, msg=name)
    losses = lambda out: [r["loss"] for r in metrics(out) if r["step"] > 3]  # noqa: E731
    assert len(losses(tmp_path / "resumed")) == 3
    assert_close(losses(tmp_path / "resumed"), losses(tmp_path / "full"), rtol=1e-5)


# ---- --minutes -------------------------------------------------------------------------------------------

def test_pretrain_minutes_plans_the_steps_that_fit_and_stops_in_time(ws, trainer_runs, tmp_path):
    """`--minutes 0.1`: the clock stops the run at the 6 seconds at the latest; on a GPU the steps, timed there,
    are planned to within 30% of what the run then did. (On a shared CPU a step's time swings with the machine's
    load, several-fold between the probe and the run: there only the clock is held to.)"""
    budget = 6.0
    started = time.perf_counter()
    before = len(trainer_runs)
    bertkit("pretrain", "--corpus", ws / "corpus.txt", "--vocab", ws / "encoder", "--config", ws / "tiny.json",
            "--max-seq-length", 32, "--batch-size", 8, "--dupe-factor", 2, "--minutes", budget / 60,
            "--device", DEVICE, "--no-progress", "--out", tmp_path / "run")
    wall = time.perf_counter() - started
    [run] = trainer_runs[before:]
    assert on_test_device(run.device)
    results = read_json(tmp_path / "run" / "train_results.json")
    steps, planned, seconds = results["step"], results["total_steps"], results["seconds"]
    assert results["stop_reason"] in ("max_steps", "max_seconds") and 1 <= steps <= planned
    assert seconds <= budget + 1.5, results  # the clock stops the run at the budget, a last step after it at most
    # the budget is the training's; loading the data, timing steps and saving the model come on top
    assert wall <= budget + 15, wall
    if torch.device(DEVICE).type == "cuda":
        if results["stop_reason"] == "max_seconds":  # the plan was too long, by at most 30%
            assert steps >= 0.7 * planned, results
        else:  # the plan was too short, by at most 30% (and the few percent it keeps back for what was not timed)
            assert seconds >= 0.6 * budget, results


# ---- inference commands on the device print what they print on the CPU ------------------------------------

def assert_same(got, want, where: str = "") -> None:
    """JSON values equal, numbers within 1e-4."""
    if isinstance(want, float) or isinstance(got, float):
        assert got == pytest.approx(want, abs=1e-4), where
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for key in want:
            assert_same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want)):
            assert_same(a, b, f"{where}[{i}]")
    else:
        assert got == want, where


def bertkit_on(device: str, *argv) -> str:
    """What `bertkit ARGV --device DEVICE` prints. On a GPU the command is seen to compute where it was told: given
    the GPU it allocates memory there, given the CPU none."""
    if torch.device(DEVICE).type != "cuda":
        return bertkit(*argv, "--device", device)
    torch.cuda.synchronize(DEVICE)
    before = torch.cuda.memory_allocated(DEVICE)
    torch.cuda.reset_peak_memory_stats(DEVICE)
    printed = bertkit(*argv, "--device", device)
    used = torch.cuda.max_memory_allocated(DEVICE) - before
    if device == "cpu":
        assert used == 0, f"bertkit {argv[0]} --device cpu allocated {used} bytes on {DEVICE}"
    else:
        assert used > 0, f"bertkit {argv[0]} --device {device} allocated nothing on {DEVICE}"
    return printed


def on_both(*argv) -> tuple[str, str]:
    """What `bertkit ARGV --device DEVICE` and `... --device cpu` print."""
    return bertkit_on(DEVICE, *argv), bertkit_on("cpu", *argv)


def json_lines(printed: str) -> list:
    return [json.loads(line) for line in printed.splitlines() if line.strip()]


@pytest.mark.parametrize("name", ["classify", "pairs", "prompt", "ner", "qa", "vision"])
def test_predict_on_the_device_prints_what_it_prints_on_the_cpu(trained, ws, name):
    model = trained(name) / "best"
    given = {"pairs": ["--pair", "c b a", "--pair", "z y", "a b c d e f", "x y z"],
             "qa": ["--question", "where is w3 ?", "--question", "where is w20 ?", "--context",
                    " ".join(WORDS[:30]) + " ."],
             "vision": [ws / "images" / "left" / "0.png", ws / "images" / "right" / "0.png"]
             }.get(name, ["a b c d e f", "x y z", "m n"])
    got, want = on_both("predict", "--model", model, "--json", *given)
    assert len(json_lines(want)) in (2, 3)
    assert_same(json_lines(got), json_lines(want))


def test_evaluate_on_the_device_scores_what_the_cpu_scores(trained, ws):
    got, want = on_both("evaluate", "--model", trained("classify") / "best", "--data", ws / "classify-dev.tsv",
                        "--json")
    scores = json.loads(want)
    assert scores["examples"] == 16 and 0 <= scores["accuracy"] <= 1
    assert_same(json.loads(got), scores)


def test_encode_on_the_device_writes_the_cpus_vectors_and_bf16_close_to_them(trained, tmp_path):
    model = trained("embedding") / "best"
    texts = ["a b c", "x y z w", "q"]
    bertkit_on(DEVICE, "encode", "--model", model, *texts, "--out", tmp_path / "device.npy")
    bertkit_on("cpu", "encode", "--model", model, *texts, "--out", tmp_path / "cpu.npy")
    bertkit_on(DEVICE, "encode", "--model", model, *texts, "--out", tmp_path / "bf16.npy", "--dtype", "bf16")
    device, cpu, bf16 = (np.load(tmp_path / f"{name}.npy") for name in ("device", "cpu", "bf16"))
    assert cpu.shape == (3, TINY_BERT["hidden_size"]) and np.isfinite(device).all()
    assert_close(device, cpu, rtol=1e-4)
    cosine = (bf16 * cpu).sum(1) / np.linalg.norm(bf16, axis=1) / np.linalg.norm(cpu, axis=1)
    assert np.isfinite(bf16).all() and cosine.min() > 0.99, cosine


def test_encode_on_the_device_grows_batches_of_short_texts_and_gives_the_same_vectors(trained):
    """On a GPU, `encode`'s batches of short texts grow past batch_size to GPU_BATCH_TOKENS padded tokens ("auto"):
    fewer forwards, the vectors of batches of batch_size. On the CPU "auto" keeps batch_size."""
    from bertkit.inference import encode
    from bertkit.inference.loading import load_text_model
    from bertkit.utils.constants import GPU_BATCH_TOKENS

    model, tokenizer = load_text_model(trained("embedding") / "best", device=DEVICE)
    rng = random.Random(5)
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(1, 12))) for _ in range(300)]
    shapes: list[tuple[int, int]] = []
    hook = model.register_forward_hook(lambda module, args, out: shapes.append(tuple(args[0].shape)))
    try:
        fixed = encode(model, tokenizer, texts, batch_size=32, batch_tokens=None)
        forwards = len(shapes)
        grown = encode(model, tokenizer, texts, batch_size=32)  # "auto"
    finally:
        hook.remove()
    assert forwards == 10
    if torch.device(DEVICE).type == "cuda":
        assert len(shapes) - forwards == 1 and shapes[-1][0] == 300 and 300 * shapes[-1][1] <= GPU_BATCH_TOKENS
    else:
        assert shapes[forwards:] == shapes[:forwards]
    assert_close(grown, fixed, rtol=1e-4)


@pytest.mark.parametrize("name, argv", [
    ("translate-transformer", ["translate", "--beams", 1, "四八六", "零一"]),
    ("translate-transformer", ["translate", "--beams", 2, "四八六", "零一"]),
    ("translate-gru", ["translate", "--beams", 2, "四八六", "零一"]),
    ("lm-gpt", ["generate", "--greedy", "--max-new-tokens", 8, "今天"]),
    ("lm-gru", ["generate", "--beams", 2, "--max-new-tokens", 8, "今天"]),
    ("summarize", ["summarize", "--beams", 2, "a b c . d e f g h", "x y . z"]),
    ("summarize-unilm", ["summarize", "--beams", 2, "a b c . d e f g h", "x y . z"]),
], ids=["translate-greedy", "translate-beams", "translate-gru", "generate-gpt", "generate-gru", "summarize",
        "summarize-unilm"])
def test_decoding_on_the_device_writes_what_the_cpu_writes(trained, name, argv):
    got, want = on_both(argv[0], "--model", trained(name), *argv[1:])
    lines = want.splitlines()
    assert len(lines) == (1 if argv[0] == "generate" else 2)
    assert got.splitlines() == lines
    if argv[0] == "generate":
        assert lines[0].startswith("今天")


def test_generate_samples_on_the_device(trained):
    printed = bertkit_on(DEVICE, "generate", "--model", trained("lm-gpt"), "--max-new-tokens", 8, "--seed", 3,
                         "今天")
    assert printed.startswith("今天") and len(printed.splitlines()) == 1


def test_attention_on_the_device(trained, tmp_path):
    printed = bertkit_on(DEVICE, "attention", "--model", trained("classify") / "best", "a b c d", "--out",
                         tmp_path / "attention.html")
    assert printed and (tmp_path / "attention.html").stat().st_size > 1000
