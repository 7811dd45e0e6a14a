"""Sizing a run to a time budget: timed on a copy, so the model itself is untouched."""

import pytest
import torch

from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForSequenceClassification
from bertkit.training.arguments import TrainingArguments
from bertkit.training.budget import length_probes, steps_in_budget, wall_clock_budget


def test_steps_in_budget_times_a_copy_and_scales_with_the_budget():
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batches = [{"input_ids": torch.randint(0, 50, (4, 8)), "labels": torch.tensor([0, 1, 0, 1])} for _ in range(3)]
    short, long = steps_in_budget(model, batches, 1.0), steps_in_budget(model, batches, 1000.0)
    assert short >= 1 and long > 100 * short / 2
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert steps_in_budget(model, batches[:1], 1e-9) == 1  # never zero steps


def test_steps_in_budget_warms_up_then_times_every_batch():
    calls = []

    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(()))

        def forward(self, x):
            calls.append(int(x))
            return type("Out", (), {"loss": self.w * 0 + 1.0})()

    batches = [{"x": torch.tensor(i)} for i in range(3)]
    assert steps_in_budget(Counting(), batches, 10.0, min_seconds=0.0) >= 1
    assert calls == [0, 1, 2, 0, 1]  # two warm-up steps, then each batch timed once
    with pytest.raises(ValueError, match="at least one batch"):
        steps_in_budget(Counting(), [], 10.0)


def test_steps_in_budget_sizes_by_the_mean_cost_of_the_batches(monkeypatch):
    """A run of mixed lengths costs the mean of its batches' costs: one dear batch in three counts a third,
    and a one-off spike on a single step (a busy machine) does not count, since each batch takes its median."""
    from bertkit.training import budget

    costs = {0: [0.1] * 9, 1: [0.1] * 9, 2: [0.4] * 9}
    costs[0][3] = 50.0                                       # one spike on batch 0
    calls = {0: 0, 1: 0, 2: 0}

    def fake_step(model, optimizer, batch, bf16):
        i = int(batch["x"])
        calls[i] += 1
        return costs[i][calls[i] - 1]

    monkeypatch.setattr(budget, "timed_step", fake_step)
    model = torch.nn.Linear(1, 1)
    batches = [{"x": torch.tensor(i)} for i in range(3)]
    # 2 warm-up steps, then 3 rounds of 3 batches: medians 0.1, 0.1, 0.4 -> 0.2 s a step
    steps = budget.steps_in_budget(model, batches, 100.0, reserve=0.0, min_seconds=0.0, max_timed=9)
    assert steps == 500


def test_wall_clock_budget_turns_minutes_into_a_clock_the_schedule_follows(tmp_path):
    assert wall_clock_budget(2.5) == {"max_seconds": 150.0, "time_aware_schedule": True}
    assert wall_clock_budget(None) == {"max_seconds": None, "time_aware_schedule": False}
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=5, **wall_clock_budget(None))  # valid either way
    assert (args.max_seconds, args.time_aware_schedule) == (None, False)


def test_length_probes_take_like_lengths_from_short_to_long():
    lengths = [5, 90, 12, 40, 7, 128, 60, 33, 18, 128, 3, 75]
    probes = length_probes(lengths, 3, (0.0, 0.5, 0.95))
    assert [sorted(lengths[i] for i in batch) for batch in probes] == [[3, 5, 7], [40, 60, 75], [90, 128, 128]]
    assert length_probes(lengths[:2], 8, (0.5,)) == [[0, 1]]  # a batch larger than the data takes all of it
