"""`bertkit pretrain` end to end on a tiny corpus: outputs, transformers loading, exact resume, torchrun."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import load_file

from bertkit.cli import main
from bertkit.data.pretraining.run_data import MIN_PAIRS
from bertkit.models.bert.heads import BertForPreTraining
from killed_run import kill_at_checkpoint
from tolerance import assert_close
from torchrun import run_torchrun

CHARS = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种"
    "面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本"
    "去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比"
    "或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总"
    "次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做"
    "必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权"
    "收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信"
    "马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连"
    "断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存"
    "候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严"
)
TINY_CONFIG = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                   max_position_embeddings=64, type_vocab_size=2)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A corpus of 40 documents, a character vocabulary, and model configs with and without dropout."""
    root = tmp_path_factory.mktemp("pretrain")
    rng = random.Random(0)
    docs = []
    for _ in range(40):
        sentences = ["".join(rng.choice(CHARS) for _ in range(rng.randint(5, 15))) + "。" for _ in range(6)]
        docs.append("\n".join(sentences))
    (root / "corpus.txt").write_text("\n\n".join(docs), encoding="utf-8")
    vocab = root / "vocab"
    vocab.mkdir()
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "。"] + sorted(set(CHARS))
    (vocab / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    for name, dropout in (("tiny.json", 0.1), ("tiny-no-dropout.json", 0.0)):
        (root / name).write_text(json.dumps({**TINY_CONFIG, "vocab_size": len(tokens), "hidden_dropout_prob": dropout,
                                             "attention_probs_dropout_prob": dropout}))
    return root


def pretrain_args(ws: Path, out: Path, *extra: str, config: str = "tiny.json", corpus: str = "corpus.txt"
                  ) -> list[str]:
    return ["pretrain", "--corpus", str(ws / corpus), "--vocab", str(ws / "vocab"), "--config",
            str(ws / config), "--max-seq-length", "32", "--batch-size", "8", "--dupe-factor", "2",
            "--log-every", "1", "--no-progress", "--out", str(out), *extra]


@pytest.fixture(scope="module")
def store(workspace) -> str:
    """The workspace's corpus prepared into a token store (`bertkit prepare`): the name of its directory."""
    assert main(["prepare", "--corpus", str(workspace / "corpus.txt"), "--vocab", str(workspace / "vocab"), "--out",
                 str(workspace / "store"), "--no-progress"]) == 0
    return "store"


TIMINGS = ("seconds", "examples_per_second", "tokens_per_second", "data_share")


def trained(run: Path) -> list[dict]:
    """A run's metrics.jsonl records without their timings: what the data and the model decide."""
    return [{k: v for k, v in json.loads(line).items() if k not in TIMINGS}
            for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_pretrain_writes_a_model_transformers_loads(workspace, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(pretrain_args(workspace, out, "--max-steps", "6", "--eval-every", "3")) == 0
    assert "pretrained 6 steps" in capsys.readouterr().out
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert all(r["loss"] > 0 for r in records) and "eval_mlm_accuracy" in records[2]
    # the held-out pairs are counted; their accuracy is reported from MIN_PAIRS pairs on (this corpus holds fewer)
    assert 0 < records[-1]["eval_nsp_pairs"] < MIN_PAIRS and "eval_nsp_accuracy" not in records[-1]
    assert records[-1]["eval_mlm_predictions"] > 0
    for name in ("config.json", "model.safetensors", "vocab.txt", "pretrain_options.json"):
        assert (out / name).exists(), name
    ours = BertForPreTraining.from_pretrained(out)
    theirs = transformers.BertForPreTraining.from_pretrained(out).eval()
    ids = torch.randint(5, 100, (2, 9))
    with torch.no_grad():
        assert_close(ours(ids).prediction_logits, theirs(input_ids=ids).prediction_logits)


def test_albert_sop_dynamic_wwm_variant_trains(workspace, tmp_path):
    out = tmp_path / "albert"
    assert main(pretrain_args(workspace, out, "--max-steps", "3", "--albert", "--objective", "mlm+sop",
                              "--masking", "dynamic", "--wwm")) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["embedding_size"] == 32 and config["share_layers"] is True
    assert main(pretrain_args(workspace, tmp_path / "roberta", "--max-steps", "2", "--objective", "mlm")) == 0


def run(cmd, **kw):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *cmd], env=env, capture_output=True, text=True, timeout=300, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("loader_workers", ["0", "1"])
def test_resume_after_sigkill_equals_an_uninterrupted_run(workspace, store, tmp_path, loader_workers):
    """On a prepared store, with batches assembled in the training process or in a data loader's worker: a run
    killed with SIGKILL and resumed ends with the uninterrupted run's weights, bit for bit, and its metrics."""
    steps = ["--max-steps", "40", "--save-every", "4", "--masking", "dynamic", "--eval-every", "10",
             "--loader-workers", loader_workers]
    full = run(["-m", "bertkit", *pretrain_args(workspace, tmp_path / "full", *steps, corpus=store)])
    assert full.returncode == 0, full.stderr[-2000:]

    killed = tmp_path / "killed"
    kill_at_checkpoint(pretrain_args(workspace, killed, *steps, corpus=store), killed)
    # the resumed run reads the store and its instance plans back: nothing is tokenized or planned again
    made = sorted((p.relative_to(workspace / store), p.stat().st_mtime_ns) for p in (workspace / store).rglob("*"))
    assert any(p.name == "plan.json" for p, _ in made)
    resumed = run(["-m", "bertkit", "pretrain", "--resume", str(killed)])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert sorted((p.relative_to(workspace / store), p.stat().st_mtime_ns)
                  for p in (workspace / store).rglob("*")) == made
    a, b = load_file(tmp_path / "full" / "model.safetensors"), load_file(killed / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert trained(tmp_path / "full") == trained(killed) and len(trained(killed)) == 40


@pytest.mark.slow
def test_torchrun_two_processes_match_one(workspace, store, tmp_path):
    """On a prepared store, each process assembling its own share of every batch: the losses, the held-out metrics
    and the weights of two processes are those of one."""
    # on the CPU (gloo) beside a GPU too
    common = ["--max-steps", "4", "--accumulation", "2", "--eval-every", "2", "--device", "cpu"]
    one = run(["-m", "bertkit", *pretrain_args(workspace, tmp_path / "one", *common, config="tiny-no-dropout.json",
                                               corpus=store)])
    assert one.returncode == 0, one.stderr[-2000:]
    run_torchrun(["-m", "bertkit", *pretrain_args(workspace, tmp_path / "two", *common, config="tiny-no-dropout.json",
                                                  corpus=store)], tmp_path / "two", tmp_path / "torchrun.log")
    single, double = trained(tmp_path / "one"), trained(tmp_path / "two")
    assert len(single) == 4 and [r.keys() for r in single] == [r.keys() for r in double]
    for key in ("loss", "eval_mlm_loss", "eval_mlm_accuracy", "eval_nsp_accuracy"):
        assert_close([r[key] for r in double if key in r], [r[key] for r in single if key in r], rtol=1e-4,
                     msg=f"{key}, two processes against one")
    weights = load_file(tmp_path / "two" / "model.safetensors")
    for name, value in load_file(tmp_path / "one" / "model.safetensors").items():
        assert_close(weights[name], value, rtol=1e-4, msg=name)


def test_recipe_sets_the_options_and_typed_flags_win(workspace, tmp_path):
    from bertkit.cli import build_parser
    from bertkit.cli.options import options_from_args
    from bertkit.pipelines.options import PretrainOptions, native_bf16, recipe_values
    from bertkit.pipelines.presets import NATIVE, PRETRAIN_RECIPES

    argv = ["pretrain", "--recipe", "crammed", "--corpus", "c.txt", "--vocab", "v", "--out", "o", "--max-steps", "3"]
    recipe = recipe_values("crammed")
    assert PRETRAIN_RECIPES["crammed"]["bf16"] is NATIVE and recipe["bf16"] is native_bf16()  # never emulated bf16
    crammed = options_from_args(PretrainOptions, build_parser().parse_args(argv), base=recipe)
    assert {k: getattr(crammed, k) for k in recipe} == recipe
    typed = build_parser().parse_args([*argv, "--learning-rate", "5e-4", "--config", "mini"])
    typed = options_from_args(PretrainOptions, typed, base=recipe)
    assert (typed.learning_rate, typed.config, typed.dropout) == (5e-4, "mini", recipe["dropout"])
    bert = options_from_args(PretrainOptions, build_parser().parse_args(argv[:1] + argv[3:]), base={})
    assert bert == PretrainOptions(corpus=["c.txt"], vocab="v", out="o", max_steps=3)   # --recipe bert: the defaults
    # the recipe's levers reach the model and the data: a run with them trains and saves what it says
    out = tmp_path / "crammed"
    assert main([*pretrain_args(workspace, out, "--max-steps", "3", "--recipe", "crammed", "--config",
                                str(workspace / "tiny.json"), "--mlm-probability", "0.4", "--pre-ln",
                                "--no-bias")]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert (saved["normalize_before"], saved["use_bias"], saved["hidden_dropout_prob"]) == (True, False, 0.0)
    saved_options = json.loads((out / "pretrain_options.json").read_text())
    assert (saved_options["mlm_probability"], saved_options["group_by_length"]) == (0.4, True)


def test_probe_does_not_depend_on_the_training_masking(workspace):
    """The held-out probe masks as BERT does (15%, single segments) whatever rate the run trains with."""
    from bertkit.pipelines.options import PretrainOptions
    from bertkit.pipelines.pretrain import prepare

    runs = [prepare(PretrainOptions(corpus=[str(workspace / "corpus.txt")], vocab=str(workspace / "vocab"), out="x",
                                    max_steps=1, max_seq_length=32, mlm_probability=p, eval_fraction=0.2,
                                    config=str(workspace / "tiny.json")))
            for p in (0.15, 0.4)]
    first, second = runs[0].data.eval_singles, runs[1].data.eval_singles
    assert [i.masked_input_ids for i in first] == [i.masked_input_ids for i in second]
    assert all(i.next_sentence_label is None for i in runs[0].data.eval_singles) and runs[0].data.eval_pairs
    predicted = [sum(label != -100 for label in i.labels) for i in runs[0].data.eval_singles]
    tokens = [len(i.input_ids) - 2 for i in runs[0].data.eval_singles]
    assert sum(predicted) == pytest.approx(0.15 * sum(tokens), rel=0.2)
    # training masks follow the run's rate
    static = [prepare(PretrainOptions(corpus=[str(workspace / "corpus.txt")], vocab=str(workspace / "vocab"),
                                      out="x", max_steps=1, max_seq_length=32, mlm_probability=p,
                                      config=str(workspace / "tiny.json"))) for p in (0.15, 0.4)]
    instances = [[run.data.train_dataset[i] for i in range(len(run.data.train_dataset))] for run in static]
    shares = [sum(sum(label != -100 for label in i.labels) for i in items) / sum(len(i.input_ids) - 3 for i in items)
              for items in instances]
    assert shares[0] == pytest.approx(0.15, abs=0.03) and shares[1] == pytest.approx(0.4, abs=0.05)


def test_a_corpus_named_twice_weighs_twice_but_is_held_out_once(workspace, tmp_path):
    from bertkit.data.pretraining import CorpusMix
    from bertkit.data.pretraining.run_data import split_documents, training_documents
    from bertkit.data.pretraining.store_cache import cached_store
    from bertkit.tokenizer import BertTokenizer

    corpus, other = str(workspace / "corpus.txt"), tmp_path / "other.txt"
    other.write_text("另一篇。\n\n第二篇。", encoding="utf-8")
    tokenizer = BertTokenizer.from_pretrained(workspace / "vocab")
    stores = [cached_store([corpus], tokenizer), cached_store([str(other)], tokenizer)]
    once, held_once = training_documents(CorpusMix.parse([corpus]), stores[:1], 0.2, 7)
    assert [a.tolist() for a in (once, held_once)] == [a.tolist() for a in split_documents(40, 0.2, 7)]
    assert len(held_once) == 8 and not set(once) & set(held_once)
    twice, held_twice = training_documents(CorpusMix.parse([corpus, str(other), corpus]), stores, 0.2, 7)
    assert len(held_twice) == 8 and not set(twice) & set(held_twice)          # no held-out text is trained on
    trained = np.bincount(twice, minlength=42)
    assert set(trained[:40][~np.isin(np.arange(40), held_twice)]) == {2}        # named twice: two copies
    assert set(trained[40:][~np.isin(np.arange(40, 42), held_twice)]) <= {1}


def test_plan_steps_pays_the_held_out_evaluations_first(monkeypatch):
    """`--minutes` plans with the one rule (`steps_for_budget`): ten held-out evaluations as a fixed overhead, or
    with --eval-every a share of each step; a forward pass is a third of a training step."""
    from types import SimpleNamespace

    from bertkit.pipelines import pretrain

    monkeypatch.setattr(pretrain, "step_seconds", lambda run, hold=(): 0.1)
    held_out = SimpleNamespace(eval_singles=[None] * 480, eval_pairs=[None] * 32)   # 512 held out, 16 batches of 32
    run = SimpleNamespace(data=held_out)
    options = SimpleNamespace(minutes=1, batch_size=32, eval_every=None, device="cpu")
    # an evaluation: 16 batches at 0.1 / 3 s = 0.533 s; ten of them: 5.33 s; 0.9 * (60 - 5.33) / 0.1 = 492
    said = []
    assert pretrain.plan_steps(run, options, said.append) == 492
    assert said == ["--minutes 1: 492 steps of 32 sequences planned, a step timed at 100.0 ms on cpu"]
    # every 100 steps: 0.1 + 0.00533 s a step; 0.9 * 60 / 0.10533 = 512.7
    assert pretrain.plan_steps(run, SimpleNamespace(minutes=1, batch_size=32, eval_every=100, device="cpu")) == 512
    nothing = SimpleNamespace(data=SimpleNamespace(eval_singles=[], eval_pairs=[]))
    assert pretrain.plan_steps(nothing, options) == 540   # nothing held out
