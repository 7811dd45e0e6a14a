"""`bertkit pretrain --init MODEL`: continue pretraining a BERT with its own weights and vocabulary."""

import json
import os
import random
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file

from bertkit.cli import main
from bertkit.models.bert.heads import BertForMaskedLM, BertForPreTraining
from bertkit.pipelines.options import PretrainOptions, recipe_options
from bertkit.pipelines.pretrain import initial_model, prepare
from bertkit.tokenizer import BertTokenizer
from killed_run import kill_at_checkpoint
from tolerance import assert_close

CHARS = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多"
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A corpus of 30 documents, and three tiny BERT directories with one vocabulary: transformers' BertModel (no
    pretraining heads), transformers' BertForPreTraining (both heads) and a GPT-2 (not a BERT)."""
    root = tmp_path_factory.mktemp("init")
    rng = random.Random(0)
    docs = ["\n".join("".join(rng.choice(CHARS) for _ in range(rng.randint(5, 12))) + "。" for _ in range(5))
            for _ in range(30)]
    (root / "corpus.txt").write_text("\n\n".join(docs), encoding="utf-8")
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "。", *sorted(set(CHARS))]
    config = transformers.BertConfig(vocab_size=len(tokens), **TINY)
    torch.manual_seed(0)
    for name, model in (("encoder", transformers.BertModel(config)),
                        ("pretrained", transformers.BertForPreTraining(config))):
        model.save_pretrained(root / name)
        (root / name / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    other = root / "other-vocab"
    other.mkdir()
    (other / "vocab.txt").write_text("\n".join(tokens[:-1]) + "\n", encoding="utf-8")
    transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2)
                                 ).save_pretrained(root / "gpt2")
    return root


def init_options(ws: Path, init: str | Path, out: Path, **changes) -> PretrainOptions:
    return PretrainOptions(**{"corpus": [str(ws / "corpus.txt")], "init": str(init), "out": str(out),
                              "max_steps": 2, "max_seq_length": 32, "batch_size": 4, "progress": False,
                              **changes})


def test_the_encoder_is_the_sources_exactly_and_missing_heads_start_fresh(workspace, tmp_path):
    source = load_file(workspace / "encoder" / "model.safetensors")
    with pytest.warns(UserWarning, match=r"no weights for cls\.predictions\..*cls\.seq_relationship"):
        model = initial_model(init_options(workspace, workspace / "encoder", tmp_path / "a"),
                              BertTokenizer.from_pretrained(workspace / "encoder"))
    assert isinstance(model, BertForPreTraining) and model.training
    state = model.state_dict()
    assert {f"bert.{k}" for k in source} <= set(state)
    for name, tensor in source.items():
        assert torch.equal(state[f"bert.{name}"], tensor), name
    # the masked-LM decoder is the word embeddings, tied; its bias starts at zero
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert torch.equal(model.cls.predictions.bias, torch.zeros_like(model.cls.predictions.bias))


def test_a_checkpoint_with_both_heads_keeps_them(workspace, tmp_path):
    source = load_file(workspace / "pretrained" / "model.safetensors")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is initialised fresh, so nothing is said
        model = initial_model(init_options(workspace, workspace / "pretrained", tmp_path / "a"),
                              BertTokenizer.from_pretrained(workspace / "pretrained"))
    state = model.state_dict()
    for name, tensor in source.items():
        if name in state:
            assert torch.equal(state[name], tensor), name
    assert {"cls.predictions.bias", "cls.seq_relationship.weight"} <= set(source)
    # the same model and output as transformers' on the same weights
    theirs = transformers.BertForPreTraining.from_pretrained(workspace / "pretrained").eval()
    ids = torch.randint(6, 40, (2, 11))
    with torch.no_grad():
        assert_close(model.eval()(ids).prediction_logits, theirs(input_ids=ids).prediction_logits)


def test_masked_lm_alone_drops_the_nsp_head(workspace, tmp_path):
    model = initial_model(init_options(workspace, workspace / "pretrained", tmp_path / "a", objective="mlm"),
                          BertTokenizer.from_pretrained(workspace / "pretrained"))
    assert isinstance(model, BertForMaskedLM)
    source = load_file(workspace / "pretrained" / "model.safetensors")
    assert torch.equal(model.cls.predictions.transform.dense.weight, source["cls.predictions.transform.dense.weight"])


def test_a_bertkit_run_continues_from_another_bertkit_run(workspace, tmp_path, capsys):
    first = tmp_path / "first"
    assert main(["pretrain", "--corpus", str(workspace / "corpus.txt"), "--init", str(workspace / "encoder"),
                 "--max-steps", "3", "--max-seq-length", "32", "--batch-size", "4", "--no-progress",
                 "--out", str(first)]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(said) == 1 and "no weights for cls.predictions.bias" in said[0] and "initialised fresh" in said[0]
    trained = load_file(first / "model.safetensors")
    assert not torch.equal(trained["bert.encoder.layer.0.attention.self.query.weight"],
                           load_file(workspace / "encoder" / "model.safetensors")[
                               "encoder.layer.0.attention.self.query.weight"])
    model = initial_model(init_options(workspace, first, tmp_path / "second"), BertTokenizer.from_pretrained(first))
    for name, tensor in model.state_dict().items():
        if name in trained:
            assert torch.equal(tensor, trained[name]), name
    # the output is an ordinary BERT directory: its vocabulary is the source's, transformers loads it
    assert (first / "vocab.txt").read_text() == (workspace / "encoder" / "vocab.txt").read_text()
    transformers.BertForPreTraining.from_pretrained(first)


def test_freeze_encoder_steps_trains_only_the_heads_first(workspace, tmp_path):
    """--freeze-encoder-steps N: N steps move the fresh heads only; the encoder (and the word embeddings the decoder
    shares) is the source's bit for bit; without --init there is nothing to hold, and it is refused."""
    out = tmp_path / "held"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*initialised fresh")
        assert main(["pretrain", "--corpus", str(workspace / "corpus.txt"), "--init", str(workspace / "encoder"),
                     "--objective", "mlm", "--max-steps", "4", "--freeze-encoder-steps", "3", "--save-every", "3",
                     "--max-seq-length", "32", "--batch-size", "4", "--no-progress", "--out", str(out)]) == 0
        fresh = initial_model(init_options(workspace, workspace / "encoder", tmp_path / "x", objective="mlm"),
                              BertTokenizer.from_pretrained(workspace / "encoder"))  # the same seed: the same head
    # the model after the 3 held steps (the 4th moves the encoder too)
    trained = load_file(out / "checkpoint-3" / "model.safetensors")
    source = load_file(workspace / "encoder" / "model.safetensors")
    for name, tensor in source.items():
        if not name.startswith("pooler."):  # masked LM alone has no pooler
            assert torch.equal(trained[f"bert.{name}"], tensor), name
    assert not torch.equal(trained["cls.predictions.transform.dense.weight"],
                           fresh.cls.predictions.transform.dense.weight)
    with pytest.raises(ValueError, match="--freeze-encoder-steps .* needs --init"):
        PretrainOptions(corpus=[str(workspace / "corpus.txt")], vocab=str(workspace / "encoder"), out=str(tmp_path),
                        max_steps=2, freeze_encoder_steps=1)


def test_the_crammed_recipe_keeps_the_models_size(workspace, tmp_path):
    options = recipe_options("crammed", corpus=[str(workspace / "corpus.txt")], init=str(workspace / "pretrained"),
                             out=str(tmp_path / "a"), max_steps=2, max_seq_length=32)
    assert options.config is None and options.dropout == 0.0
    run = prepare(options)
    assert run.model.config.hidden_size == 32 and run.model.config.hidden_dropout_prob == 0.0
    assert len(run.tokenizer) == len((workspace / "pretrained" / "vocab.txt").read_text().split())


@pytest.mark.parametrize("flags, message", [
    (["--config", "tiny"], r"--init .* continues that model with its own shape; --config would change it"),
    (["--albert", "--pre-ln"], r"--albert, --pre-ln would change it"),
    (["--vocab", "OTHER"], r"--vocab .*other-vocab is not the vocabulary of --init"),
    (["--max-seq-length", "128"], r"--max-seq-length 128 exceeds the 64 positions of --init"),
])
def test_changes_to_the_models_shape_or_vocabulary_are_refused(workspace, tmp_path, capsys, flags, message):
    flags = [str(workspace / "other-vocab") if flag == "OTHER" else flag for flag in flags]
    assert main(["pretrain", "--corpus", str(workspace / "corpus.txt"), "--init", str(workspace / "encoder"),
                 "--max-steps", "2", "--no-progress", "--out", str(tmp_path / "run"), *flags]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    import re
    assert re.search(message, err), err


def test_the_same_vocabulary_beside_init_is_accepted(workspace, tmp_path):
    options = init_options(workspace, workspace / "encoder", tmp_path / "a", vocab=str(workspace / "pretrained"))
    with pytest.warns(UserWarning, match="no weights for cls"):
        assert isinstance(prepare(options).model, BertForPreTraining)


def test_not_a_bert_and_no_vocabulary_are_named(workspace, tmp_path, capsys):
    assert main(["pretrain", "--corpus", str(workspace / "corpus.txt"), "--init", str(workspace / "gpt2"),
                 "--vocab", str(workspace / "encoder"), "--max-steps", "2", "--out", str(tmp_path / "a")]) == 2
    assert "holds a GPT-2 model" in capsys.readouterr().err
    assert main(["pretrain", "--corpus", str(workspace / "corpus.txt"), "--max-steps", "2",
                 "--out", str(tmp_path / "b")]) == 2
    assert "give --vocab" in capsys.readouterr().err
    assert main(["pretrain", "--corpus", str(workspace / "corpus.txt"), "--init", str(tmp_path / "nowhere"),
                 "--max-steps", "2", "--out", str(tmp_path / "c")]) == 2
    assert "nowhere" in capsys.readouterr().err


def run(cmd):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *cmd], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_run_from_init_resumes_exactly_after_sigkill(workspace, tmp_path):
    args = lambda out: ["-m", "bertkit", "pretrain", "--corpus", str(workspace / "corpus.txt"),  # noqa: E731
                        "--init", str(workspace / "encoder"), "--max-seq-length", "32", "--batch-size", "4",
                        "--max-steps", "30", "--save-every", "4", "--masking", "dynamic", "--log-every", "1",
                        "--no-progress", "--out", str(out)]
    full = run(args(tmp_path / "full"))
    assert full.returncode == 0, full.stderr[-2000:]
    assert full.stderr.count("initialised fresh") == 1  # the fresh heads, said once

    killed = tmp_path / "killed"
    kill_at_checkpoint(args(killed)[2:], killed)
    resumed = run(["-m", "bertkit", "pretrain", "--resume", str(killed)])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a, b = load_file(tmp_path / "full" / "model.safetensors"), load_file(killed / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-6, rtol=0, msg=name)
    losses = lambda p: [json.loads(x)["loss"] for x in (p / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    assert losses(tmp_path / "full") == losses(killed)


def test_m3e_small_by_name(m3e_small_dir, workspace, tmp_path):
    """The built-in name: m3e-small's encoder as it was saved, its 21,128-token vocabulary, fresh heads."""
    from bertkit.models.checkpoint import find_weights_file, read_weights

    source = read_weights(find_weights_file(m3e_small_dir))
    with pytest.warns(UserWarning, match="no weights for cls"):
        run = prepare(init_options(workspace, "m3e-small", tmp_path / "a"))
    assert len(run.tokenizer) == run.model.config.vocab_size
    state = run.model.state_dict()
    weights = {name: tensor for name, tensor in source.items() if not name.endswith("position_ids")}  # a buffer
    assert len(weights) > 60
    for name, tensor in weights.items():
        key = name if name in state else f"bert.{name}"
        assert torch.equal(state[key], tensor), name
