"""Sizing a run to a time budget: timed on a copy, so the model itself is untouched."""

import pytest
import torch

from bertkit.config import BertConfig
from bertkit.models.heads import BertForSequenceClassification
from bertkit.training.budget import steps_in_budget


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
