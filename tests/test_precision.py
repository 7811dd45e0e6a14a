"""Inference in bfloat16 and int8: converted copies that leave the model alone, vectors close to float32's, a
float32 fallback with a warning where the CPU has no native bfloat16, dtype names, and `--dtype` on the command
line; a real model's bf16 and int8 vectors against its float32 ones."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

from bertkit.cli import main
from bertkit.inference import encode, precision, predict
from bertkit.inference.precision import PrecisionWarning, dtype_name, for_inference, model_dtype
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForMaskedLM, BertForSequenceClassification
from bertkit.models.bert.modeling import BertModel
from bertkit.tokenizer import BertTokenizer
from conftest import model_dir_or_skip
from tolerance import assert_close

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "a", "mat", "dog", "good", "bad",
         "very", "not", "is", "it"]
TINY = dict(vocab_size=len(VOCAB), hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
            max_position_embeddings=32)
TEXTS = ["the cat sat on a mat", "a dog", "it is very good", "it is not bad", "the dog sat", "good"] * 3


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer({token: i for i, token in enumerate(VOCAB)}, backend="python")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return BertModel(BertConfig(**TINY)).eval()


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def test_dtype_names():
    assert [dtype_name(d) for d in ("fp32", "FP32", "float32", torch.float32)] == ["float32"] * 4
    assert [dtype_name(d) for d in ("bf16", "bfloat16", torch.bfloat16)] == ["bfloat16"] * 3
    assert dtype_name("int8") == "int8"
    for bad in ("fp16", "float64", torch.float16, 8):
        with pytest.raises(ValueError, match="dtype must be one of"):
            dtype_name(bad)


def test_bfloat16_copy_leaves_the_model_alone_and_keeps_tied_weights(monkeypatch):
    monkeypatch.setattr(precision, "native_bfloat16", lambda device="cpu": True)
    torch.manual_seed(0)
    masked_lm = BertForMaskedLM(BertConfig(**TINY)).eval()
    before = snapshot(masked_lm)
    copy = for_inference(masked_lm, "bf16")
    assert copy is not masked_lm and model_dtype(copy) == "bfloat16" and model_dtype(masked_lm) == "float32"
    decoder, words = copy.cls.predictions.decoder.weight, copy.bert.embeddings.word_embeddings.weight
    assert decoder is words and decoder.dtype == torch.bfloat16  # still one tensor
    assert not copy.training and all(not p.requires_grad for p in copy.parameters())
    for name, tensor in masked_lm.state_dict().items():
        assert torch.equal(tensor, before[name]) and tensor.dtype == before[name].dtype, name
    # the copy's values are the model's, rounded to bfloat16
    torch.testing.assert_close(copy.bert.encoder.layer[0].output.dense.weight,
                               masked_lm.bert.encoder.layer[0].output.dense.weight.to(torch.bfloat16), rtol=0, atol=0)
    assert for_inference(copy, "bfloat16") is copy and for_inference(masked_lm, "fp32") is masked_lm
    assert for_inference(masked_lm, None) is masked_lm


def test_bfloat16_vectors_are_close_to_float32(model, tokenizer, monkeypatch):
    monkeypatch.setattr(precision, "native_bfloat16", lambda device="cpu": True)
    fp32 = encode(model, tokenizer, TEXTS, batch_size=4, pooling="mean")
    bf16 = encode(model, tokenizer, TEXTS, batch_size=4, pooling="mean", dtype="bfloat16")
    assert bf16.dtype == np.float32 and bf16.shape == fp32.shape
    similarity = cosines(bf16, fp32)
    assert similarity.min() > 0.999, similarity.min()
    assert np.abs(bf16 - fp32).max() > 1e-4  # it really ran in bfloat16: not float32's vectors
    assert model_dtype(model) == "float32"


def test_without_native_bfloat16_float32_runs_with_a_warning(model, tokenizer, monkeypatch):
    monkeypatch.setattr(precision, "native_bfloat16", lambda device="cpu": False)
    with pytest.warns(PrecisionWarning, match="does not compute bfloat16 natively.*running in float32"):
        vectors = encode(model, tokenizer, TEXTS, batch_size=4, dtype="bf16")
    np.testing.assert_array_equal(vectors, encode(model, tokenizer, TEXTS, batch_size=4))


def test_int8_quantizes_every_linear_of_a_copy(model, tokenizer):
    before = snapshot(model)
    copy = for_inference(model, "int8")
    assert model_dtype(copy) == "int8" and model_dtype(model) == "float32"
    linears = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    quantized = [name for name, module in copy.named_modules() if precision._is_quantized_linear(module)]
    assert quantized == linears and len(linears) == 2 * 6 + 1  # six per layer, and the pooler
    assert all(isinstance(module, nn.Linear) for name, module in model.named_modules() if name in linears)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    fp32 = encode(model, tokenizer, TEXTS, pooling="mean")
    int8 = encode(model, tokenizer, TEXTS, pooling="mean", dtype="int8")
    similarity = cosines(int8, fp32)
    assert similarity.min() > 0.99 and np.abs(int8 - fp32).max() > 1e-4, similarity.min()
    with pytest.raises(ValueError, match="quantized to int8"):
        for_inference(copy, "bfloat16")


@pytest.mark.parametrize("dtype", ["bf16", "int8"])
def test_predict_in_other_dtypes_agrees_with_float32(tokenizer, dtype, monkeypatch):
    monkeypatch.setattr(precision, "native_bfloat16", lambda device="cpu": True)
    torch.manual_seed(1)
    classifier = BertForSequenceClassification(BertConfig(**TINY, id2label={0: "bad", 1: "good"})).eval()
    with torch.no_grad():
        classifier.classifier.weight.mul_(20)  # confident, so the labels do not hang on rounding
    fp32 = predict(classifier, tokenizer, TEXTS)
    other = predict(classifier, tokenizer, TEXTS, dtype=dtype)
    assert [p["label"] for p in other] == [p["label"] for p in fp32]
    diffs = [abs(a["score"] - b["score"]) for a, b in zip(other, fp32)]
    assert max(diffs) < 0.05 and max(diffs) > 0, diffs


def test_encode_command_takes_dtype_and_warns_in_one_line(tmp_path, model, tokenizer, capsys, monkeypatch):
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    out = tmp_path / "v.npy"
    # on the CPU, whose bf16 this test is about, beside a GPU too (int8 runs on the CPU anyway)
    assert main(["encode", "--model", str(tmp_path / "m"), "--dtype", "int8", "--out", str(out), *TEXTS[:3]]) == 0
    assert_close(np.load(out), encode(model, tokenizer, TEXTS[:3], dtype="int8"), rtol=1e-6)
    capsys.readouterr()
    monkeypatch.setattr(precision, "native_bfloat16", lambda device="cpu": False)
    assert main(["encode", "--model", str(tmp_path / "m"), "--dtype", "bf16", "--out", str(out), "--overwrite",
                 "--device", "cpu", *TEXTS[:3]]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bertkit encode: warning: this CPU does not compute bfloat16"), err
    np.testing.assert_array_equal(np.load(out), encode(model, tokenizer, TEXTS[:3]))
    with pytest.raises(SystemExit) as refused:  # argparse refuses it
        main(["encode", "--model", str(tmp_path / "m"), "--dtype", "fp16", "a"])
    assert refused.value.code == 2
    assert "invalid choice: 'fp16'" in capsys.readouterr().err


@pytest.mark.parametrize("cap", ["ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI", "ONEDNN_MAX_CPU_ISA=avx2",
                                 "ATEN_CPU_CAPABILITY=avx2"])
def test_an_instruction_set_cap_runs_this_machine_as_one_without_native_bfloat16(cap, monkeypatch):
    """The switch that runs a CPU with native bf16 as one without it (an Intel Cascade Lake, an AVX2 laptop): every
    choice made from `native_bfloat16` is then the slower machine's. It holds on every CPU: where bf16 is not
    native anyway the answers are the same."""
    from bertkit.inference.machine import Machine, cpu_isa_cap, native_bfloat16
    from bertkit.pipelines.options import DemoOptions, recipe_values

    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    assert cpu_isa_cap() is None
    name, value = cap.split("=")
    monkeypatch.setenv(name, value)
    assert cpu_isa_cap() == f"{name}={value.upper() if name.startswith('ONEDNN') else value}"
    assert not native_bfloat16() and not precision.native_bfloat16()
    assert recipe_values("crammed", device="cpu")["bf16"] is False and DemoOptions(device="cpu").use_bf16 is False
    assert Machine.here().describe().endswith(f"no native bf16 (held below the CPU's own by {cpu_isa_cap()})")
    with pytest.warns(PrecisionWarning, match="does not compute bfloat16 natively"):
        assert model_dtype(for_inference(BertModel(BertConfig(**TINY)), "bf16")) == "float32"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")  # at or above bf16: not a cap
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    assert cpu_isa_cap() is None


def test_a_pretraining_run_under_the_cap_trains_in_float32(tmp_path):
    """End to end, as a user would emulate a CPU without bf16: the crammed recipe (bf16 where native) trains in
    float32 and says so in its saved arguments, on every CPU."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "corpus.txt").write_text("\n\n".join("the cat sat on a mat. it is very good." for _ in range(40)))
    vocab = tmp_path / "vocab"
    BertTokenizer({token: i for i, token in enumerate(VOCAB)}, backend="python").save_pretrained(vocab)
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "bertkit", "pretrain", "--recipe", "crammed", "--corpus",
                           str(tmp_path / "corpus.txt"), "--vocab", str(vocab), "--max-steps", "2", "--batch-size",
                           "4", "--max-seq-length", "16", "--out", str(tmp_path / "run"), "--no-progress",
                           "--device", "cpu"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "run" / "training_args.json").read_text())["bf16"] is False


@pytest.mark.network
@pytest.mark.slow  # a real model on real headlines
def test_m3e_small_bf16_and_int8_vectors_on_real_headlines(monkeypatch):
    """Where bf16 is not native it is emulated (slowly): the vectors are checked there too, on fewer headlines."""
    from bertkit.data.tasks import thucnews_headlines

    directory = model_dir_or_skip("m3e-small")
    native = precision.native_bfloat16()
    monkeypatch.setattr(precision, "native_bfloat16", lambda device="cpu": True)  # a bf16 copy even if emulated
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # config keys bertkit does not use
        model, tokenizer = BertModel.from_pretrained(directory), BertTokenizer.from_pretrained(directory)
    texts = [title for _, title in thucnews_headlines()[:200 if native else 32]]
    fp32 = encode(model, tokenizer, texts, pooling="mean")
    for dtype, bound in (("bfloat16", 0.999), ("int8", 0.999)):  # int8: per-token scales after smoothing
        similarity = cosines(encode(model, tokenizer, texts, pooling="mean", dtype=dtype), fp32)
        assert similarity.min() >= bound, (dtype, similarity.min())


def test_int8_linear_is_smoothquants_per_token_product_and_close_to_float32():
    """Int8Linear against the computation written out in NumPy: the batch's channel ranges migrate into the weights
    (strength SMOOTHING), each token and each output column get a scale of their own, the product is in integers."""
    torch.manual_seed(0)
    linear = nn.Linear(48, 24)
    x = torch.randn(3, 5, 48)
    x[..., 7] *= 40  # an outlier channel, as after LayerNorm: one scale per batch would flatten the others
    ours = precision.Int8Linear(linear)(x).numpy()

    a, rows = precision.SMOOTHING, x.reshape(-1, 48).numpy().astype(np.float64)
    w = linear.weight.detach().numpy().astype(np.float64)                                    # (out, in)
    smooth = np.maximum(np.abs(rows).max(0), 1e-5) ** a / np.maximum(np.abs(w).max(0), 1e-5) ** (1 - a)
    rows, w = rows / smooth, w * smooth
    row_scale = np.abs(rows).max(1, keepdims=True) / 127
    column_scale = np.abs(w).max(1) / 127
    product = np.round(rows / row_scale).astype(np.int64) @ np.round(w / column_scale[:, None]).astype(np.int64).T
    expected = product * row_scale * column_scale + linear.bias.detach().numpy()
    np.testing.assert_allclose(ours.reshape(-1, 24), expected, rtol=1e-4, atol=1e-4)
    exact = linear(x).detach().numpy().reshape(-1, 24)
    cos = (ours.reshape(-1, 24) * exact).sum(1) / np.linalg.norm(ours.reshape(-1, 24), axis=1) / np.linalg.norm(
        exact, axis=1)
    assert cos.min() > 0.999, cos.min()


def test_int8_products_are_exact_on_this_cpu():
    """torch._int_mm on a CPU without VNNI sums u8 x s8 pairs in int16 and saturates on 8-bit weights; int8_matmul
    then multiplies the weights' 7-bit halves: exact either way (checked here against integers, on this CPU)."""
    generator = torch.Generator().manual_seed(1)
    a = torch.randint(-127, 128, (24, 512), dtype=torch.int8, generator=generator)
    b = torch.randint(-127, 128, (512, 40), dtype=torch.int8, generator=generator)
    assert torch.equal(precision.int8_matmul(a, b), (a.long() @ b.long()).int())
    assert isinstance(precision.exact_int8_products(), bool)


def test_choose_dtype_takes_the_fastest_format_within_cosine_0999(model, tokenizer, monkeypatch):
    """Native bf16: bf16. Else int8 where its vectors stay within MIN_COSINE of float32's on the probe, else fp32."""
    import importlib

    encoding = importlib.import_module("bertkit.inference.encode")  # the module, not the package's encode function

    monkeypatch.setattr(encoding, "native_bfloat16", lambda device="cpu": True)
    assert encoding.choose_dtype(model, tokenizer)[0] == "bfloat16"
    monkeypatch.setattr(encoding, "native_bfloat16", lambda device="cpu": False)
    exact = encode(model, tokenizer, list(encoding.PROBE_TEXTS), pooling="mean", normalize=True)
    int8 = encode(model, tokenizer, list(encoding.PROBE_TEXTS), pooling="mean", normalize=True, dtype="int8")
    cosine = float((exact * int8).sum(1).min())
    dtype, why = encoding.choose_dtype(model, tokenizer)
    assert dtype == ("int8" if cosine >= encoding.MIN_COSINE else "float32") and f"{cosine:.4f}" in why
    monkeypatch.setattr(encoding, "MIN_COSINE", 1.01)  # a bar no int8 copy clears
    assert encoding.choose_dtype(model, tokenizer) == (
        "float32", f"no native bfloat16, and int8's vectors are only within cosine {cosine:.4f} of float32's (below "
                   "1.01)")
