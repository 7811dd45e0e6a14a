"""A model under torch.compile (`--compile`, bertkit.training.compiling): whole graphs, the eager model's values.

Compiled with the "aot_eager" backend, which traces and partitions as the default one does but skips Inductor's code
generation: a graph break or a recompilation shows the same, in a second rather than a minute.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch._dynamo
import torch._dynamo.utils

from bertkit.cli import main
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForPreTraining
from bertkit.training import compiling
from bertkit.training.compiling import compile_forward
from test_pretrain_cli import pretrain_args, workspace  # noqa: F401  (the fixture)
from tolerance import assert_close

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64)


def batch(seed: int, size: int, length: int, rate: float) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (size, length), generator=g)
    mask = torch.ones_like(ids)
    mask[0, length // 2:] = 0
    labels = torch.where((torch.rand(size, length, generator=g) < rate) & mask.bool(), ids, -100)
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids), labels=labels,
                next_sentence_label=torch.randint(0, 2, (size,), generator=g))


# shapes and predicted counts that change from batch to batch, and a batch that predicts nothing
BATCHES = [batch(0, 4, 16, 0.15), batch(1, 3, 23, 0.3), batch(2, 5, 11, 0.2), batch(3, 2, 9, 0.0)]


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield torch._dynamo.utils.counters
    torch._dynamo.reset()


def test_compiled_pretraining_forward_is_whole_graphs_with_the_eager_losses(fresh_dynamo):
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**TINY)).eval()
    forward = compile_forward(model, backend="aot_eager")
    with torch.no_grad():
        for b in BATCHES:
            eager, compiled = model(**b), forward(**b)
            assert_close(compiled.loss, eager.loss)
            assert_close(compiled.prediction_logits, eager.prediction_logits)
    assert not fresh_dynamo["graph_break"], dict(fresh_dynamo["graph_break"])
    # the first shape compiles, the next ones mark their sizes dynamic once; then no more recompiling
    graphs = fresh_dynamo["stats"]["unique_graphs"]
    with torch.no_grad():
        forward(**batch(9, 6, 13, 0.25))
    assert fresh_dynamo["stats"]["unique_graphs"] == graphs


def test_compiled_training_steps_with_dropout_are_whole_graphs_and_train(fresh_dynamo):
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**TINY, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)).train()
    forward = compile_forward(model, backend="aot_eager")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(24):
        loss = forward(**BATCHES[step % 3]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    assert not fresh_dynamo["graph_break"], dict(fresh_dynamo["graph_break"])
    assert all(torch.isfinite(torch.tensor(losses))) and sum(losses[-3:]) < 0.8 * sum(losses[:3]), losses


def test_a_minutes_plan_times_the_compiled_step_where_the_run_compiles(monkeypatch, fresh_dynamo):
    """`--compile --minutes`: the probe's copy of the model is compiled as the Trainer compiles it, so the plan
    counts compiled steps (its first steps, which compile, untimed); without --compile nothing is compiled."""
    from bertkit.training.budget import seconds_per_step

    monkeypatch.setattr(compiling, "BACKEND", "aot_eager")
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**TINY))
    eager = seconds_per_step(model, BATCHES[:2], min_seconds=0.0, max_timed=2)
    assert eager > 0 and fresh_dynamo["stats"]["unique_graphs"] == 0
    compiled = seconds_per_step(model, BATCHES[:2], min_seconds=0.0, max_timed=2, compile=True)
    assert compiled > 0 and fresh_dynamo["stats"]["unique_graphs"] > 0
    assert not fresh_dynamo["graph_break"], dict(fresh_dynamo["graph_break"])


def test_pretrain_compile_with_minutes_plans_and_trains(workspace, tmp_path, monkeypatch, capsys,  # noqa: F811
                                                        fresh_dynamo):
    monkeypatch.setattr(compiling, "BACKEND", "aot_eager")
    out = tmp_path / "run"
    assert main(pretrain_args(workspace, out, "--compile", "--minutes", "0.05")) == 0
    assert "steps of 8 sequences planned, a step timed at" in capsys.readouterr().out
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records and all(r["loss"] > 0 for r in records)
    assert fresh_dynamo["stats"]["unique_graphs"] > 0  # the probe and the run compiled
    assert not fresh_dynamo["graph_break"], dict(fresh_dynamo["graph_break"])
