"""The training loop on a tiny two-term model: data order, exact loss weighting, schedule, checkpoints,
NaN handling, early stopping, kill-and-resume and torchrun data parallelism."""

import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bertkit.training.checkpointing import TrainingCheckpointError, list_checkpoints, load_checkpoint
from bertkit.training.data_order import collating_loader, example_seed, length_grouped
from bertkit.training.distributed import Distributed
from bertkit.training.schedule import WarmupSchedule, build_optimizer
from bertkit.training.trainer import Trainer, TrainingArguments, TrainingError
from tolerance import assert_close
from torchrun import run_torchrun

WORKER = Path(__file__).with_name("_trainer_worker.py")
_spec = importlib.util.spec_from_file_location("_trainer_worker", WORKER)
tiny = sys.modules.setdefault("_trainer_worker", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(tiny)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors gain nothing from threads, and spinning threads crawl on a loaded 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_trainer(out, model=None, data=None, count=True, eval_fn=None, **kwargs) -> Trainer:
    defaults = {"output_dir": str(out), "batch_size": 12, "learning_rate": 1e-2, "log_every": 1,
                "progress": False, "seed": 3, "device": "cpu"}
    args = TrainingArguments(**{**defaults, **kwargs})
    return Trainer(model or tiny.build_model(), args, data or tiny.make_dataset(36), tiny.collate,
                   eval_fn=eval_fn, count_items=tiny.count_items if count else None,
                   tokenizer=tiny.TinyTokenizer())


def tiny_bert_classifier(seed: int = 0):
    """A one-layer bertkit BertForSequenceClassification over the tiny worker's vocabulary, seeded."""
    from bertkit.models.bert.configuration import BertConfig
    from bertkit.models.bert.heads import BertForSequenceClassification

    torch.manual_seed(seed)
    return BertForSequenceClassification(BertConfig(vocab_size=tiny.VOCAB, hidden_size=16, num_hidden_layers=1,
                                                    num_attention_heads=2, intermediate_size=32,
                                                    max_position_embeddings=16))


def bert_classifier_collate(examples, seeds) -> dict[str, torch.Tensor]:
    """The tiny worker's batches as BertForSequenceClassification reads them."""
    batch = tiny.collate(examples, seeds)
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"], "labels": batch["cls_label"]}


def read_metrics(out) -> list[dict]:
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def test_the_trainer_assigns_all_its_state_in_init():
    """A reader finds every attribute a Trainer has in __init__: a method may change one, never add one."""
    import ast
    import inspect
    import textwrap

    import bertkit.training.trainer as trainer_module

    tree = ast.parse(textwrap.dedent(inspect.getsource(trainer_module.Trainer)))
    assigned: dict[str, set[str]] = {}
    for method in tree.body[0].body:
        if isinstance(method, ast.FunctionDef):
            for node in ast.walk(method):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                    node, ast.AnnAssign | ast.AugAssign) else []
                for target in (t for each in targets for t in (each.elts if isinstance(each, ast.Tuple) else [each])):
                    if isinstance(target, ast.Attribute) and ast.unparse(target.value) == "self":
                        assigned.setdefault(method.name, set()).add(target.attr)
    later = set().union(*(names for method, names in assigned.items() if method != "__init__"))
    assert later - assigned["__init__"] == set()
    assert {"_wrapped", "_forward", "dist", "_loaded"} <= assigned["__init__"]


# ---- data order, optimizer groups, schedule -------------------------------------------------------

def test_example_seed_is_deterministic_and_distinct():
    seeds = {example_seed(7, epoch, index) for epoch in range(3) for index in range(200)}
    assert len(seeds) == 600 and all(0 <= s < 2**63 for s in seeds)
    assert example_seed(7, 1, 5) == example_seed(7, 1, 5) != example_seed(8, 1, 5)


def test_epochs_are_seeded_permutations_and_rank_shares_cover_each_global_batch(tmp_path):
    trainer = make_trainer(tmp_path, data=tiny.make_dataset(40), gradient_accumulation_steps=2)
    assert trainer.steps_per_epoch == 3  # 40 // 12: the 4 left over differ from epoch to epoch
    epoch0 = [trainer.data.global_batch(s) for s in range(3)]
    assert {e for e, _ in epoch0} == {0}
    seen = [int(i) for _, idx in epoch0 for i in idx]
    assert len(seen) == len(set(seen)) == 36
    assert trainer.data.global_batch(3)[0] == 1 and list(trainer.data.global_batch(3)[1]) != list(epoch0[0][1])
    assert list(make_trainer(tmp_path / "again", data=tiny.make_dataset(40)).data.global_batch(4)[1]) == \
        list(trainer.data.global_batch(4)[1])

    # Two ranks × two micro-batches: together exactly the global batch, collated identically.
    single = trainer._micro_batches(4)
    shares = []
    for rank in range(2):
        trainer.dist = Distributed(rank=rank, world_size=2)
        shares += trainer._micro_batches(4)
    assert [n for n, _ in shares] == [3, 3, 3, 3]
    assert torch.equal(torch.cat([b["labels"][:, :4] for _, b in shares]),
                       torch.cat([b["labels"][:, :4] for _, b in single]))


def test_length_grouping_keeps_each_epoch_a_permutation_and_cuts_padding():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 200, size=1003)
    perm = np.random.default_rng(1).permutation(1003)
    grouped = length_grouped(perm, lengths, batch_size=8, rng=np.random.default_rng(2), window=10)
    assert sorted(grouped.tolist()) == list(range(1003))          # every example once
    assert grouped[1000:].tolist() == perm[1000:].tolist()         # the dropped remainder is the random one
    batches = grouped[:1000].reshape(-1, 8)
    for batch in batches:                                         # each batch comes from one window of 80
        windows = {int(np.where(perm == i)[0][0]) // 80 for i in batch}
        assert len(windows) == 1
    padded = lambda bs: sum(int(lengths[b].max()) * len(b) for b in bs)
    assert padded(batches) < 0.7 * padded(perm[:1000].reshape(-1, 8))  # far less padding than random batches
    # the batch order is shuffled, not longest-first window after window
    firsts = [int(lengths[b].max()) for b in batches[:10]]
    assert firsts != sorted(firsts, reverse=True)


def test_trainer_groups_by_length_when_asked(tmp_path):
    data = [{"input_ids": list(range(n))} for n in np.random.default_rng(0).integers(1, 60, size=96)]
    trainer = make_trainer(tmp_path, data=data, batch_size=8, group_by_length=True)
    batches = [trainer.data.global_batch(s)[1] for s in range(trainer.steps_per_epoch)]
    assert sorted(int(i) for b in batches for i in b) == list(range(96))
    spread = [max(len(data[i]["input_ids"]) for i in b) - min(len(data[i]["input_ids"]) for i in b) for b in batches]
    assert max(spread) < 20  # 96 examples of 1..59 tokens: random batches of 8 spread ~45
    assert [list(b) for b in batches] == [list(make_trainer(tmp_path / "again", data=data, batch_size=8,
                                                            group_by_length=True).data.global_batch(s)[1])
                                          for s in range(trainer.steps_per_epoch)]
    # pretraining instances carry input_ids as an attribute: they group the same way
    objects = [types.SimpleNamespace(input_ids=d["input_ids"]) for d in data]
    assert [list(b) for b in batches] == [list(make_trainer(tmp_path / "objects", data=objects, batch_size=8,
                                                            group_by_length=True).data.global_batch(s)[1])
                                          for s in range(trainer.steps_per_epoch)]
    with pytest.raises(ValueError, match="group_by_length needs"):
        make_trainer(tmp_path / "bad", data=tiny.make_dataset(40), group_by_length=True).data.global_batch(0)


def test_no_weight_decay_on_biases_and_layernorm():
    model = tiny.build_model()
    decay, no_decay = build_optimizer(model, 1e-3, 0.1).param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    assert sorted(names[id(p)] for p in decay["params"]) == \
        ["cls_head.weight", "dense.weight", "embed.weight", "token_head.weight"]
    assert sorted(names[id(p)] for p in no_decay["params"]) == \
        ["LayerNorm.bias", "LayerNorm.weight", "cls_head.bias", "dense.bias", "token_head.bias"]
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.1, 0.0)


def test_fused_optimizer_takes_the_steps_of_torchs_loop_adamw():
    model, reference = tiny.build_model(), tiny.build_model()  # the same seed, the same weights
    fused = build_optimizer(model, 1e-2, 0.1)
    assert fused.defaults["fused"]
    names, twins = {id(p): n for n, p in model.named_parameters()}, dict(reference.named_parameters())
    groups = [{"params": [twins[names[id(p)]] for p in group["params"]], "weight_decay": group["weight_decay"]}
              for group in fused.param_groups]
    loop = torch.optim.AdamW(groups, lr=1e-2, foreach=False)
    batch = tiny.collate(tiny.make_dataset(8), list(range(8)))
    for _ in range(5):
        for m, optimizer in ((model, fused), (reference, loop)):
            optimizer.zero_grad()
            m(**batch).loss.backward()
            optimizer.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    assert not torch.equal(model.embed.weight, tiny.build_model().embed.weight)  # it did move


def test_warmup_then_linear_cosine_constant():
    linear, cosine, constant = (WarmupSchedule(k, 4, 12) for k in ("linear", "cosine", "constant"))
    assert [linear(s) for s in (0, 2, 4, 8, 12, 20)] == [0.0, 0.5, 1.0, 0.5, 0.0, 0.0]
    assert [cosine(s) for s in (2, 4, 8, 12)] == pytest.approx([0.5, 1.0, 0.5, 0.0])
    assert [constant(s) for s in (1, 4, 100)] == [0.25, 1.0, 1.0]
    with pytest.raises(ValueError, match="lr_schedule"):
        TrainingArguments(output_dir="x", lr_schedule="step")


# ---- the loss of a step is the big-batch loss, for any accumulation ------------------------------

def test_step_loss_and_gradient_equal_one_big_batch(tmp_path):
    trainer = make_trainer(tmp_path / "a1", max_steps=4)
    epoch, indices = trainer.data.global_batch(0)
    batch = tiny.collate([trainer.train_dataset[int(i)] for i in indices],
                         [example_seed(3, epoch, int(i)) for i in indices])
    reference = tiny.build_model()
    big_loss = reference(**batch).loss
    big_loss.backward()
    big_norm = torch.sqrt(sum((p.grad ** 2).sum() for p in reference.parameters())).item()

    one = trainer.train()
    assert one.losses[0] == pytest.approx(big_loss.item(), abs=1e-6)
    assert read_metrics(tmp_path / "a1")[0]["grad_norm"] == pytest.approx(big_norm, rel=1e-5)

    three = make_trainer(tmp_path / "a3", max_steps=4, gradient_accumulation_steps=3).train()
    assert three.losses == pytest.approx(one.losses, abs=1e-6)
    # Without the item counts the micro-batch losses are only averaged: measurably different here.
    naive = make_trainer(tmp_path / "n3", max_steps=4, gradient_accumulation_steps=3, count=False).train()
    assert max(abs(a - b) for a, b in zip(naive.losses, one.losses)) > 1e-3


# ---- outputs, checkpoints, bad input ---------------------------------------------------------------

def test_run_writes_metrics_checkpoints_and_final_model(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=7, save_every=2, save_total_limit=2, log_every=3,
                           warmup_steps=2)
    state = trainer.train()
    assert (state.step, state.stop_reason, state.epoch, state.position) == (7, "max_steps", 2, 1)
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [3, 6, 7]
    assert records[0]["loss"] == pytest.approx(sum(state.losses[:3]) / 3)
    assert records[1]["lr"] == pytest.approx(1e-2 * (1 - 3 / 5))  # step 6: index 5, 3 of 5 decay steps done
    assert {"seconds", "examples_per_second", "tokens_per_second", "grad_norm", "loss_mlm", "loss_cls"} \
        <= set(records[0])
    assert [step for step, _ in list_checkpoints(tmp_path)] == [6, 7]  # the final step is saved too
    saved = load_checkpoint(tmp_path / "checkpoint-6", torch.device("cpu"))
    assert (saved["state"]["step"], saved["state"]["epoch"], saved["state"]["position"]) == (6, 2, 0)
    assert {"optimizer", "scheduler", "rng"} <= set(saved) and len(saved["rng"]) == 1
    for name in ("config.json", "model.safetensors", "vocab.txt"):
        assert (tmp_path / name).is_file() and (tmp_path / "checkpoint-6" / name).is_file()
    final = tiny.TinyModel.from_pretrained(tmp_path)
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(final.state_dict()[key], value)
    assert not list(tmp_path.glob(".*"))  # no temp directories left
    with pytest.raises(FileExistsError, match="resume=True"):
        make_trainer(tmp_path, max_steps=7).train()


def test_each_record_says_what_share_of_the_time_went_to_getting_the_batches(tmp_path, monkeypatch):
    """`data_share`: the loop's time getting its batches onto the device over its time: near 1 where collating is
    slow beside the model's step (here 40 ms of sleep a batch against a tiny model), near 0 where it is not."""
    fast = make_trainer(tmp_path / "fast", max_steps=4, log_every=2)
    fast.train()
    slow = make_trainer(tmp_path / "slow", max_steps=4, log_every=2)
    collate = slow.data.collate_fn
    slow.data.collate_fn = lambda examples, seeds: time.sleep(0.04) or collate(examples, seeds)
    slow.train()
    shares = {name: [r["data_share"] for r in read_metrics(tmp_path / name)] for name in ("fast", "slow")}
    assert len(shares["slow"]) == 2 and all(share > 0.8 for share in shares["slow"])
    assert all(0 <= share < 0.5 for share in shares["fast"])


def test_data_loader_workers_train_the_same_steps(tmp_path):
    """Batches collated by worker processes while the model computes: the same batches, so the same run."""
    data = [{**example, "input_ids": example["tokens"]} for example in tiny.make_dataset(40)]
    states = [make_trainer(tmp_path / str(workers), max_steps=5, dataloader_workers=workers, group_by_length=True,
                           data=data).train() for workers in (0, 2)]
    assert states[0].losses == states[1].losses and states[1].step == 5
    for key, value in states[0].to_json().items():
        if key not in ("seconds", "log_history"):
            assert states[1].to_json()[key] == value, key


def test_data_loader_workers_leave_torchs_random_state_alone(tmp_path):
    """Starting the workers draws nothing from torch's global generator: dropout after it (and after a resume, which
    starts them at another step) is what it would be without them."""
    trainer = make_trainer(tmp_path, max_steps=5, dataloader_workers=1)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    loaded = collating_loader(trainer.data, 0, trainer.total_steps, 1)
    assert next(loaded)[0] == 0
    assert torch.equal(torch.get_rng_state(), before)
    del loaded


def test_a_workers_batches_arrive_as_the_tensors_collated_in_the_process(tmp_path):
    """Workers hand batches over as numpy arrays (one pickle through the pipe, not a file descriptor per tensor);
    what the trainer gets is the tensors, dtypes and values that collating in the process gives."""
    trainer = make_trainer(tmp_path, max_steps=3, dataloader_workers=2)
    loaded = collating_loader(trainer.data, 0, trainer.total_steps, 2)
    for step in range(3):
        got_step, micro = next(loaded)
        assert got_step == step
        for (size, batch), (want_size, want) in zip(micro, trainer.data.collated(step), strict=True):
            assert size == want_size and batch.keys() == want.keys()
            for key, value in want.items():
                assert torch.is_tensor(batch[key]) and batch[key].dtype == value.dtype, key
                assert torch.equal(batch[key], value), key
    del loaded


def test_invalid_arguments_are_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="batch_size"):
        TrainingArguments(output_dir="x", batch_size=0)
    with pytest.raises(ValueError, match="metric_for_best"):
        TrainingArguments(output_dir="x", early_stopping_patience=2)
    with pytest.raises(ValueError, match="fewer than one global batch"):
        make_trainer("x", data=tiny.make_dataset(5))
    with pytest.raises(ValueError, match="processes × accumulation"):
        make_trainer("x", gradient_accumulation_steps=13).train()
    args = TrainingArguments(output_dir="x", metric_for_best="loss")
    assert (args.metric_for_best, args.greater_is_better) == ("eval_loss", False)
    assert TrainingArguments.from_dict(args.to_dict()) == args


def test_resume_errors_name_the_problem(tmp_path):
    with pytest.raises(TrainingCheckpointError, match="no complete checkpoint"):
        make_trainer(tmp_path / "empty", max_steps=2).train(resume=True)
    make_trainer(tmp_path / "run", max_steps=2, save_every=2).train()
    (tmp_path / "run" / "checkpoint-2" / "optimizer.pt").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(TrainingCheckpointError, match="checkpoint-2 is unreadable"):
        make_trainer(tmp_path / "run", max_steps=4).train(resume=True)
    # a checkpoint renamed past the newest: resumed from its step, the run would rewrite the metrics after it
    make_trainer(tmp_path / "renamed", max_steps=4, save_every=2).train()
    (tmp_path / "renamed" / "checkpoint-2").rename(tmp_path / "renamed" / "checkpoint-999")
    metrics = (tmp_path / "renamed" / "metrics.jsonl").read_text()
    with pytest.raises(TrainingCheckpointError, match="checkpoint-999 holds the state of step 2, not 999: a "
                                                      "checkpoint's name must say its step; name it checkpoint-2"):
        make_trainer(tmp_path / "renamed", max_steps=8).train(resume=True)
    assert (tmp_path / "renamed" / "metrics.jsonl").read_text() == metrics
    with pytest.raises(ValueError, match="'eval_f1' is not among the evaluation metrics"):
        make_trainer(tmp_path / "eval", max_steps=1, metric_for_best="f1",
                     eval_fn=lambda model: {"accuracy": 1.0}).train()


def test_a_score_that_is_no_number_is_not_a_divergence(tmp_path, caplog):
    """A dev score of finite outputs that is NaN (a Spearman of vectors all alike) is said and counts as the worst;
    the run goes on. A NaN evaluation loss is a divergence, as before."""
    scores = iter([float("nan"), 0.4, 0.3, float("nan")])
    trainer = make_trainer(tmp_path / "score", max_steps=4, eval_every=1, metric_for_best="spearman",
                           greater_is_better=True, eval_fn=lambda model: {"spearman": next(scores)})
    with caplog.at_level("WARNING"):
        state = trainer.train()
    assert state.step == 4 and (state.best_step, state.best_metric) == (2, 0.4)
    assert "step 1: eval_spearman is not a number, though the model's outputs are finite" in caplog.text
    with pytest.raises(TrainingError, match="step 1: the model's eval_loss on the evaluation data are not finite"):
        make_trainer(tmp_path / "loss", max_steps=2, eval_every=1, eval_fn=lambda model: {"loss": float("nan")}).train()


def test_nan_loss_stops_with_step_and_keeps_last_good_checkpoint(tmp_path):
    model = tiny.build_model(nan_at_forward=6)
    trainer = make_trainer(tmp_path, model=model, max_steps=10, save_every=2)
    with pytest.raises(TrainingError, match="step 6: loss is nan") as err:
        trainer.train()
    assert err.value.step == 6 and err.value.checkpoint == tmp_path / "checkpoint-4"
    assert "checkpoint-4" in str(err.value)
    assert [step for step, _ in list_checkpoints(tmp_path)] == [2, 4]
    assert json.loads((tmp_path / "checkpoint-4" / "trainer_state.json").read_text())["step"] == 4
    assert not (tmp_path / "model.safetensors").exists()  # no final model from a diverged run
    assert all(torch.isfinite(p).all() for p in model.parameters())  # the NaN step did not update


def test_max_seconds_budget_stops_and_saves(tmp_path):
    state = make_trainer(tmp_path, max_steps=50, max_seconds=0.0, save_every=10).train()
    assert (state.step, state.stop_reason) == (1, "max_seconds")
    assert [step for step, _ in list_checkpoints(tmp_path)] == [1]


class _FakeClock:
    """`time` for the trainer module: perf_counter reads a clock the test advances by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def _clocked_trainer(out, monkeypatch, crash_at=None, **kwargs) -> Trainer:
    """A trainer whose steps take 1 s each on a fake clock; `crash_at` (0-based step) raises inside that step."""
    clock = _FakeClock()
    monkeypatch.setattr("bertkit.training.trainer.time", clock)
    trainer = make_trainer(out, **kwargs)
    step_once = trainer._train_step

    def one_second_step(step):
        if step == crash_at:
            raise RuntimeError("power cut")
        clock.now += 1.0
        return step_once(step)

    trainer._train_step = one_second_step
    return trainer


@pytest.mark.parametrize("aware", [False, True])
def test_time_aware_schedule_follows_the_clock_when_it_runs_ahead(tmp_path, monkeypatch, aware):
    # 100 planned steps (10 of warmup), a 20-second budget, and each step takes 1 s on the clock: only 20 run.
    state = _clocked_trainer(tmp_path, monkeypatch, max_steps=100, max_seconds=20.0, warmup_steps=10,
                             lr_schedule="linear", time_aware_schedule=aware).train()
    assert (state.step, state.stop_reason) == (20, "max_seconds")
    lrs = [r["lr"] / 1e-2 for r in read_metrics(tmp_path)]
    schedule = WarmupSchedule("linear", 10, 100)
    # Step k (1-based) runs after k-1 steps and k-1 seconds: the clock says 5(k-1) of the 100 planned steps.
    expected = [schedule(5.0 * (k - 1) if aware else k - 1) for k in range(1, 21)]
    assert lrs == pytest.approx(expected, abs=1e-12)
    assert lrs[2] == pytest.approx(1.0 if aware else 0.2)           # warmup over by the clock's share
    assert lrs[-1] == pytest.approx(1 - 85 / 90 if aware else 0.9)  # nearly decayed, or far from it


def test_time_aware_schedule_keeps_the_step_schedule_while_steps_run_ahead(tmp_path, monkeypatch):
    # 10 steps in 10 of the 100 seconds
    state = _clocked_trainer(tmp_path, monkeypatch, max_steps=10, max_seconds=100.0, warmup_steps=2,
                             time_aware_schedule=True).train()
    assert (state.step, state.stop_reason) == (10, "max_steps")
    schedule = WarmupSchedule("linear", 2, 10)
    assert [r["lr"] / 1e-2 for r in read_metrics(tmp_path)] == pytest.approx([schedule(k) for k in range(10)])


def test_time_aware_schedule_resumes_where_the_clock_stood(tmp_path, monkeypatch):
    args = {"max_steps": 100, "max_seconds": 20.0, "warmup_steps": 10, "time_aware_schedule": True, "save_every": 5}
    full = _clocked_trainer(tmp_path / "full", monkeypatch, **args).train()
    with pytest.raises(RuntimeError, match="power cut"):
        _clocked_trainer(tmp_path / "cut", monkeypatch, crash_at=12, **args).train()
    resumed = _clocked_trainer(tmp_path / "cut", monkeypatch, **args).train(resume=True)
    assert (resumed.start_step, resumed.step, resumed.seconds) == (10, 20, 20.0)  # the clock went on from 10 s
    want, got = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "cut")
    assert [r["step"] for r in got] == list(range(1, 21)) and full.step == 20
    assert [r["lr"] for r in got] == [r["lr"] for r in want]
    assert [r["loss"] for r in got] == [r["loss"] for r in want]


def test_time_aware_schedule_needs_max_seconds(tmp_path):
    with pytest.raises(ValueError, match="give max_seconds"):
        TrainingArguments(output_dir=str(tmp_path), max_steps=5, time_aware_schedule=True)
    with pytest.raises(ValueError, match="max_seconds must be at least 0, got -1.0"):
        TrainingArguments(output_dir=str(tmp_path), max_steps=5, max_seconds=-1.0)


def test_early_stopping_keeps_best_model_and_its_checkpoint(tmp_path):
    scores = iter([0.5, 0.7, 0.6, 0.65, 0.6, 0.9])
    seen_weights = {}

    def eval_fn(model):
        assert not model.training
        seen_weights[len(seen_weights) + 1] = model.dense.weight.detach().clone()
        return {"accuracy": next(scores)}

    trainer = make_trainer(tmp_path, max_steps=12, eval_every=2, save_every=2, save_total_limit=1,
                           metric_for_best="accuracy", early_stopping_patience=2, eval_fn=eval_fn)
    state = trainer.train()
    assert (state.step, state.stop_reason) == (8, "early_stopping")  # evals at 2,4,6,8; best at 4
    assert (state.best_metric, state.best_step) == (0.7, 4)
    assert [step for step, _ in list_checkpoints(tmp_path)] == [4, 8]  # newest 1, plus the best
    best = tiny.TinyModel.from_pretrained(tmp_path / "best")
    assert torch.equal(best.dense.weight, seen_weights[2])
    assert json.loads((tmp_path / "best" / "eval_results.json").read_text()) == {"step": 4, "eval_accuracy": 0.7}
    assert [r.get("eval_accuracy") for r in read_metrics(tmp_path) if "eval_accuracy" in r] == [0.5, 0.7, 0.6, 0.65]


def test_bf16_autocast_trains(tmp_path):
    state = make_trainer(tmp_path, max_steps=3, bf16=True).train()
    assert all(math.isfinite(x) for x in state.losses) and state.losses[0] == pytest.approx(3.9, abs=0.3)


# ---- kill and resume, torchrun (subprocesses) -----------------------------------------------------

def _run_worker(*args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, str(WORKER), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_sigkill_then_resume_ends_bitwise_equal(tmp_path):
    common = ["--max-steps", "10", "--save-every", "3"]
    killed = _run_worker("run", str(tmp_path / "killed"), *common, "--kill-at-step", "8")
    tiny.main(["run", str(tmp_path / "full"), *common])  # meanwhile, the uninterrupted run, here
    assert killed.wait(120) == -signal.SIGKILL, killed.stderr.read()  # killed in step 8, after checkpoint-6
    assert [step for step, _ in list_checkpoints(tmp_path / "killed")] == [3, 6]
    tiny.main(["run", str(tmp_path / "killed"), *common, "--resume"])

    want, got = load_file(str(tmp_path / "full" / "model.safetensors")), \
        load_file(str(tmp_path / "killed" / "model.safetensors"))
    assert want.keys() == got.keys()
    for key in want:
        assert torch.equal(want[key], got[key]), key
    # The log has each step once (step 7, logged before the kill, is replaced) and the same losses.
    full_log, resumed_log = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "killed")
    assert [r["step"] for r in resumed_log] == list(range(1, 11))
    assert [r["loss"] for r in resumed_log] == [r["loss"] for r in full_log]


def test_resume_loads_a_bertkit_model_in_place_and_ends_bitwise_equal(tmp_path, monkeypatch):
    """A bertkit model resumes through its own load_weights (strict checks, no second model built)."""
    import shutil

    from bertkit.models.bert.heads import BertForSequenceClassification

    build, collate = tiny_bert_classifier, bert_classifier_collate

    def run(out, model, **kwargs) -> None:
        args = TrainingArguments(output_dir=str(out), batch_size=12, learning_rate=1e-2, log_every=1, progress=False,
                                 seed=3, device="cpu", max_steps=4, save_every=2)
        Trainer(model, args, tiny.make_dataset(36), collate).train(**kwargs)

    full = build(0)
    run(tmp_path / "full", full)
    shutil.copytree(tmp_path / "full" / "checkpoint-2", tmp_path / "resumed" / "checkpoint-2")

    def no_second_model(*args, **kwargs):
        raise AssertionError("resume built a second model")

    monkeypatch.setattr(BertForSequenceClassification, "from_pretrained", no_second_model)
    resumed = build(1)  # other initial weights: all of them must come from the checkpoint
    run(tmp_path / "resumed", resumed, resume=True)
    want, got = full.state_dict(), resumed.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


def test_frozen_parameters_hold_for_freeze_steps_then_learn_and_resume_exactly(tmp_path):
    """`freeze` / `freeze_steps`: the named parameters stay bit for bit as they were (no update, no weight decay)
    while the rest learns; from step freeze_steps on they move; a resume inside the frozen span ends equal."""
    import shutil

    build, collate = tiny_bert_classifier, bert_classifier_collate

    def run(out, model, max_steps, **kwargs) -> None:
        args = TrainingArguments(output_dir=str(out), batch_size=12, learning_rate=1e-2, log_every=1, progress=False,
                                 seed=3, device="cpu", max_steps=max_steps, save_every=2, freeze=("bert.",),
                                 freeze_steps=3)
        Trainer(model, args, tiny.make_dataset(36), collate).train(**kwargs)

    start = {k: v.clone() for k, v in build().state_dict().items()}
    held = build()
    run(tmp_path / "held", held, 3)
    after = held.state_dict()
    assert all(torch.equal(after[k], start[k]) for k in start if k.startswith("bert."))
    assert not torch.equal(after["classifier.weight"], start["classifier.weight"])
    moved = build()
    run(tmp_path / "moved", moved, 4)
    assert not torch.equal(moved.state_dict()["bert.encoder.layer.0.output.dense.weight"],
                           start["bert.encoder.layer.0.output.dense.weight"])
    shutil.copytree(tmp_path / "moved" / "checkpoint-2", tmp_path / "resumed" / "checkpoint-2")
    resumed = build()
    run(tmp_path / "resumed", resumed, 4, resume=True)
    want, got = moved.state_dict(), resumed.state_dict()
    assert all(torch.equal(want[k], got[k]) for k in want)
    # Held steps skip the backward through the held parameters; under DDP their gradients are computed and
    # dropped instead. Both ways train the same weights, bit for bit.
    from contextlib import nullcontext

    dropped = build()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Trainer, "_holding", lambda self, held: nullcontext())
        run(tmp_path / "dropped", dropped, 4)
    assert all(torch.equal(want[k], v) for k, v in dropped.state_dict().items())
    assert all(p.requires_grad for p in moved.parameters())  # held only for the held steps
    with pytest.raises(ValueError, match="names no parameter"):
        Trainer(build(), TrainingArguments(output_dir=str(tmp_path / "none"), freeze=("encoder.",), freeze_steps=1,
                                           device="cpu"), tiny.make_dataset(36), collate)
    with pytest.raises(ValueError, match="prefixes"):
        TrainingArguments(output_dir=str(tmp_path), freeze_steps=2)


@pytest.mark.slow
def test_torchrun_two_processes_match_one_process_losses(tmp_path):
    run_torchrun([str(WORKER), "ddp", str(tmp_path / "ddp"), "--max-steps", "4", "--accumulation", "2"],
                 tmp_path / "ddp", tmp_path / "torchrun.log")
    ddp_losses = [r["loss"] for r in read_metrics(tmp_path / "ddp")]

    single = make_trainer(tmp_path / "one", model=tiny.build_model(), data=tiny.make_dataset(30),
                          max_steps=4).train()
    assert len(ddp_losses) == 4
    assert_close(ddp_losses, single.losses, rtol=1e-4, msg="losses, two processes against one")
    ddp_weights = load_file(str(tmp_path / "ddp" / "model.safetensors"))
    for key, value in load_file(str(tmp_path / "one" / "model.safetensors")).items():
        assert torch.allclose(ddp_weights[key], value, atol=1e-5), key
